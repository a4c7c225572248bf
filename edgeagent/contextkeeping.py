"""The workload context an agent scores with: the last valid one its control plane sent.

The control plane sends its cluster's context (:mod:`fedapi.workloadcontext`) with every report's
ack; this keeper decides what the agent does with it. Sans-IO: the shell (:mod:`edgeagent.daemon`)
passes each ack's field in and, when the value changed, hands it to the scorer
(:meth:`edgeagent.scoring.Scorer.set_context`: the cluster's workload profile, else the artifact's
shapes, with the cluster's CPU pressure; cheap: no model reload, one row's caches rebuilt) and, through
:class:`edgeagent.families.Families`, switches to the scorer family it names. The rules:

* an ack without one (an older control plane, or one that has not computed it yet) changes nothing;
* while the control plane is away the last value stays: agents keep placing as they were (the shell
  saves it, so an agent restarted meanwhile resumes with it rather than with its artifact's);
* a malformed value (NaN, negative, huge, not a map; a profile with ragged columns, weights not
  summing to 1, negative shapes, too many shapes) is refused with one log line per distinct reason,
  counted, and the previous value kept, profile included: garbage on the wire never moves the scores.

Every agent of a cluster applies the same value, so their claims stay comparable: each scores
its node exactly as the fleet-wide scorer with that profile would (``PolicyRuntime(model, types=...)``).
"""

from __future__ import annotations

import logging

from fedapi.workloadcontext import NONE, Profile, WorkloadContext, from_wire

log = logging.getLogger("edgeagent.contextkeeping")


def describe(profile: Profile | None) -> str:
    """A profile for one log line: its heaviest shapes, or the artifact's."""
    if profile is None:
        return "the artifact's pod shapes"
    heaviest = ", ".join(f"{c}m/{n}x{m}m {w:.2f}" for c, m, n, w in profile.shapes[:3])
    return f"{len(profile.shapes)} pod shapes ({heaviest}{', ...' if len(profile.shapes) > 3 else ''})"


class ContextKeeper:
    def __init__(self) -> None:
        self.current: WorkloadContext = NONE
        self.refused = 0
        """Contexts refused as malformed (the ``fedplane_agent_workload_context_refused`` counter)."""
        self._last_refusal = ""

    def receive(self, value: object, source: str = "the control plane") -> bool:
        """Take an ack's ``context`` field (or the one saved at ``source``); True when the scorer must take the value
        (the first known one, or a new value: before any, the scorer keeps its artifact's own)."""
        try:
            context = from_wire(value)
        except ValueError as exc:
            self.refused += 1
            if str(exc) != self._last_refusal:
                self._last_refusal = str(exc)
                log.warning("refused the workload context from %s (%s): keeping cpu_pressure %g, %s and scorer %s (version %d)",
                            source, exc, self.current.cpu_pressure, describe(self.current.profile), self.current.scorer,
                            self.current.version)
            return False
        self._last_refusal = ""
        if not context.known or context == self.current:
            return False
        before = self.current
        changed = (not before.known or context.cpu_pressure != before.cpu_pressure or context.profile != before.profile
                   or (context.scorer, context.max_spec) != (before.scorer, before.max_spec))
        if changed:
            log.info("workload context from %s: cpu_pressure %g -> %g, %s, scorer %s%s (version %d)",
                     source, before.cpu_pressure, context.cpu_pressure, describe(context.profile), context.scorer,
                     f" (was {before.scorer})" if before.known and before.scorer != context.scorer else "", context.version)
        self.current = context
        return changed
