"""Batch sizes between grid points on AITER's unified attention, placed by its waves
(backends.dense_waves), worked out by hand from the kernel's grid and segment rules."""

from __future__ import annotations

import numpy as np
import pytest

from backends.attention_kv import ATT_BSW, attention_params
from backends.dense_waves import dense_wave_cost, wave_position
from backends.interp import interp3
from backends.mla_waves import interp2_waves, interp3_waves

#: the Llama-3.1-70B tp-8 shard's launch: 1 KV head per GPU, 2 query positions per 16-row tile,
#: 3D slots 8 per SM x 132 x 31/32 = 1,023, 2D slots 4 per SM = 528, tail exponents 0.3 (3D),
#: 1.0 (2D), 0.25 (2D decode); as the profile gives it (``backend.bs_interp = auto``: the line)
SHARD_AUTO = attention_params({"sms": 132, "kv_heads": 1, "block_q": 2, "target_programs": 528,
                               "min_segments": 16, "max_segments": 128,
                               "slots_per_sm": {"2d": 4, "2d_decode": 8, "3d": 8}})
#: the same under ``backend.bs_interp = waves``
SHARD = SHARD_AUTO.copy()
SHARD[ATT_BSW] = 1.0
#: the Llama-3.1-8B's: 8 KV heads, 4 query positions per tile (``waves``)
L8B = attention_params({"sms": 132, "kv_heads": 8, "block_q": 4, "target_programs": 528,
                        "min_segments": 16, "max_segments": 128,
                        "slots_per_sm": {"2d": 4, "2d_decode": 6, "3d": 8}})
L8B[ATT_BSW] = 1.0


def test_the_wave_cost_counts_programs_waves_and_segments():
    """Width 8 on the shard: 12 requests have 2D programs (48 + 12) x 1 = 60 <= 528, so the 3D
    kernel, ceil(528 / 60) = 9 -> 16 segments, 12 x 4 tiles x 16 = 768 programs, one wave of
    1,023 filled to 768/1,023: cost 0.75073 ** 0.3 / 16 = 0.91758 / 16. 16 requests: 80 2D
    programs -> 16 segments, 1,024 programs, two waves, the second holding 1 of 1,023: (1 +
    0.12505) / 16."""
    c12, k12 = dense_wave_cost(12.0, 8.0, False, SHARD)
    c16, k16 = dense_wave_cost(16.0, 8.0, False, SHARD)
    assert k12 == k16 == 0  # KERNEL_3D
    assert c12 == pytest.approx(0.91758 / 16, rel=1e-4)
    assert c16 == pytest.approx(1.12505 / 16, rel=1e-4)


def test_a_batch_before_the_wave_boundary_keeps_the_near_points_rise():
    """Eager verify at 12 and 16 requests of width 8: 10 / 12 ms at KV 512, 29.8 / 41.1 ms at
    KV 32,768 (rises 19.8 and 29.1 ms). 14 requests are 896 programs, still one wave: cost
    0.96102 / 16, so they sit (0.96102 - 0.91758) / (1.12505 - 0.91758) = 0.2094 of the way
    from 12 to 16 in wave cost: 11 ms + 19.8 + 0.2094 x 9.3 = 32.747 ms, where the line says
    35.45 ms. On a grid point, or under ``backend.bs_interp`` auto (the default on this
    kernel), it is the line."""
    a0, a1, a2 = np.array([12.0, 16.0]), np.array([8.0]), np.array([512.0, 32768.0])
    v = np.array([[[10e-3, 29.8e-3]], [[12e-3, 41.1e-3]]])
    assert wave_position(12.0, 16.0, 14.0, 0.5, 8.0, False, SHARD) == pytest.approx(0.2094, abs=1e-4)
    got, out = interp3_waves(a0, a1, a2, v, 14.0, 8.0, 32768.0, 8.0, SHARD)
    assert got == pytest.approx(32.747e-3, rel=1e-4) and not out
    assert interp3(a0, a1, a2, v, 14.0, 8.0, 32768.0)[0] == pytest.approx(35.45e-3)
    for bs in (12.0, 16.0):
        assert interp3_waves(a0, a1, a2, v, bs, 8.0, 32768.0, 8.0, SHARD) == interp3(
            a0, a1, a2, v, bs, 8.0, 32768.0)
    assert interp3_waves(a0, a1, a2, v, 14.0, 8.0, 512.0, 8.0, SHARD)[0] == pytest.approx(11e-3)
    assert interp3_waves(a0, a1, a2, v, 14.0, 8.0, 32768.0, 8.0, SHARD_AUTO) == interp3(
        a0, a1, a2, v, 14.0, 8.0, 32768.0)


def test_many_waves_of_the_2d_kernel_and_a_kernel_switch_are_the_line():
    """The 8B at width 6: 32 and 48 requests run the 2D kernel ((48 + 32) x 8 = 640 > 528
    programs), whose waves are not placed (their steps are not where its occupancy says): 40
    requests are the line. 24 requests run the 3D kernel ((36 + 24) x 8 = 480), 28 the 2D: 28
    between 24 and 32 is the line too."""
    a0, a1, a2 = np.array([24.0, 32.0, 48.0]), np.array([6.0]), np.array([512.0, 8192.0])
    v = np.array([[[8e-3, 20e-3]], [[9e-3, 26e-3]], [[11e-3, 35e-3]]])
    for bs in (40.0, 28.0):
        got, _ = interp3_waves(a0, a1, a2, v, bs, 6.0, 8192.0, 6.0, L8B)
        assert got == pytest.approx(interp3(a0, a1, a2, v, bs, 6.0, 8192.0)[0], rel=1e-12)
    assert dense_wave_cost(24.0, 6.0, False, L8B)[1] == 0
    assert dense_wave_cost(28.0, 6.0, False, L8B)[1] == 1


def test_draft_steps_place_by_their_one_row_launch():
    """Draft steps (one row, all-decode) at 8 and 24 requests on the shard: 2D programs 12 / 36
    -> 64 / 16 segments, 512 / 384 programs, one wave each; 16 requests: 24 -> 32 segments,
    512 programs. Costs 0.81249/64, 0.81249/32 and 0.74531/16 at 8, 16 and 24 (0.50049 ** 0.3
    = 0.81249, 0.37537 ** 0.3 = 0.74531): 16 sits (0.025390 - 0.012695) / (0.046582 - 0.012695)
    = 0.3746 of the way, not 0.5, so its rise is 1 + 0.3746 x 3 ms at KV 8,192."""
    a0, a1 = np.array([8.0, 24.0]), np.array([512.0, 8192.0])
    v = np.array([[2e-3, 3e-3], [3e-3, 7e-3]])
    s = wave_position(8.0, 24.0, 16.0, 0.5, 1.0, True, SHARD)
    assert s == pytest.approx(0.3746, abs=2e-4)
    got, _ = interp2_waves(a0, a1, v, 16.0, 8192.0, SHARD)
    assert got == pytest.approx(2.5e-3 + 1e-3 + s * 3e-3, rel=1e-9)
