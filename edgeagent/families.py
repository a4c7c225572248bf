"""Which scorer family an agent places with: the policy model, or fedcore's FGD or BestFit profile on its own node.

The control plane chooses per cluster (``controlplane.selecting``: the workload replayed on the cluster's
fleet in the twin under each family, learned kept unless a heuristic beats it) and names the family in
the workload context every agent of the cluster gets with its acks. Claims compare scores across agents,
and a model's scores and a heuristic's are on different scales, so the whole cluster switches at one
versioned context: each agent at its next ack, as with the profile (for up to one report interval some
agents still claim with the previous family; the claim window then compares mixed scores once).

A heuristic family scores our one-row table with the twin's own profile (:func:`fedcore.scheduling.profiles.fgd`
on the context's pod types, :func:`~fedcore.scheduling.profiles.bestfit` normalised by the fleet's largest
node, which the context carries) through :func:`fedcore.scheduling.framework.rank`, and takes the GPU devices
that profile's device pick takes: the number and the devices the twin's profile would give this node.
"""

from __future__ import annotations

import numpy as np

from fedapi.workloadcontext import LEARNED, WorkloadContext
from fedcore.nodetable import NodeTable
from fedcore.pods import Pod
from fedcore.scheduling.framework import Profile, QueueSortPlugin, rank

from edgeagent.scoring import Assessment, Scorer

OWN_ROW = np.array([0])


class ProfileScorer:
    """A fedcore scheduling profile scoring our own node (row 0): its integer rank, its device pick, its queue order."""

    artifact = ""
    canary = ""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile

    @property
    def version(self) -> str:
        """The family's name: what peers see in our node state and claims are attributed to."""
        return self.profile.name

    @property
    def queue(self) -> QueueSortPlugin:
        return self.profile.queue

    def score(self, pod: Pod, table: NodeTable) -> float:
        return float(rank(self.profile, pod, table, OWN_ROW)[0])

    def assess(self, pod: Pod, table: NodeTable) -> Assessment:
        """The score alone: a heuristic's decisions are no experience rows for the model."""
        return Assessment(self.score(pod, table))

    def devices(self, pod: Pod, table: NodeTable) -> tuple[int, ...] | None:
        return self.profile.devices.pick(pod, table, 0)

    def fragmentation(self, table: NodeTable) -> float:
        return 0.0

    def set_context(self, context: WorkloadContext) -> None:
        """A new context builds a new scorer (:meth:`Families.take`): this one keeps what it was built with."""


def profile_for(context: WorkloadContext) -> Profile:
    """The twin's profile of the context's heuristic family, as it scores a fleet of the cluster's nodes."""
    from fedcore.scheduling import profiles  # only an agent told to switch pays for it

    if context.scorer == "fgd":
        if context.profile is None:
            raise ValueError("the fgd scorer needs the cluster's workload profile")
        return profiles.fgd(context.profile.types(context.cpu_pressure))
    if context.scorer == "bestfit":
        return profiles.bestfit(context.max_spec)
    raise ValueError(f"no heuristic profile is named {context.scorer!r}")


class Families:
    """The scorer the placer holds: ``base`` (the loaded model, or best fit without one) while the context says
    learned, else the context's heuristic profile. Sans-IO: the daemon hands each new context and model over."""

    def __init__(self, base: Scorer) -> None:
        self.base = base
        self.active: Scorer = base
        self._built: tuple[object, ...] = ()

    def take(self, context: WorkloadContext) -> Scorer:
        """The scorer for a new context (the known one): the base takes the context's profile either way, so a switch
        back to learned scores for the same workload at once."""
        if context.known:
            self.base.set_context(context)
        if context.scorer == LEARNED:
            self.active, self._built = self.base, ()
            return self.active
        key = (context.scorer, context.profile, context.cpu_pressure, context.max_spec)
        if key != self._built:
            self.active, self._built = ProfileScorer(profile_for(context)), key
        return self.active

    def rebase(self, base: Scorer, context: WorkloadContext) -> Scorer:
        """A new model loaded: it becomes the base (scoring for the cluster's context); returns the scorer to hold."""
        self.base = base
        return self.take(context)
