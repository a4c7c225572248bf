"""The fenced-bind rule every back end calls (fedcore.backends.fencing), as a table."""

from __future__ import annotations

import pytest

from fedcore.backends.fencing import Seen, fence
from fedcore.backends.model import BindOutcome


@pytest.mark.parametrize(("seen", "outcome", "node", "epoch"), [
    (None, BindOutcome.REJECTED, "n1", 2),
    (Seen(3, "", "Pending"), BindOutcome.STALE_EPOCH, "", 3),          # behind or ahead: the pod's epoch comes back
    (Seen(1, "n0", "Running"), BindOutcome.STALE_EPOCH, "n0", 1),
    (Seen(2, "n1", "Succeeded"), BindOutcome.REJECTED, "n1", 2),       # finished pods keep their node: never "already bound"
    (Seen(2, "", "Deleted"), BindOutcome.REJECTED, "n1", 2),
    (Seen(2, "n1", "Running"), BindOutcome.ALREADY_BOUND, "n1", 2),
    (Seen(2, "n0", "Running"), BindOutcome.DUPLICATE, "n0", 2),         # names the holder
    (Seen(2, "", "Running"), BindOutcome.REJECTED, "n1", 2),
    (Seen(2, "", "Pending"), None, "", 0),                               # the back end may bind
])
def test_the_fence_answers_in_the_contracts_order(seen: Seen | None, outcome: BindOutcome | None, node: str, epoch: int) -> None:
    got = fence("p", "n1", 2, seen)
    if outcome is None:
        assert got is None
    else:
        assert got is not None and (got.outcome, got.node, got.epoch) == (outcome, node, epoch)
