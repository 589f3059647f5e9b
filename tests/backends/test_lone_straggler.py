"""The lone-straggler form of AITER's 2D verify kernel in the lookups, worked by hand on a small
table: the engine's compiled coordinate, the table executor, fidelity's lookup points."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.attention_kv import (ATT_DLAYERS, ATT_LAYERS, ATT_LONE, LONE_STRAGGLER_2D_S,
                                   attention_params, effective_kv, kv_at_latency, table_attention,
                                   verify_kv)
from backends.interp import interp3
from backends.latency_table import Grid, LatencyTable, TableExecutor
from backends.protocol import DraftBatch, DraftExtendBatch, VerifyBatch

#: H200-like grid constants (Llama-3.1-8B heads: 8 KV heads, 4 query rows per program).
#: 0.25 us per KV token per layer, so a 4-layer target has a = 1 us per token and its 1-layer
#: draft 0.25 us.
ATT = {"sms": 132, "kv_heads": 8, "block_q": 4, "target_programs": 528, "min_segments": 16,
       "max_segments": 128, "slots_per_sm": {"2d": 4, "2d_decode": 6, "3d": 8},
       "lone_straggler_2d_s": 0.25e-6}
MODEL = {"name": "hand", "layers": 4}

# Verify and draft-extend grids: at bs 64 and width 4 the uniform batch takes 10, 12 and 16 ms
# at KV 1,000, 2,000 and 4,000, so its line over KV starts at T_0 = 10 - 2 = 8 ms (2 us a token
# on the first segment). 64 x 4 rows: (64 + 64) x 8 = 1,024 programs > 528: the 2D kernel.
# At bs 8: (8 + 8) x 8 = 128 programs, the 3D split-KV kernel.
BS, WIDTHS, KVS = (8.0, 64.0), (2.0, 4.0), (1000.0, 2000.0, 4000.0)
LINE_64 = (0.010, 0.012, 0.016)


def _table(model=MODEL, att=ATT) -> LatencyTable:
    v = np.empty((2, 2, 3))
    v[1, 1] = LINE_64
    v[1, 0] = np.asarray(LINE_64) * 0.8
    v[0] = np.asarray(LINE_64) * 0.3
    g3 = Grid.build((BS, WIDTHS, KVS), v)
    g2 = Grid.build((BS, KVS), v[:, 0, :] * 0.1)
    pre = Grid.build(((128.0, 1024.0), (0.0, 1024.0)), [[1e-3, 2e-3], [4e-3, 5e-3]])
    return LatencyTable(verify_graph=g3, verify_eager=g3, draft_graph=g2, draft_eager=g2,
                        prefill=pre, extend_graph=g3, extend_eager=g3,
                        source={"model": model} if model else {}, attention=att)


def _verify(kv, bs_padded=64, width=4):
    kv = np.asarray(kv)
    return VerifyBatch(bs_real=len(kv), bs_padded=bs_padded, widths=np.full(len(kv), width),
                       kv_lens=kv, launch_width=width, mode="uniform", graph=True)


def test_attention_params_carry_the_constant_and_the_layers():
    a = attention_params({k: v for k, v in ATT.items() if k != "lone_straggler_2d_s"},
                         {"layers": 32})
    assert a[ATT_LONE] == LONE_STRAGGLER_2D_S and (a[ATT_LAYERS], a[ATT_DLAYERS]) == (32, 1)
    b = table_attention(_table())
    assert (b[ATT_LONE], b[ATT_LAYERS]) == (0.25e-6, 4)
    assert table_attention(_table(model=None))[ATT_LAYERS] == 0   # no model: no form


def test_a_straggler_on_the_2d_kernel_costs_its_own_time_worked_by_hand():
    """63 requests at 1,000 and one at 4,000 in 64 x width 4: the mean is 67,000 / 64 =
    1,046.875, where the uniform line gives 10.09 ms; the straggler alone gives T_0 + 1 us x
    4,000 = 12 ms, the longer, which the uniform batch takes at KV 2,000. With one at 5,000:
    13 ms, reached halfway up the segment 2,000-4,000 (2 us a token): KV 2,500."""
    ex = TableExecutor("t", _table())
    for long_, kv, ms in ((4000, 2000.0, 12.0), (5000, 2500.0, 13.0)):
        b = _verify([1000] * 63 + [long_])
        t = ex.verify(b)
        assert t.latency_s == pytest.approx(ms * 1e-3, rel=1e-12)
        from backends.latency_table import verify_axes
        g = ex.latency_table().verify_graph
        assert verify_axes(b, table_attention(ex.latency_table()), g)[2] == pytest.approx(kv)


def test_the_draft_model_runs_one_layer_so_its_straggler_costs_a_quarter():
    """The same batch in a draft-extend launch: the draft model's one layer gives a = 0.25 us a
    token, T_0 + 1 ms = 9 ms < 10.09 ms at the mean, so it is looked up at the mean."""
    ex = TableExecutor("t", _table())
    kv = np.array([1000] * 63 + [4000])
    b = DraftExtendBatch(bs_real=64, bs_padded=64, width=4, kv_lens=kv, graph=True)
    assert ex.draft_extend(b) == pytest.approx(0.010 + 2e-6 * 46.875, rel=1e-12)


def test_uniform_batches_are_looked_up_at_their_kv():
    ex = TableExecutor("t", _table())
    assert ex.verify(_verify([2000] * 64)).latency_s == pytest.approx(0.012, rel=1e-12)


def test_3d_and_decode_batches_keep_the_waves_rule():
    """8 x width 4 runs the 3D kernel, a draft step of 64 the 2D decode kernel: the table with
    the form gives them what it gives without the model's layers (the form off)."""
    with_form, without = TableExecutor("t", _table()), TableExecutor("t", _table(model=None))
    kv = np.array([1000] * 7 + [4000])
    b3 = _verify(kv, bs_padded=8)
    assert with_form.verify(b3).latency_s == without.verify(b3).latency_s
    d = DraftBatch(bs_real=64, bs_padded=64, kv_lens=np.array([1000] * 63 + [4000]), passes=3,
                   graph=True)
    assert with_form.draft(d) == without.draft(d)
    # and off the 2D kernel the coordinate is effective_kv's
    att = table_attention(_table())
    g = _table().verify_graph
    got = verify_kv(kv.sum(), 4000.0, 8.0, 8.0, 32.0, att[ATT_LAYERS], att, *g.axes, g.values,
                    8.0, 4.0)
    assert got == effective_kv(float(kv.sum()), 4000.0, 8.0, 8.0, 32.0, False, att)


def test_fidelity_looks_a_live_step_up_as_the_engine_does():
    """A recorded step (mean and longest KV, no lookup coordinate) is predicted at the form's
    coordinate: the 13 ms of the worked example."""
    from analysis.fidelity.lookup import lookup_points, predict

    n = 2
    steps = pa.table({"kind": ["verify", "draft_extend"], "graph": [True] * n, "bs": [64] * n,
                      "bs_padded": [64] * n, "width": [4] * n, "tokens": [256] * n,
                      "kv_mean": [(63 * 1000 + 5000) / 64] * n, "kv_max": [5000] * n,
                      "passes": [1] * n, "latency_s": [0.013] * n})
    p = lookup_points(steps, _table())
    assert p["kv"][0] == pytest.approx(2500.0)
    pred, _ = predict(p, _table())
    assert pred[0] == pytest.approx(0.013, rel=1e-12)
    assert p["kv"][1] == pytest.approx((63 * 1000 + 5000) / 64)   # the draft's layer: the mean


@settings(max_examples=200, deadline=None)
@given(line=st.lists(st.floats(1e-4, 1e-2), min_size=2, max_size=6),
       lo=st.floats(0.0, 9000.0), span=st.floats(0.0, 9000.0), frac=st.floats(0.0, 1.0),
       bs=st.floats(1.0, 300.0), width=st.floats(1.0, 12.0))
def test_kv_at_latency_reaches_the_target_exactly(line, lo, span, frac, bs, width):
    """Anywhere on or off a random monotone grid (batch and width beyond it too), the KV found
    gives the target latency, or an end of the interval when the target lies outside it."""
    vals = np.cumsum(line)
    kvs = np.arange(1, len(vals) + 1) * 1500.0
    v = np.stack([np.stack([vals, vals * 1.3]), np.stack([vals * 2.1, vals * 2.5])])
    g = Grid.build(((8.0, 64.0), (2.0, 6.0), kvs), v)
    f = lambda k: interp3(*g.axes, g.values, bs, width, k)[0]  # noqa: E731
    hi = lo + span
    target = f(lo) + frac * (f(hi) - f(lo))
    k = kv_at_latency(*g.axes, g.values, bs, width, lo, hi, target)
    assert lo <= k <= hi
    assert f(k) == pytest.approx(target, rel=1e-9, abs=1e-15)
    if frac == 0.0:
        assert k == lo


def test_engine_and_table_executor_agree_on_a_profile_with_the_form(tmp_path):
    """A run whose batches reach the 2D kernel records, for each verify step, the coordinate
    the table executor gives the same batch; the fast path and the per-batch path time the run
    alike."""
    import sys
    from pathlib import Path

    from backends.profile import ProfileExecutor, profile_metadata, write_profile
    from simulator import SimConfig, run
    from specsched.setup import load_trace
    from tests.simulator.helpers import LiveLike

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from backends_helpers import roofline_profile_rows

    root = Path(__file__).resolve().parents[2]
    m, rows = roofline_profile_rows()
    path = tmp_path / "p.parquet"
    meta = profile_metadata(m, {"name": "H200"}, command="pytest")
    meta["attention"] = {k: v for k, v in ATT.items() if k != "lone_straggler_2d_s"}
    write_profile(rows, path, meta)
    trace = load_trace(root / "traces" / "samples" / "azure_code_sps_2k.parquet",
                       limit=300).with_rate_scale(8.0)
    cfg = SimConfig.load(None, {})
    fast = run(trace, cfg, ProfileExecutor(path), kv_capacity_tokens=2_000_000)
    s = fast.steps
    kind = np.asarray(s.column("kind").to_pylist())
    bsp = s.column("bs_padded").to_numpy()
    width = s.column("width").to_numpy()
    graph = s.column("graph").to_numpy()
    rows_ = np.where(graph, bsp * width, s.column("tokens").to_numpy())
    two_d = (kind == "verify") & ((rows_ // 4 + bsp) * 8 > 528)
    spread = s.column("kv_max").to_numpy() > s.column("kv_mean").to_numpy() + 1
    assert np.sum(two_d & spread) > 0, "the run never reached the 2D kernel with a straggler"
    live = LiveLike(ProfileExecutor(path))
    slow = run(trace, cfg, live, kv_capacity_tokens=2_000_000)
    np.testing.assert_array_equal(fast.steps.column("latency_s").to_numpy(),
                                  slow.steps.column("latency_s").to_numpy())
    # the recorded coordinate is fidelity's too
    from analysis.fidelity.lookup import lookup_points

    table = ProfileExecutor(path).latency_table()
    p = lookup_points(s.drop_columns(["lookup_kv"]), table)
    np.testing.assert_allclose(p["kv"][two_d], s.column("lookup_kv").to_numpy()[two_d],
                               rtol=1e-9)
