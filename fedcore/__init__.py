"""Shared home of fedplane: domain types, trace readers, the scheduler framework and the digital twin.

Every other package may import this one; it imports none of them.
"""
