"""What can go wrong talking to a cluster, sorted by what the caller should do about it.

``TemporaryError`` subclasses are worth retrying with backoff (unreachable, 5xx, 409 conflict);
``PermanentError`` subclasses are not (invalid manifest, unknown cluster, missing object).
"""

from __future__ import annotations


class BackendError(Exception):
    """Base of every back-end failure; ``cluster`` names where it happened."""

    temporary = False

    def __init__(self, cluster: str, message: str) -> None:
        super().__init__(f"cluster {cluster}: {message}")
        self.cluster = cluster


class TemporaryError(BackendError):
    temporary = True


class PermanentError(BackendError):
    temporary = False


class Unreachable(TemporaryError):
    """The cluster's API cannot be reached (outage, partition, timeout)."""


class ServerError(TemporaryError):
    """The API answered 5xx."""


class Conflict(TemporaryError):
    """409: the object exists or changed under us; re-read and decide."""


class NotFound(PermanentError):
    """The named object does not exist."""


class InvalidRequest(PermanentError):
    """The request or manifest is malformed (400/422); retrying cannot help."""


class UnknownCluster(PermanentError):
    """No back end is registered under this cluster name."""
