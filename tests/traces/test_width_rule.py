"""The width rule's prediction (traces.width_rule) on steps worked by hand, and its validation
rule: a trace recorded at depth 2, extended to 3, against the same steps recorded at depth 3."""

from __future__ import annotations

import numpy as np
import pytest

from traces.acceptance import estimate_position_accept_prob
from traces.width_rule import predicted_accepted, total_variation, truncated


def test_prediction_by_hand():
    d = [2, 2, 2, 2]
    a = [0, 1, 2, 2]
    p = [0.9, 0.8, 0.5, 0.4]
    # fewer drafts: min(a, 1)
    assert predicted_accepted(d, a, 1, p) == pytest.approx([0.25, 0.75])
    # one more: the two full steps accept position 3 with 0.5
    assert predicted_accepted(d, a, 3, p) == pytest.approx([0.25, 0.25, 0.25, 0.25])
    # two more: 2 (x0.5), 3 (x0.5 x 0.6), 4 (x0.5 x 0.4), of half the steps
    assert predicted_accepted(d, a, 4, p) == pytest.approx([0.25, 0.25, 0.25, 0.15, 0.10])
    # past the list: its last value repeats (0.4 at positions 5, 6)
    assert predicted_accepted([4], [4], 6, p) == pytest.approx([0, 0, 0, 0, 0.6, 0.24, 0.16])
    # a rejection before the recorded depth keeps its count
    assert predicted_accepted([3], [1], 6, p) == pytest.approx([0, 1, 0, 0, 0, 0, 0])


def test_depth_2_extended_to_3_against_depth_3():
    full = np.array([0, 1, 3, 3, 2, 3, 1, 3])        # recorded at depth 3
    a2 = np.minimum(full, 2)                          # the same steps at depth 2
    d2 = np.full(8, 2)
    truth = truncated(full, 3)
    assert truth == pytest.approx([1 / 8, 2 / 8, 1 / 8, 4 / 8])
    # with position 3's probability from the deeper data (4 of the 5 steps reaching it):
    # the steps' distribution is reproduced exactly
    exact = predicted_accepted(d2, a2, 3, [7 / 8, 5 / 7, 4 / 5])
    assert exact == pytest.approx(truth)
    # with what the depth-2 record estimates (p3 repeats p2 = 5/7): 5/8 of the steps are full,
    # 2/7 of them stop at 2, 5/7 reach 3
    p_rec = estimate_position_accept_prob(d2, a2)
    assert p_rec[:3] == pytest.approx([7 / 8, 5 / 7, 5 / 7], abs=1e-6)
    pred = predicted_accepted(d2, a2, 3, p_rec)
    assert pred == pytest.approx([1 / 8, 2 / 8, 10 / 56, 25 / 56], abs=1e-6)
    assert total_variation(pred, truth) == pytest.approx(4 / 8 - 25 / 56, abs=1e-6)
