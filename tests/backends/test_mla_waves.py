"""Batch sizes between grid points on the MLA path, interpolated in decode waves
(backends.mla_waves), worked out by hand from the kernel's split rule."""

from __future__ import annotations

import numpy as np
import pytest

from backends.attention_kv import NATT, attention_params
from backends.interp import interp2, interp3
from backends.mla_waves import decode_wave_cost, interp2_waves, interp3_waves

MLA = attention_params({"kernel": "mla_decode", "sms": 132, "head_groups": 1,
                        "target_programs": 264, "min_splits": 2, "max_splits": 16,
                        "slots_per_sm": {"mla_decode": 2}})
#: a profile without attention metadata (an older one): plain interpolation everywhere
NONE = np.zeros(NATT)


def test_the_wave_cost_is_waves_over_splits():
    """16 rows: 16 splits, 256 programs, one wave of 264; 20 rows: 14 splits, 280, two; 24
    rows: 11 splits, 264, one; 192 rows: 2 splits, 384, two."""
    for rows, want in ((16, 1 / 16), (20, 2 / 14), (24, 1 / 11), (192, 2 / 2)):
        assert decode_wave_cost(float(rows), MLA) == pytest.approx(want)


def grid():
    """Verify graphs of width 4 at 4 and 6 requests: 10 ms at KV 0, rising by 40 x the wave
    cost at KV 10,000 (2.5 ms at 16 rows, 3.636 ms at 24)."""
    a0, a1, a2 = np.array([4.0, 6.0]), np.array([4.0]), np.array([0.0, 10000.0])
    v = np.array([[[10e-3, 10e-3 + 40e-3 / 16]], [[10e-3, 10e-3 + 40e-3 / 11]]])
    return a0, a1, a2, v


def test_a_batch_between_grid_points_takes_its_own_wave_count():
    """5 requests (20 rows, two waves over 14 splits): 10 ms + 40 x 2/14 ms = 15.714 ms at KV
    10,000, where the line between 4 and 6 requests says 13.068 ms; half the rise at 5,000."""
    a0, a1, a2, v = grid()
    got, out = interp3_waves(a0, a1, a2, v, 5.0, 4.0, 10000.0, 4.0, MLA)
    assert got == pytest.approx(10e-3 + 40e-3 * 2 / 14) and not out
    assert interp3(a0, a1, a2, v, 5.0, 4.0, 10000.0)[0] == pytest.approx(
        10e-3 + (40e-3 / 16 + 40e-3 / 11) / 2)
    assert interp3_waves(a0, a1, a2, v, 5.0, 4.0, 5000.0, 4.0, MLA)[0] == pytest.approx(
        10e-3 + 20e-3 * 2 / 14)


def test_grid_points_other_profiles_and_the_outside_are_plain_interpolation():
    a0, a1, a2, v = grid()
    for bs, kv in ((4.0, 10000.0), (6.0, 7000.0), (8.0, 10000.0), (3.0, 5000.0)):
        assert interp3_waves(a0, a1, a2, v, bs, 4.0, kv, 4.0, MLA) == interp3(
            a0, a1, a2, v, bs, 4.0, kv)
    assert interp3_waves(a0, a1, a2, v, 5.0, 4.0, 10000.0, 4.0, NONE) == interp3(
        a0, a1, a2, v, 5.0, 4.0, 10000.0)
    assert interp3_waves(a0, a1, a2, v, 8.0, 4.0, 10000.0, 4.0, MLA)[1]  # beyond: flagged


def test_draft_steps_take_one_row_per_request():
    """Draft grids at 16 and 24 requests, 20 between: the same costs with one row each."""
    a0, a1 = np.array([16.0, 24.0]), np.array([0.0, 10000.0])
    v = np.array([[1e-3, 1e-3 + 40e-3 / 16], [1e-3, 1e-3 + 40e-3 / 11]])
    got, _ = interp2_waves(a0, a1, v, 20.0, 10000.0, MLA)
    assert got == pytest.approx(1e-3 + 40e-3 * 2 / 14)
    assert interp2_waves(a0, a1, v, 20.0, 10000.0, NONE) == interp2(a0, a1, v, 20.0, 10000.0)


def test_width_3_counts_the_4_rows_the_kernels_run():
    """44 requests at width 3 run 176 rows (2 splits, 352 programs: two waves, cost 1), not 132
    (264 programs, one wave): between 40 and 48 requests (two waves each) it is the line."""
    a0, a1, a2 = np.array([40.0, 48.0]), np.array([3.0]), np.array([512.0, 16384.0])
    v = np.array([[[85e-3, 220e-3]], [[87e-3, 240e-3]]])
    got, _ = interp3_waves(a0, a1, a2, v, 44.0, 3.0, 10976.0, 3.0, MLA)
    assert got == pytest.approx(interp3(a0, a1, a2, v, 44.0, 3.0, 10976.0)[0])
