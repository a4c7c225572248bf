"""The fedplane control plane: cluster registry, multi-vantage verdicts, planner, journaled migrations.

Cores (``verdicts``, ``forecast``, ``placing``, ``planner``, ``migrations``) take ``now`` and return
values; ``runtime`` drives them on a tick; ``service``/``server`` put them on the wire (``fedapi``).
"""
