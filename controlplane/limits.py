"""What one request may ask of the control plane: the bounds every RPC's input is checked against at the server.

The CLI bounds its options, but any process that reaches the port can send a message by hand: a twin cluster of
2**31-1 nodes once took the host's memory down. So the domain types (:class:`~controlplane.registry.ClusterSpec`,
:class:`~controlplane.workloads.Workload`) check these limits on the way in, and a value past one is refused as
INVALID_ARGUMENT with the limit stated. With the message cap and the server's concurrency cap, no request can make the
plane allocate more than a few MiB, and all of them together ~``MAX_CONCURRENT_RPCS x MAX_MESSAGE_BYTES``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sized

MAX_MESSAGE_BYTES = 1 << 20      # one request on the wire (gRPC's own default is 4 MiB); the largest real one, an
                                 # autoscale series of 20,000 samples, is ~180 KB
MAX_TWIN_NODES = 10_000          # as the CLI's --twin-nodes (one twin node costs ~2 KB of numpy rows)
MAX_CPU_MILLI = 10_000_000       # 10,000 cores: per twin node, per pod
MAX_MEMORY_MIB = 16 << 20        # 16 TiB: per twin node, per pod
MAX_GPUS = 64                    # per twin node, per pod (the node table keeps a cell per device of the largest node)
MAX_NAME = 253                   # a label key, a kube context, a GPU model, a region (DNS subdomain length)
MAX_VALUE = 253                  # a label value
MAX_PATH = 4096
MAX_ENTRIES = 64                 # labels, selectors, tolerations, archs
MAX_LIST = 1_000                 # clusters, regions or avoided clusters named in one policy
MAX_PRIORITY = 2**31 - 1         # an int32, as Kubernetes' priority
MAX_DETAILS = 1024               # characters of an error's message sent back (it may quote a request of a megabyte)


def count(what: str, value: int, low: int, high: int) -> None:
    """``low <= value <= high``, else ValueError stating the range."""
    if not low <= value <= high:
        raise ValueError(f"{what} must be in {low}..{high}, got {_short(value)}")


def text(what: str, value: str, most: int = MAX_NAME, printable: bool = True) -> None:
    """At most ``most`` (printable) characters, else ValueError stating the limit."""
    if len(value) > most or (printable and not value.isprintable()):
        raise ValueError(f"{what} must be at most {most}{' printable' if printable else ''} characters, got {len(value)}: {_short(value)}")


def entries(what: str, values: Sized, most: int = MAX_ENTRIES) -> None:
    if len(values) > most:
        raise ValueError(f"{what}: at most {most} entries, got {len(values)}")


def labels(what: str, values: Mapping[str, str]) -> None:
    """A label map: at most MAX_ENTRIES entries, keys of MAX_NAME and values of MAX_VALUE printable characters."""
    entries(what, values)
    for key, value in values.items():
        text(f"{what} key", key)
        text(f"{what} value of {key[:40]!r}", value, MAX_VALUE)


def _short(value: object) -> str:
    """A value for an error message, cut to 40 characters (the request may hold megabytes of it)."""
    shown = repr(value)
    return shown if len(shown) <= 40 else f"{shown[:37]}..."
