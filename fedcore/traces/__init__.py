"""Readers for the real traces (Alibaba Cluster Trace Program: openb GPU v2023, DLRM v2025) and a synthetic generator.

Every reader validates as it goes: a malformed row raises :class:`TraceError` naming the file and line.
"""

from fedcore.traces.errors import TraceError

__all__ = ["TraceError"]
