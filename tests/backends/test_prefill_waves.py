"""The prefill attention's wave term in prefill lookups (backends/prefill_waves.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from backends.interp import interp_prefill
from backends.latency_table import Grid
from backends.models import load_model
from backends.prefill_waves import (PREFILL_SLOTS_PER_SM, prefill_wave_term, wave_costs,
                                    wave_params, wave_spec, wave_units, waves)
from tests.simulator.helpers import engine_prefills, linear_table

H200 = {"sms": 132}


def _prm(name: str, tp: int | None = None) -> np.ndarray:
    return wave_params(wave_spec(load_model(name, tp=tp), H200))


def test_the_launch_each_model_runs_worked_by_hand():
    """Two programs per SM of 132: 264 slots.  DeepSeek-V2-Lite's flash prefill has 16 heads x
    ceil(T / 128) programs: 2,048 tokens are 256 (one wave), 2,049 are 272 (two, the last of 8
    programs, one per SM: 0.854 of a wave), 4,224 are 528 (two full), 4,225 are 544 (three).
    Llama-3.1-8B's 2D unified attention takes 128 / 4 = 32 tokens a program over 8 KV heads:
    1,056 tokens are 8 x 33 = 264 (one wave), 1,057 are 272 (two; the last 8 programs: 0.882),
    1,568 are 392 (the last 128: 0.882), 1,600 are 400 (the last 136, over 132 SMs: a full
    wave), 2,080 are 520 (the last 256: full).  The 70B tp-8 shard's one KV head takes 128 / 8
    = 16 tokens a program: 4,224 tokens are 264 (one), 4,225 are 265 (two, 0.752).  After a
    long prefix AITER runs the 2D kernel only when the 16-row tile's grid exceeds 4 x 132 = 528
    programs: 8 x (T // 4 + 1) > 528 from 264 tokens, (T // 2 + 1) > 528 from 1,056."""
    assert PREFILL_SLOTS_PER_SM == 2
    v2 = _prm("deepseek-v2-lite")
    assert [waves(t, v2) for t in (1.0, 2048.0, 2049.0, 4224.0, 4225.0)] == [1, 1, 2, 2, 3]
    assert wave_units(2049.0, v2) == pytest.approx(1.854)
    assert wave_units(4224.0, v2) == 2.0
    d8 = _prm("llama-3.1-8b")
    assert [waves(t, d8) for t in (512.0, 1024.0, 1056.0, 1057.0, 8448.0)] == [1, 1, 1, 2, 8]
    assert wave_units(1057.0, d8) == pytest.approx(1.882)
    assert wave_units(2080.0, d8) == 2.0                         # 520 programs: last 256
    assert wave_units(1600.0, d8) == 2.0                         # 400: last 136, over 132
    assert wave_units(1568.0, d8) == pytest.approx(1.882)        # 392: last 128
    d70 = _prm("llama-3.1-70b", tp=8)
    assert [waves(t, d70) for t in (4208.0, 4224.0, 4225.0, 8448.0)] == [1, 1, 2, 2]
    assert wave_units(4225.0, d70) == pytest.approx(1.752)
    assert wave_spec(load_model("llama-3.1-8b"), H200)["min_tokens"] == 264
    assert wave_spec(load_model("llama-3.1-70b", tp=8), H200)["min_tokens"] == 1056
    assert wave_spec(load_model("deepseek-v2-lite"), H200)["min_tokens"] == 1
    # a head layout not measured counts its last wave in full
    odd = wave_params(wave_spec(load_model("llama-3.1-8b", tp=2), H200))
    assert wave_units(2113.0, odd) == 2.0                        # 4 x 67 = 268: last 4
    assert wave_spec(load_model("llama-3.1-8b"), None) is None     # no SM count: no term
    assert waves(5000.0, wave_params(None)) == 1.0


def _wave_table(*, share=None):
    """An 8B-shaped table whose prefix share is ``u(P) + v(P) x W(T)`` with v = 2 ms per wave
    per 1k prefix tokens and u = 0.1 ms per 1k (or ``share(T, P)`` instead), and the truth."""
    prm = _prm("llama-3.1-8b")
    tok = np.array([32.0, 256.0, 512.0, 1024.0, 1536.0, 2048.0, 3072.0, 4096.0, 6144.0, 8192.0])
    pre = np.array([0.0, 2048.0, 8192.0, 16384.0])

    def truth(T, P):
        base = 2e-3 + 3e-5 * T
        extra = share(T, P) if share else 1e-7 * P + 2e-6 * P * wave_units(T, prm)
        return base + extra

    vals = np.array([[truth(T, P) for P in pre] for T in tok])
    table = dataclasses.replace(linear_table(), prefill=Grid.build((tok, pre), vals),
                                prefill_waves=wave_spec(load_model("llama-3.1-8b"), H200))
    return table, truth


def test_a_wave_staircase_grid_is_recovered_between_its_points():
    """Latencies with a wave staircase in the prefix share are fitted back to their cost per
    wave and looked up exactly between grid tokens and between prefix lines, where the plain
    bilinear lookup misses by several percent."""
    table, truth = _wave_table()
    np.testing.assert_allclose(table._pf_wave, [0.0, 2e-6 * 2048, 2e-6 * 8192, 2e-6 * 16384],
                               rtol=1e-9)
    for T in (1100.0, 1280.0, 2560.0, 3500.0, 5000.0, 7000.0):
        for P in (0.0, 2048.0, 5000.0, 12288.0, 16384.0):
            assert table.prefill_s(T, P)[0] == pytest.approx(truth(T, P), rel=1e-9)
    g = table.prefill
    plain = interp_prefill(g.axes[0], g.axes[1], g.values, 2560.0, 16384.0)[0]
    assert 1.0 - plain / truth(2560.0, 16384.0) > 0.05   # the line spreads the third wave
    assert table.source["prefill_attention_waves"]["leave_one_out"]["kept"] is True
    assert "fitted_ms_per_wave" not in table.source["prefill_attention_waves"]


def test_the_term_is_zero_on_grid_tokens_at_prefix_zero_and_off_the_axis():
    table, _ = _wave_table()
    a0, a1 = table.prefill.axes
    args = (a0, a1, table._pf_wave, table._pf_wprm)
    for T in (1024.0, 3072.0, 8192.0):
        assert prefill_wave_term(*args, T, 16384.0) == 0.0
    assert prefill_wave_term(*args, 2560.0, 0.0) == 0.0
    assert prefill_wave_term(*args, 2560.0, -300.0) == 0.0          # below the first prefix
    assert prefill_wave_term(*args, 9000.0, 16384.0) == 0.0         # beyond the tokens axis
    assert prefill_wave_term(*args, 200.0, 16384.0) == 0.0          # the small tile's segment
    # between lines the cost is linear in the prefix; beyond the last it extends
    assert prefill_wave_term(*args, 2560.0, 24576.0) == pytest.approx(
        1.5 * prefill_wave_term(*args, 2560.0, 16384.0), rel=1e-9)


def test_a_share_without_waves_keeps_no_term():
    """A prefix share that grows as a line in the tokens (attention work T x P, no waves) has a
    positive slope on the wave count, but left out one at a time the grid's tokens are predicted
    worse with the term than by the line: no term."""
    table, truth = _wave_table(share=lambda T, P: 4e-9 * T * P)
    assert not table._pf_wave.any()
    rep = table.source["prefill_attention_waves"]
    assert rep["leave_one_out"]["kept"] is False
    assert rep["leave_one_out"]["mape_term_pct"] > rep["leave_one_out"]["mape_line_pct"]
    assert float(rep["fitted_ms_per_wave"]["16384"]) > 0.0       # what was refused is shown
    assert table.prefill_s(2560.0, 16384.0)[0] == pytest.approx(truth(2560.0, 16384.0), rel=1e-9)


def test_a_grid_without_a_prefix_zero_line_or_enough_waves_keeps_no_term():
    prm = _prm("llama-3.1-8b")
    tok = np.array([1024.0, 2048.0, 4096.0])
    vals = np.ones((3, 2))
    assert not wave_costs(tok, np.array([1024.0, 8192.0]), vals, prm).any()
    one_wave = np.array([256.0, 512.0, 1024.0])                     # every point one wave
    assert not wave_costs(one_wave, np.array([0.0, 8192.0]), vals, prm).any()


@pytest.mark.parametrize("model", ["deepseek-v2-lite", "deepseek-v3", "llama-3.1-8b",
                                   "llama-3.1-70b"])
def test_the_shipped_profiles_keep_the_term_and_stay_exact_on_their_grid(model):
    """Each shipped profile's grid favours the term in leave-one-out; every grid point is
    looked up at its value; the cost per wave grows with the prefix."""
    from backends.profile import load_profile
    from backends.shipped import default_profile

    t = load_profile(default_profile(model, "H200"))
    g = t.prefill
    for i, T in enumerate(g.axes[0]):
        for j, P in enumerate(g.axes[1]):
            assert t.prefill_s(float(T), float(P))[0] == pytest.approx(g.values[i, j], rel=1e-12)
    rep = t.source["prefill_attention_waves"]["leave_one_out"]
    assert rep["kept"] and rep["mape_term_pct"] < rep["mape_line_pct"]
    assert t._pf_wave[0] == 0.0 and np.all(np.diff(t._pf_wave) > 0)


def test_the_engine_times_prefix_prefills_with_the_term():
    """The compiled engine's prefill latencies equal the table's lookup on the long-context
    sample, whose chunked prompts prefill after long prefixes between grid tokens."""
    table, tok, pre, got, want = engine_prefills(
        "llama-3.1-8b", "traces/samples/synth_longctx_200.parquet", 40)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    a0, a1 = table.prefill.axes
    term = np.array([prefill_wave_term(a0, a1, table._pf_wave, table._pf_wprm, t, k)
                     for t, k in zip(tok, pre)])
    assert np.count_nonzero(term) >= 3 and np.max(np.abs(term / want)) > 0.02
