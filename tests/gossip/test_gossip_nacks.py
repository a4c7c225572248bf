"""Lifeguard's nacks (issue #35): a helper's nack reaches the prober before its round closes, so a plain death
raises no one's awareness score; only a prober whose own messages are lost reads its helpers' silence as its fault."""

from __future__ import annotations

from gossip.config import GossipConfig
from fedplane.lab.doubles.memnet import InMemoryNetwork


def test_the_probers_of_a_dead_member_keep_a_healthy_score_at_shipped_timings() -> None:
    for seed in (1, 2, 3):
        net = InMemoryNetwork(seed)
        names = [f"n{i}" for i in range(5)]
        for name in names:
            net.add(name, config=GossipConfig(), seeds=names[:2])
        net.run_until(10.0)
        net.crash("n4")
        worst = 0
        while net.now < 30.0:
            net.run_for(0.25)
            worst = max(worst, *(net.nodes[n].awareness for n in names[:4]))
        assert worst == 0, f"seed {seed}: a survivor's awareness reached {worst} (its helpers' nacks came too late)"
