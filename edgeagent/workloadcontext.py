"""The workload context an agent scores with: the last valid one its control plane sent.

The control plane sends its cluster's context (:mod:`fedapi.workloadcontext`) with every report's
ack; this keeper decides what the agent does with it. Sans-IO: the shell (:mod:`edgeagent.daemon`)
passes each ack's field in and, when the value changed, hands it to the scorer
(:meth:`edgeagent.scoring.Scorer.set_cpu_pressure`, cheap: no model reload). The rules:

* an ack without one (an older control plane, or one that has not computed it yet) changes nothing;
* while the control plane is away the last value stays: agents keep placing as they were (the shell
  saves it, so an agent restarted meanwhile resumes with it rather than with its artifact's);
* a malformed value (NaN, negative, huge, not a map) is refused with one log line per distinct
  reason, counted, and the previous value kept: garbage on the wire never moves the scores.

Every agent of a cluster applies the same value, so their claims stay comparable: each scores
its node exactly as the fleet-wide scorer with that pressure would.
"""

from __future__ import annotations

import logging

from fedapi.workloadcontext import NONE, WorkloadContext, from_wire

log = logging.getLogger("edgeagent.workloadcontext")


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
                log.warning("refused the workload context from %s (%s): keeping cpu_pressure %g",
                            source, exc, self.current.cpu_pressure)
            return False
        self._last_refusal = ""
        if not context.known or context == self.current:
            return False
        changed = not self.current.known or context.cpu_pressure != self.current.cpu_pressure
        if changed:
            log.info("workload context from %s: cpu_pressure %g -> %g (version %d)",
                     source, self.current.cpu_pressure, context.cpu_pressure, context.version)
        self.current = context
        return changed
