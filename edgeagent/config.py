"""The agent's YAML configuration: typed sections, validated on load, every field documented.

One frozen dataclass per YAML section; each field carries its help text in
``metadata["help"]`` so ``fedplane agent --help`` and the README list the same
options. Loading is strict because an edge board runs unattended: an unknown
key (a typo) or a value of the wrong type or range is a :class:`ConfigError`
that names the field, never a silently ignored default.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import socket
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gossip.config import GossipConfig


class ConfigError(ValueError):
    """The configuration is invalid; ``field`` is the dotted path of the offending key."""

    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"{field_path}: {message}" if field_path else message)
        self.field = field_path


def _opt(default: Any, help: str, **kwargs: Any) -> Any:
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help}, **kwargs)
    return field(default=default, metadata={"help": help}, **kwargs)


_GOSSIP = GossipConfig()
"""Gossip's defaults have one home, :class:`gossip.config.GossipConfig`; this section only names them."""


@dataclass(frozen=True, slots=True)
class GossipSection:
    bind: str = _opt("127.0.0.1:7946", "host:port for gossip (UDP and TCP); also our name, so use an address peers reach")
    seeds: list[str] = _opt([], "host:port of peers to join through (the cluster's other agents)")
    key_file: str = _opt("", "file of base64 32-byte keys, one per line, primary first; empty = unencrypted")
    probe_interval: float = _opt(_GOSSIP.probe_interval, "seconds between SWIM probes (memberlist's LAN default; each probe wakes an idle agent, and a false death re-places a live node's pods); the probe timeout is half of it")
    gossip_interval: float = _opt(_GOSSIP.gossip_interval, "seconds between gossip rounds while news is queued (an idle member runs none)")
    pushpull_interval: float = _opt(_GOSSIP.pushpull_interval, "seconds between Bloom-digest anti-entropy exchanges")
    suspicion_mult: float = _opt(_GOSSIP.suspicion_mult, "suspicion timeout multiplier (higher: slower, surer death verdicts)")
    reap_after: float = _opt(_GOSSIP.reap_after, "seconds a dead peer and its records are kept before being forgotten")
    tombstone_ttl: float = _opt(_GOSSIP.tombstone_ttl, "seconds a withdrawn record's tombstone is kept (plus up to one push-pull interval); its owner withdraws again any version that outlives it")
    retransmit_mult: int = _opt(_GOSSIP.retransmit_mult, "each record change is relayed retransmit_mult * ceil(log10(N+1)) times by every member (anti-entropy repairs the rest)")

    def settings(self) -> GossipConfig:
        """The gossip core's configuration: its defaults, with this section's values."""
        return _GOSSIP.replace(
            probe_interval=self.probe_interval, probe_timeout=self.probe_interval / 2, gossip_interval=self.gossip_interval,
            pushpull_interval=self.pushpull_interval, suspicion_mult=self.suspicion_mult, reap_after=self.reap_after,
            tombstone_ttl=self.tombstone_ttl, retransmit_mult=self.retransmit_mult,
        )


@dataclass(frozen=True, slots=True)
class BackendSection:
    kind: Literal["twin", "kubernetes"] = _opt("twin", "cluster back end: the twin cluster API (twin link) or Kubernetes")
    address: str = _opt("127.0.0.1:7070", "twin: host:port of the control plane's twin link (`controlplane serve --agent-port`); replicated planes: every member's, comma-separated (the agent follows the leader)")
    kubeconfig: str = _opt("", "kubernetes: kubeconfig file; empty = in-cluster service account")
    scheduler_name: str = _opt("fedplane", "kubernetes: place only pods whose spec.schedulerName is this")
    timeout: float = _opt(5.0, "seconds before a back-end call counts as failed (retried with backoff)")
    status_interval: float = _opt(10.0, "seconds between node-status reports to the back end")
    relist_interval: float = _opt(60.0, "seconds between full relists of the cluster's pods (a missed watch event strands nothing)")
    credentials: str = _opt("", "credential file of role agent for this cluster (`controlplane credentials --role agent --cluster C [--node N]`): shown on the twin link and with reports; empty = none (a plane that checks credentials refuses the agent)")


@dataclass(frozen=True, slots=True)
class PlacementSection:
    claim_window: float = _opt(0.1, "seconds from a pod's first claim (anyone's) until its winner binds (lets rivals' claims arrive)")
    candidates: int = _opt(3, "only agents ranked in the top N by the gossiped node states claim at once; 0 = all")
    fallback_after: float = _opt(2.0, "seconds after which every eligible agent claims a pod it has seen no claim for")
    retry_interval: float = _opt(1.0, "seconds between re-examinations of pods nobody could take")
    compact_after: float = _opt(30.0, "seconds a finished pod's claim record stays in gossip before withdrawal")
    leave_grace: float = _opt(30.0, "seconds a peer that left gracefully (restart, upgrade) has to return before its pods are re-placed")
    quorum_settle: float = _opt(10.0, "seconds quorum must hold before peers that died while this agent lacked it are re-placed")
    max_awareness: int = _opt(2, "highest own Lifeguard health score (0 = healthy) at which this agent still acts for dead peers")


@dataclass(frozen=True, slots=True)
class ProbeSection:
    kind: Literal["real", "twin"] = _opt("real", "node probe: this machine (psutil, cgroup v2, /proc) or the twin's node list")
    interval: float = _opt(5.0, "seconds between load samples")
    arch: str = _opt("", "override the reported architecture (amd64, arm64, armv7); empty = detect")
    labels: dict[str, str] = _opt({}, "node labels for pods' node selectors (real probe)")


@dataclass(frozen=True, slots=True)
class ModelsSection:
    dir: str = _opt("", "directory of policy artifacts, one per version (federated's format); empty = <data_dir>/models")
    poll_interval: float = _opt(5.0, "seconds between scans of the models directory")
    shipped: bool = _opt(True, "score with the model shipped in the package while the models directory holds none (false: the heuristic)")
    fetch: bool = _opt(True, "twin back end: fetch the models the control plane's registry promotes or canaries over the twin link into the models directory (signed; only a version this agent lacks)")
    signer: str = _opt("", "hex Ed25519 public key the plane signs models with (its models directory's signing.key); empty = pin the first key the plane shows")


@dataclass(frozen=True, slots=True)
class FederationSection:
    enabled: bool = _opt(False, "supervise a Flower SuperNode that trains on the local experience log")
    superlink: str = _opt("127.0.0.1:9092", "host:port of the Flower SuperLink fleet API")
    restart_after: float = _opt(10.0, "seconds before a crashed SuperNode is first restarted (doubling after each crash)")


@dataclass(frozen=True, slots=True)
class ReportSection:
    address: str = _opt("", "host:port of the control plane's twin link for this agent's own reports; empty = backend.address (twin back end), none (kubernetes)")
    interval: float = _opt(1.0, "seconds between reports until the control plane's answer names its own interval")


@dataclass(frozen=True, slots=True)
class TlsSection:
    cert: str = _opt("", "PEM certificate of this agent: mutual TLS on the twin link (back end and reports) with key and ca; empty = plain TCP")
    key: str = _opt("", "PEM private key of this agent")
    ca: str = _opt("", "PEM CA that signs the control plane's certificate")

    @property
    def enabled(self) -> bool:
        return bool(self.cert or self.key or self.ca)


@dataclass(frozen=True, slots=True)
class WanSection:
    bind: str = _opt("", "host:port for the federation-wide gossip pool (liveness only, across clusters: others vouch for this cluster when it is cut off from the control plane); empty = off")
    seeds: list[str] = _opt([], "host:port of federation pool members to join through (agents of any cluster)")
    key_file: str = _opt("", "file of base64 AES keys for the federation pool; empty = unencrypted")


@dataclass(frozen=True, slots=True)
class IsolationSection:
    enabled: bool = _opt(False, "apply node isolation between online and batch pods: cgroup groups fedplane/online (highest CPU weight) and fedplane/batch (lowest weight, CPU quota from the control plane's batch offer), v2 or v1 by which hierarchy holds the controllers; with backend.kind kubernetes, kubelet's QoS groups instead (batch capped in its BestEffort parent, online metered as all pods less BestEffort; systemd or cgroupfs driver naming); the online group's CPU use is reported so the plane can reclaim what online pods reserve but do not use. Needs write access to the cgroup tree (root); off: no cgroup is written and nothing is reclaimed on this node")
    root: str = _opt("/sys/fs/cgroup", "the cgroup tree's mount point")
    resctrl: str = _opt("/sys/fs/resctrl", "where Intel RDT cache and memory-bandwidth partitioning is mounted (reported absent otherwise)")
    batch_memory_mib: int = _opt(0, "memory ceiling of the batch group (v2 memory.high, v1 memory.limit_in_bytes); 0 = none")


@dataclass(frozen=True, slots=True)
class HttpSection:
    bind: str = _opt("127.0.0.1:9465", "host:port serving /metrics and /healthz (the control plane's metrics port is 9464); empty = no HTTP server")


@dataclass(frozen=True, slots=True)
class AgentConfig:
    node: str = _opt("", "this node's name in the cluster (default: the hostname)")
    cluster: str = _opt("c0", "the cluster whose pending pods this agent places")
    data_dir: str = _opt("/var/lib/fedplane-agent", "the only directory the agent writes: journal, experience, models")
    log_level: Literal["debug", "info", "warning", "error"] = _opt("info", "logging threshold")
    experience_max_mib: int = _opt(64, "experience log size before it rotates (one older file is kept)")
    experience_ship: float = _opt(5.0, "twin back end: seconds between shipments of the experience log to the control plane over the twin link, resumed without duplicates (0: keep it on this node)")
    journal_max_mib: float = _opt(4.0, "claims journal size before it is rewritten as one snapshot of the ledger")
    gossip: GossipSection = field(default_factory=GossipSection)
    backend: BackendSection = field(default_factory=BackendSection)
    placement: PlacementSection = field(default_factory=PlacementSection)
    probe: ProbeSection = field(default_factory=ProbeSection)
    models: ModelsSection = field(default_factory=ModelsSection)
    federation: FederationSection = field(default_factory=FederationSection)
    http: HttpSection = field(default_factory=HttpSection)
    report: ReportSection = field(default_factory=ReportSection)
    tls: TlsSection = field(default_factory=TlsSection)
    wan: WanSection = field(default_factory=WanSection)
    isolation: IsolationSection = field(default_factory=IsolationSection)

    @property
    def report_address(self) -> str:
        """Where this agent reports itself ("" = nowhere)."""
        if self.report.address:
            return self.report.address
        return self.backend.address if self.backend.kind == "twin" else ""

    @property
    def node_name(self) -> str:
        return self.node or socket.gethostname()

    @property
    def data_path(self) -> Path:
        return Path(self.data_dir)

    @property
    def models_path(self) -> Path:
        return Path(self.models.dir) if self.models.dir else self.data_path / "models"

    @property
    def shipped_model(self) -> Path | None:
        """The package's model when ``models.shipped`` and the package holds one (armv7 wheels may not)."""
        if not self.models.shipped:
            return None
        from federated.runtime.scorer import default_model_dir

        path = default_model_dir()
        return path if (path / "manifest.json").is_file() else None


SECTIONS: dict[str, type] = {
    "gossip": GossipSection, "backend": BackendSection, "placement": PlacementSection, "probe": ProbeSection,
    "models": ModelsSection, "federation": FederationSection, "http": HttpSection, "report": ReportSection, "tls": TlsSection,
    "wan": WanSection, "isolation": IsolationSection,
}

_POSITIVE = {
    "gossip.probe_interval", "gossip.gossip_interval", "gossip.pushpull_interval", "gossip.suspicion_mult",
    "gossip.reap_after", "gossip.tombstone_ttl", "backend.timeout", "backend.status_interval", "backend.relist_interval", "placement.claim_window",
    "placement.fallback_after", "placement.retry_interval", "probe.interval", "models.poll_interval",
    "federation.restart_after", "experience_max_mib", "journal_max_mib", "gossip.retransmit_mult", "report.interval",
}
_ADDRESSES = {"gossip.bind", "backend.address", "federation.superlink"}


def parse(raw: object, source: str = "config") -> AgentConfig:
    """Build a validated config from a decoded YAML document (a mapping or None)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError("", f"{source}: the top level must be a mapping, got {type(raw).__name__}")
    top = {k: v for k, v in raw.items() if k not in SECTIONS}
    values = _fields(AgentConfig, top, "", skip=frozenset(SECTIONS))
    for name, cls in SECTIONS.items():
        section = raw.get(name, {})
        if section is None:
            section = {}
        if not isinstance(section, dict):
            raise ConfigError(name, f"must be a mapping, got {type(section).__name__}")
        values[name] = cls(**_fields(cls, section, name + "."))
    config = AgentConfig(**values)
    _check_ranges(config)
    return config


def load(path: str | Path) -> AgentConfig:
    """Read and validate a YAML file; every problem is a :class:`ConfigError` naming the field.

    ``$VAR`` and ``${VAR}`` are expanded from the environment first (a DaemonSet passes
    the pod IP that way); an unset one is an error, as is a key given twice in one mapping.
    """
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("", f"cannot read {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        line = Path(path).read_bytes()[: exc.start].count(b"\n") + 1
        raise ConfigError("", f"{path}:{line}: byte 0x{exc.object[exc.start]:02x} is not UTF-8") from None
    try:
        raw = yaml.load(_expand(text, path), Loader=_unique_keys_loader())  # a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError("", f"{path}: not valid YAML: {exc}") from exc
    return parse(raw, str(path))


_VAR = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_COMMENT = re.compile(r"(?:^|\s)#")


def _expand(text: str, path: str | Path) -> str:
    """``$VAR`` and ``${VAR}`` from the environment, outside comments; an unset one is a ConfigError naming it and its
    line (``os.path.expandvars`` keeps it literally: an agent would have joined as node ``$NODE_NAME``)."""
    out = []
    for n, line in enumerate(text.splitlines(keepends=True), start=1):
        found = _COMMENT.search(line)
        code, comment = (line[: found.start()], line[found.start():]) if found else (line, "")

        def value(m: re.Match[str], n: int = n) -> str:
            name = m.group(1) or m.group(2)
            if name not in os.environ:
                raise ConfigError("", f"{path}:{n}: ${name} is not set in the environment")
            return os.environ[name]
        out.append(_VAR.sub(value, code) + comment)
    return "".join(out)


def _unique_keys_loader() -> type:
    """A SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last one, silently)."""
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"key {key!r} given twice", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep)
    return UniqueKeys


def defaults() -> AgentConfig:
    return parse({})


def options() -> list[tuple[str, str, object]]:
    """Every option as (dotted name, help, default): the single source of the CLI help and the README."""
    out: list[tuple[str, str, object]] = []
    base = AgentConfig()
    for f in dataclasses.fields(AgentConfig):
        if f.name in SECTIONS:
            section = getattr(base, f.name)
            for sf in dataclasses.fields(section):
                out.append((f"{f.name}.{sf.name}", sf.metadata["help"], getattr(section, sf.name)))
        else:
            out.append((f.name, f.metadata["help"], getattr(base, f.name)))
    return out


def _fields(cls: type, raw: dict[Any, Any], prefix: str, skip: frozenset[str] = frozenset()) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)} - skip
    out: dict[str, Any] = {}
    for key, value in raw.items():
        path = f"{prefix}{key}"
        if not isinstance(key, str) or key not in known:
            raise ConfigError(path, f"unknown key (known: {', '.join(sorted(known))})")
        out[key] = _coerce(hints[key], value, path)
    return out


def _coerce(hint: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(hint)
    if origin is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            raise ConfigError(path, f"must be one of {', '.join(map(str, choices))}, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(path, f"must be a list, got {type(value).__name__}")
        (item,) = typing.get_args(hint)
        return [_coerce(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(path, f"must be a mapping, got {type(value).__name__}")
        return {_coerce(str, k, f"{path} key"): _coerce(str, v, f"{path}.{k}") for k, v in value.items()}
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, f"must be true or false, got {value!r}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, f"must be an integer, got {value!r}")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(path, f"must be a finite number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise ConfigError(path, f"must be a string, got {value!r}")
        return value
    raise ConfigError(path, f"unsupported option type {hint!r}")  # pragma: no cover - a bug in this module


def _check_ranges(config: AgentConfig) -> None:
    from gossip.config import split_addr

    for name, _, _ in options():
        value = _get(config, name)
        if name in _POSITIVE and not value > 0:
            raise ConfigError(name, f"must be > 0, got {value!r}")
        if name in _ADDRESSES:
            try:
                for address in str(value).split(",") if name == "backend.address" else (str(value),):
                    split_addr(address.strip())
            except ValueError as exc:
                raise ConfigError(name, str(exc)) from None
    if config.isolation.batch_memory_mib < 0:
        raise ConfigError("isolation.batch_memory_mib", f"must be >= 0 (0 = no ceiling), got {config.isolation.batch_memory_mib}")
    for i, seed in enumerate(config.gossip.seeds):
        try:
            split_addr(seed)
        except ValueError as exc:
            raise ConfigError(f"gossip.seeds[{i}]", str(exc)) from None
    for name in ("http.bind", "report.address", "wan.bind"):
        value = _get(config, name)
        if value:
            try:
                split_addr(value)
            except ValueError as exc:
                raise ConfigError(name, str(exc)) from None
    if config.experience_ship < 0:
        raise ConfigError("experience_ship", f"must be >= 0 (0: never), got {config.experience_ship!r}")
    signer = config.models.signer
    if signer and (len(signer) != 64 or any(c not in "0123456789abcdefABCDEF" for c in signer)):
        raise ConfigError("models.signer", "must be the plane's Ed25519 public key: 64 hex digits")
    if config.tls.enabled:
        for name in ("cert", "key", "ca"):
            if not getattr(config.tls, name):
                raise ConfigError(f"tls.{name}", "mutual TLS needs all of tls.cert, tls.key and tls.ca")
    for i, seed in enumerate(config.wan.seeds):
        try:
            split_addr(seed)
        except ValueError as exc:
            raise ConfigError(f"wan.seeds[{i}]", str(exc)) from None
    if config.placement.candidates < 0:
        raise ConfigError("placement.candidates", f"must be >= 0, got {config.placement.candidates}")
    if config.placement.max_awareness < 0:
        raise ConfigError("placement.max_awareness", f"must be >= 0, got {config.placement.max_awareness}")
    for name in ("compact_after", "leave_grace", "quorum_settle"):
        if getattr(config.placement, name) < 0:
            raise ConfigError(f"placement.{name}", "must be >= 0")
    if config.probe.arch and config.probe.arch not in ("amd64", "arm64", "armv7"):
        raise ConfigError("probe.arch", f"must be amd64, arm64 or armv7, got {config.probe.arch!r}")
    if not config.data_dir:
        raise ConfigError("data_dir", "must name a directory")


def _get(config: AgentConfig, dotted: str) -> Any:
    obj: Any = config
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj

