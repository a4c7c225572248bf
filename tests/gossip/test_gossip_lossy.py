"""User-space packet loss for real-socket tests and drills (this kernel has no netem)."""

from __future__ import annotations

import random
from typing import Any

import pytest

from gossip.lossy import LossyDatagrams


class Sink:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, Any]] = []
        self.closed = False

    def sendto(self, data: bytes, addr: Any = None) -> None:
        self.sent.append((data, addr))

    def close(self) -> None:
        self.closed = True


def wrap(sink: Sink, loss: float, seed: int = 1) -> LossyDatagrams:
    return LossyDatagrams(sink, loss, random.Random(seed))  # type: ignore[arg-type]


def test_a_seeded_share_is_dropped_and_the_rest_passes_unchanged() -> None:
    sink = Sink()
    lossy = wrap(sink, 0.25)
    for i in range(4000):
        lossy.sendto(i.to_bytes(2, "big"), ("10.0.0.1", 7946))
    assert 900 < lossy.dropped < 1100 and lossy.sent + lossy.dropped == 4000
    assert [d for d, _ in sink.sent] == sorted(d for d, _ in sink.sent), "order kept, nothing altered"
    again = wrap(Sink(), 0.25)
    for i in range(4000):
        again.sendto(b"x")
    assert again.dropped == lossy.dropped, "the same seed drops the same datagrams"
    lossy.close()
    assert sink.closed


@pytest.mark.parametrize("loss", [-0.1, 1.0, 2.0])
def test_a_loss_outside_zero_to_one_is_refused(loss: float) -> None:
    with pytest.raises(ValueError, match="loss must be"):
        wrap(Sink(), loss)


def test_injected_loss_reads_the_environment_and_ignores_nonsense(monkeypatch: pytest.MonkeyPatch) -> None:
    from edgeagent.daemon import injected_loss
    from fedcore.agentcmd import LOSS_ENV

    monkeypatch.setenv(LOSS_ENV, "0.1")
    assert injected_loss() == 0.1
    for bad in ("lots", "0.95", "-1", "nan"):
        monkeypatch.setenv(LOSS_ENV, bad)
        assert injected_loss() == 0.0
    monkeypatch.delenv(LOSS_ENV)
    assert injected_loss() == 0.0
