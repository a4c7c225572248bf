"""A sans-IO replica simulator: demand arrives, a controller asks for replicas, pods start up.

Time is the simulator's own (ticks of ``TICK_S``); nothing reads a clock. A pod asked for at t
serves from ``t + startup_s``; a scale-down removes starting pods first, then ready ones. Demand
beyond the ready pods' capacity (1.0 per pod) is *late* (served late or not at all). Cost is
replica-seconds of every pod asked for, starting or ready — what a cloud bills.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from controlplane.autoscaling.controllers import Observation

TICK_S = 5.0


Forecast = Callable[[int], tuple[float | None, float | None, float]]  # tick -> (q95 peak, q99 peak, trust) over the start-up


def no_forecast(i: int) -> tuple[None, None, float]:
    return None, None, 0.0


class Controller(Protocol):
    name: str

    def decide(self, obs: Observation) -> int: ...


@dataclass(slots=True)
class ReplicaSet:
    """The pods of one workload: each one's ready time."""

    startup_s: float
    ready_at: list[float] = field(default_factory=list)

    def scale(self, now: float, n: int) -> None:
        if n > len(self.ready_at):
            self.ready_at += [now + self.startup_s] * (n - len(self.ready_at))
        else:
            del self.ready_at[n:]  # kept in ascending order: the newest (starting) pods go first

    def ready(self, now: float) -> int:
        return sum(1 for t in self.ready_at if t <= now)


@dataclass(frozen=True, slots=True)
class Run:
    """One controller on one series: per-tick traces and the summary figures."""

    policy: str
    demand: np.ndarray
    ready: np.ndarray
    replicas: np.ndarray
    late: np.ndarray

    @property
    def late_pct(self) -> float:
        return float(100 * self.late.sum() / max(self.demand.sum(), 1e-12))

    @property
    def cost(self) -> float:
        return float(self.replicas.sum() * TICK_S)

    @property
    def util_mean(self) -> float:
        return float(100 * np.mean(np.minimum(1.0, self.demand / np.maximum(self.ready, 1e-12))))

    @property
    def actions(self) -> int:
        return int(np.count_nonzero(np.diff(self.replicas)))


@dataclass(slots=True)
class Sim:
    """One workload's pods under one controller, one tick at a time (the learned controller's trainer steps it too)."""

    controller: Controller
    demand: np.ndarray
    pods: ReplicaSet
    forecast: Forecast = no_forecast
    i: int = 0
    ready: list[int] = field(default_factory=list)
    replicas: list[int] = field(default_factory=list)
    late: list[float] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.i >= len(self.demand)

    def observe(self) -> Observation:
        now = self.i * TICK_S
        peak, tail, trust = self.forecast(self.i)
        return Observation(now, float(self.demand[self.i]), self.pods.ready(now), len(self.pods.ready_at), peak, tail, trust)

    def tick(self) -> None:
        obs = self.observe()
        self.pods.scale(obs.now, self.controller.decide(obs))
        r = self.pods.ready(obs.now)
        self.ready.append(r)
        self.replicas.append(len(self.pods.ready_at))
        self.late.append(max(0.0, obs.demand - r))
        self.i += 1

    def result(self) -> Run:
        n = len(self.ready)
        return Run(self.controller.name, np.asarray(self.demand[:n], dtype=float), np.asarray(self.ready, dtype=float),
                   np.asarray(self.replicas, dtype=float), np.asarray(self.late))


def simulate(controller: Controller, demand: np.ndarray, startup_s: float, initial: int,
             forecast: Forecast = no_forecast) -> Run:
    """Drive ``controller`` over ``demand`` (one value per tick); ``initial`` pods are ready at t=0."""
    sim = Sim(controller, demand, ReplicaSet(startup_s, [0.0] * initial), forecast)
    while not sim.done:
        sim.tick()
    return sim.result()
