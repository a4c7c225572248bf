"""The learned plugin's NormalizeScore: the best candidate lands on 100, integer bins are the model's own, float error is snapped."""

from __future__ import annotations

import numpy as np

from federated.runtime.plugin import normalize


def test_whole_number_shift_keeps_bins_and_puts_the_best_on_100() -> None:
    raw = np.array([187.2, 186.9, 150.5, 12.0])  # a kube-default-like teacher on its 0-200 scale
    out = normalize(raw)
    assert np.floor(out.max()) == 100
    np.testing.assert_array_equal(np.floor(out) - np.floor(out.max()), np.floor(raw) - np.floor(raw.max()))


def test_output_a_hair_below_an_integer_counts_as_that_integer() -> None:
    raw = np.array([49.999996, 50.0, 49.2])  # FGD's 50 for a zero drop, as a float32 fit returns it
    bins = np.floor(np.clip(normalize(raw), 0, 100))
    assert bins[0] == bins[1] == 100 and bins[2] == 99


def test_no_candidates() -> None:
    assert normalize(np.empty(0)).size == 0
