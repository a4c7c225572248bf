"""Flower federation of the placement policy: ServerApp, ClientApp, robust aggregation, engine, registry.

Only the ``supervisor`` module is for the edge agent; it imports neither torch nor flwr, and
neither does this package's ``__init__``, so importing it stays cheap.
"""
