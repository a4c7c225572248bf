"""Named scheduling profiles, and the registry through which other packages add theirs.

Built in: ``kube-default`` (LeastAllocated + BalancedAllocation, as kube-scheduler),
``bestfit``, ``dotprod``, ``fgd`` and ``random``. Other packages contribute profiles
(e.g. ``learned`` from ``federated``) through the ``fedplane.profiles`` entry-point
group, so this bottom layer never imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points

from fedcore.nodes import Node
from fedcore.pods import Pod
from fedcore.scheduling.filters import default_filters
from fedcore.scheduling.fragmentation import PodTypes
from fedcore.scheduling.fragments import FragmentationGradient
from fedcore.scheduling.framework import Profile, RandomDevices
from fedcore.scheduling.scores import BalancedAllocation, BestFit, DotProduct, LeastAllocated, RandomScore


@dataclass(frozen=True, slots=True)
class ProfileContext:
    """What a profile may learn from before a run: its seed, the workload it will see (for typical pod types) and the
    fleet it runs on (empty when unknown)."""

    seed: int = 0
    workload: Sequence[Pod] = ()
    fleet: Sequence[Node] = ()


ProfileFactory = Callable[[ProfileContext], Profile]


class UnknownProfileError(ValueError):
    """The profile name is not built in and no installed package provides it."""


def _kube_default(ctx: ProfileContext) -> Profile:
    return Profile("kube-default", default_filters(), [(LeastAllocated(), 1.0), (BalancedAllocation(), 1.0)])


def bestfit(spec: tuple[float, float] | None = None) -> Profile:
    """The BestFit profile; ``spec`` fixes its (CPU milli, GPU milli) normaliser (default: the table's largest node)."""
    return Profile("bestfit", default_filters(), [(BestFit(spec), 1.0)])


def fgd(types: PodTypes) -> Profile:
    """The FGD profile against these typical pod types (its score and its device pick)."""
    plugin = FragmentationGradient(types)
    return Profile("fgd", default_filters(), [(plugin, 1.0)], devices=plugin)


def _bestfit(ctx: ProfileContext) -> Profile:
    return bestfit()


def _dotprod(ctx: ProfileContext) -> Profile:
    return Profile("dotprod", default_filters(), [(DotProduct(), 1.0)])


def _fgd(ctx: ProfileContext) -> Profile:
    if not ctx.workload:
        raise ValueError("the fgd profile needs the workload to learn its typical pod types")
    return fgd(PodTypes.from_pods(ctx.workload))


def _random(ctx: ProfileContext) -> Profile:
    return Profile("random", default_filters(), [(RandomScore(ctx.seed), 1.0)], devices=RandomDevices(ctx.seed))


BUILT_IN: dict[str, ProfileFactory] = {
    "kube-default": _kube_default,
    "bestfit": _bestfit,
    "dotprod": _dotprod,
    "fgd": _fgd,
    "random": _random,
}


def available() -> list[str]:
    """Every profile name: built in plus those installed packages provide."""
    return sorted(set(BUILT_IN) | {ep.name for ep in entry_points(group="fedplane.profiles")})


def make(name: str, ctx: ProfileContext) -> Profile:
    """Build the named profile for one run."""
    if name in BUILT_IN:
        return BUILT_IN[name](ctx)
    for ep in entry_points(group="fedplane.profiles", name=name):
        factory: ProfileFactory = ep.load()
        return factory(ctx)
    raise UnknownProfileError(f"unknown profile {name!r}; choose from: {', '.join(available())}")
