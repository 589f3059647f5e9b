"""The fused-MoE block term of prefill lookups (backends/moe_prefill.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from backends.aiter.moe import ep_layout, routing_plan
from backends.latency_table import Grid
from backends.moe_prefill import (block_costs, expected_blocks, moe_params, moe_spec,
                                  prefill_block_term)
from backends.models import load_model
from backends.interp import interp_prefill
from tests.simulator.helpers import engine_prefills, linear_table

V2LITE = moe_spec(load_model("deepseek-v2-lite"))
V3 = moe_spec(load_model("deepseek-v3"))


def test_the_spec_reads_the_shard_each_model_runs():
    """DeepSeek-V2-Lite runs whole (64 experts, 6 a token, 26 MoE layers after one dense, bf16:
    AITER's 64/128/256-row tiles); DeepSeek-V3 as rank 0 of tp 8 / ep 8 (32 of 256 experts, 58
    MoE layers after three dense, FP8: 64/128/128); a dense model has none."""
    assert (V2LITE["experts_local"], V2LITE["top_k"], V2LITE["moe_layers"], V2LITE["ep"],
            V2LITE["block_m"]) == (64, 6, 26, 1, [64, 128, 256])
    assert (V3["experts_local"], V3["top_k"], V3["moe_layers"], V3["ep"], V3["block_m"]) == (
        32, 8, 58, 8, [64, 128, 128])
    assert moe_spec(load_model("llama-3.1-8b")) is None
    assert not moe_params(None).any()


def test_block_counts_worked_by_hand():
    """One token takes its 6 experts' one block each in each of 26 layers: 156 blocks.  At 4,096
    tokens each expert holds about 384 pairs (sd 18.6): two 256-row blocks each, 64 x 2 x 26 =
    3,328.  At 1,024-2,048 tokens (96-192 pairs, at most about 230): one each, 1,664."""
    prm = moe_params(V2LITE)
    assert expected_blocks(1.0, prm) == pytest.approx(156.0, rel=1e-12)
    assert expected_blocks(4096.0, prm) == pytest.approx(3328.0, rel=1e-6)
    assert expected_blocks(1024.0, prm) == pytest.approx(1664.0, rel=1e-6)
    assert expected_blocks(2048.0, prm) == pytest.approx(1664.0, rel=1e-3)
    assert expected_blocks(0.0, prm) == 0.0


def _realised(spec, T: int, layers: list[int]) -> float:
    """Blocks of the executor's own seeded plans (layer i seeded i, as MLATransformer seeds a
    target of seed 0), counted directly."""
    total = 0.0
    for i in layers:
        plan = routing_plan(T, spec["experts"], spec["top_k"], seed=i)
        if spec["ep"] > 1:
            _, lid, _, _ = ep_layout(plan, spec["experts_local"], 0)
            counts = np.bincount(lid, minlength=spec["experts_local"])
            rows = len(lid)
        else:
            counts = np.bincount(plan.ravel(), minlength=spec["experts"])
            rows = T
        m = spec["block_m"][0 if rows < 256 else (1 if rows < 1024 else 2)]
        total += float(np.sum(-(-counts // m)))
    return total


@pytest.mark.parametrize("T", [1, 40, 2048, 2522, 2731, 2903, 4096, 6000, 8192])
def test_the_expectation_follows_the_executors_seeded_plans(T):
    """The 26 layers' realised block counts of DeepSeek-V2-Lite's plans are within 1.5% of the
    expectation at every token count, on and off the staircase's risers."""
    got = _realised(V2LITE, T, list(range(1, 27)))
    assert got == pytest.approx(expected_blocks(float(T), moe_params(V2LITE)), rel=0.015)


@pytest.mark.parametrize("T", [300, 3000, 4096, 8192])
def test_the_expectation_follows_the_ep_shards_plans(T):
    """With expert parallelism the pairs on rank 0's 32 experts (the first 8 of 58 layers,
    scaled) agree with the expectation within 3%."""
    got = _realised(V3, T, list(range(3, 11))) * 58 / 8
    assert got == pytest.approx(expected_blocks(float(T), moe_params(V3)), rel=0.03)


def _staircase_table(cost=50e-6, step=0.0):
    """A V2-Lite-like table whose prefill latencies are exactly 20 ms + 9 us a token + 1 ns a
    token per prefix token + ``cost`` per block, on a grid of 1,024-8,192 tokens and prefixes 0
    and 8,192 (the large tile only); ``step`` adds that many seconds to the prefix-8,192 line
    from 3,072 tokens on (an attention wave that line alone has)."""
    prm = moe_params(V2LITE)
    tok = np.array([1024.0, 2048.0, 3072.0, 4096.0, 8192.0])
    pre = np.array([0.0, 8192.0])

    def truth(T, P):
        return 20e-3 + 9e-6 * T + 1e-9 * T * P + cost * expected_blocks(float(T), prm)

    vals = np.array([[truth(t, p) + (step if (p > 0 and t >= 3072) else 0.0) for p in pre]
                     for t in tok])
    base = linear_table()
    table = dataclasses.replace(base, prefill=Grid.build((tok, pre), vals), moe=V2LITE)
    return table, truth


def test_a_staircase_grid_is_recovered_between_its_points():
    """Latencies built from the block count are fitted back to their cost and looked up
    exactly between grid points, where the plain bilinear lookup misses by over 10%."""
    table, truth = _staircase_table()
    g = table.prefill
    assert table._pf_cost[2] == pytest.approx(50e-6, rel=1e-6)
    assert not table._pf_cost[:2].any()          # no grid tokens in the smaller tiles
    for T in (2300.0, 2522.0, 2700.0, 2903.0, 5000.0, 5600.0, 7000.0):
        for P in (0.0, 4096.0, 8192.0):
            assert table.prefill_s(T, P)[0] == pytest.approx(truth(T, P), rel=1e-9)
    plain = interp_prefill(g.axes[0], g.axes[1], g.values, 2522.0, 0.0)[0]
    assert plain / truth(2522.0, 0.0) - 1.0 > 0.10
    # on grid tokens, and beyond the axis, the term adds nothing
    for T in (1024.0, 3072.0, 8192.0, 9000.0, 500.0):
        assert prefill_block_term(g.axes[0], table._pf_cost, table._pf_moe, T) == 0.0


def test_a_step_one_prefix_line_has_alone_does_not_raise_the_block_cost():
    """The kernel does not read the prefix: a 30 ms step on the long-prefix line (an attention
    wave, as DeepSeek-V2-Lite has at prefix 16,384 past 2,048 tokens) would fit that line a
    larger cost; the tile keeps the cost of the line without it."""
    table, _ = _staircase_table(step=30e-3)
    assert table._pf_cost[2] == pytest.approx(50e-6, rel=1e-6)


def test_a_line_or_a_cost_beyond_the_pass_is_not_fitted():
    """A grid that is a line in the tokens gets no cost; nor does a tile whose fitted cost times
    its blocks would exceed the whole pass (DeepSeek-V3's 128-row tile, where the count is
    nearly flat and any curvature would fit ms a block)."""
    prm = moe_params(V2LITE)
    tok = np.array([1024.0, 2048.0, 3072.0, 4096.0, 8192.0])
    line = (5e-3 + 4e-5 * tok)[:, None]
    assert not block_costs(tok, line, prm).any()
    p3 = moe_params(V3)
    tok3 = np.array([256.0, 384.0, 896.0, 1023.0])
    concave = (0.10 + 0.04 * np.sqrt(tok3 / 1023.0))[:, None]
    report: dict = {}
    assert not block_costs(tok3, concave, p3, report).any()
    assert report[1]["within_pass_time"] is False


def test_the_shipped_moe_profiles_are_exact_on_their_grid_and_dense_ones_unchanged():
    """On every grid point of the shipped DeepSeek-V2-Lite profile the lookup is the grid's
    value; its 256-row tile has a cost and the 2,522-token prefill no longer sits on the line;
    a dense profile carries no MoE parameters."""
    from backends.profile import load_profile
    from backends.shipped import default_profile

    t = load_profile(default_profile("deepseek-v2-lite", "H200"))
    g = t.prefill
    for i, T in enumerate(g.axes[0]):
        for j, P in enumerate(g.axes[1]):
            assert t.prefill_s(float(T), float(P))[0] == pytest.approx(g.values[i, j], rel=1e-12)
    assert t._pf_cost[2] > 0
    line = interp_prefill(g.axes[0], g.axes[1], g.values, 2522.0, 0.0)[0]
    assert t.prefill_s(2522.0, 0.0)[0] < 0.9 * line
    assert "prefill_moe_blocks" in t.source
    d = load_profile(default_profile("llama-3.1-8b", "H200"))
    assert not d._pf_moe.any() and "prefill_moe_blocks" not in d.source


def test_the_engine_times_prefills_with_the_term():
    """The compiled engine's prefill latencies equal the table's lookup, term included, on a
    run of the shipped DeepSeek-V2-Lite profile that has prefills on the staircase's riser."""
    table, tok, pre, got, want = engine_prefills(
        "deepseek-v2-lite", "traces/samples/azure_conv_eagle_2k.parquet", 160)
    assert len(tok) > 50
    np.testing.assert_allclose(got, want, rtol=1e-12)
    g = table.prefill
    plain = np.array([interp_prefill(g.axes[0], g.axes[1], g.values, t, k)[0]
                      for t, k in zip(tok, pre)])
    assert np.max(np.abs(want / plain - 1.0)) > 0.05   # some prefill sits on a riser
