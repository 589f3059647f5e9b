"""backends/mla_fluid.py: the MLA decode's programs as a fluid, worked by hand, and against the
per-program replay in benchmarks/mla_dispatch_replay.py (another implementation)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from backends.attention_kv import ATT_MAXSEG, ATT_MINSEG, ATT_S3D, ATT_TARGET, NATT
from backends.mla_fluid import fluid_kv, fluid_makespan, scratch_size, uniform_makespan

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def test_two_requests_on_four_slots_by_hand():
    """KV 8 and 4, one row each, 2 splits, 4 slots, no overhead: programs 4, 4, 2, 2 all start
    at once, so the launch takes 4 (the uniform launch at the mean 6: 3). With the bandwidth
    shared beyond 2 running programs, the four run at half speed until the 2s finish (time 4),
    then the two 4s' remaining 2 at full speed: 6; the uniform launch 3 at half speed: 6."""
    s = np.zeros(scratch_size(2))
    kv = np.array([8, 4])
    assert fluid_makespan(kv, 2, 2, 1.0, 2.0, 0.0, 4.0, np.inf, s) == pytest.approx(4.0)
    assert uniform_makespan(2.0, 2.0, 3.0, 4.0, np.inf) == pytest.approx(3.0)
    assert fluid_makespan(kv, 2, 2, 1.0, 2.0, 0.0, 4.0, 2.0, s) == pytest.approx(6.0)
    assert uniform_makespan(2.0, 2.0, 3.0, 4.0, 2.0) == pytest.approx(6.0)


def test_order_and_waves_by_hand():
    """2 slots, 1 split, no overhead, rows of KV 1, 1, 6 in that order: the 1s run together
    (time 1), then the 6 alone: 7. Long row first (6, 1, 1): the 6 and a 1 start, the second
    1 takes the freed slot at 1 and ends at 2, the 6 at 6. Padding rows add their overhead."""
    s = np.zeros(scratch_size(3))
    assert fluid_makespan(np.array([1, 1, 6]), 3, 3, 1.0, 1.0, 0.0, 2.0, np.inf, s) == 7.0
    assert fluid_makespan(np.array([6, 1, 1]), 3, 3, 1.0, 1.0, 0.0, 2.0, np.inf, s) == 6.0
    # one request of KV 6 padded to 3 requests: padding rows of 0 KV take the overhead, 1 each;
    # with 2 slots the 7 and a 1 start, the other 1 follows: the 7 ends last at 7
    assert fluid_makespan(np.array([6]), 1, 3, 1.0, 1.0, 1.0, 2.0, np.inf, s) == 7.0
    assert fluid_makespan(np.array([6, 1, 1]), 3, 3, 1.0, 1.0, 0.0, 2.0, np.inf,
                          np.zeros(2)) == -1.0  # too little scratch: the caller keeps its rule


@pytest.mark.parametrize("seed", range(6))
def test_the_grouped_form_equals_the_per_program_replay(seed):
    """Random launches (1-40 requests, widths 1, 2 and 4, padding, H200's 264 slots): the ratio
    of makespans equals the one ``mla_dispatch_replay.fluid_makespan`` gives, which schedules
    every program of ``program_work`` one by one."""
    import mla_dispatch_replay as rep
    from backends.aiter.mla_kernels import decode_splits

    rng = np.random.default_rng(seed)
    for _ in range(20):
        n = int(rng.integers(1, 41))
        padded = n + int(rng.integers(0, 5))
        width = int(rng.choice([1, 2, 4]))
        kv = rng.integers(0, 20000, n).astype(np.float64)
        nsat = float(rng.choice([132.0, 200.0, np.inf]))
        ovh = float(rng.choice([0.0, 64.0]))
        splits = float(decode_splits(padded * width))
        mix = fluid_makespan(kv, n, padded, float(width), splits, ovh, 264.0, nsat,
                             np.zeros(scratch_size(padded * width)))
        uni = uniform_makespan(float(padded * width), splits, kv.mean() / splits + ovh, 264.0, nsat)
        want = (rep.fluid_makespan(rep.program_work(kv, padded, width, ovh), 264, nsat)
                / rep.fluid_makespan(rep.program_work(np.full(padded, kv.mean()), padded, width,
                                                      ovh), 264, nsat))
        assert mix / uni == pytest.approx(want, rel=1e-9)


def test_fluid_kv_on_a_linear_grid_by_hand():
    """A grid with latency 1 + KV at 2 requests of width 1; 4 slots, splits 2; KV 8 and 4,
    overhead 1: programs 5, 5, 3, 3 take 5, the uniform launch at the mean 6 (4 each) 4, ratio
    1.25; the launch's time 1 + 6 x 1.25 = 8.5 is the line's at KV 7.5."""
    att = np.zeros(NATT)
    att[ATT_TARGET], att[ATT_MINSEG], att[ATT_MAXSEG], att[ATT_S3D] = 4.0, 2.0, 16.0, 4.0
    a0, a1, a2 = np.array([2.0]), np.array([1.0]), np.array([0.0, 100.0])
    v = np.array([[[1.0, 101.0]]])
    k = fluid_kv(np.array([8, 4]), 2, 2, 1.0, 1.0, att, np.inf, 1.0, a0, a1, a2, v,
                 np.zeros(scratch_size(2)))
    assert k == pytest.approx(7.5)
