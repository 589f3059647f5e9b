"""The draft-extend pass in the table backends: lookup rule, fallback, profile rows, roofline."""

from dataclasses import replace

import numpy as np
import pytest

from backends import roofline as R
from backends.hardware import GPUS
from backends.attention_kv import attention_params
from backends.latency_table import (EXTEND_FALLBACK_CAVEAT, Grid, LatencyTable, TableExecutor,
                                    extend_arrays, extend_axes, verify_axes)
from backends.models import load_model
from backends.profile import ProfileExecutor, profile_metadata, write_profile
from backends.protocol import DraftExtendBatch, VerifyBatch
from traces.errors import SpecschedError, TraceValidationError

from backends_helpers import roofline_profile_rows, round_gpu, tiny_model

DRAFT_G = [[1.0e-3, 2.0e-3], [3.0e-3, 5.0e-3]]          # bs (1, 4) x kv (0, 1000)
EXT_G = [[[2e-3, 4e-3], [3e-3, 7e-3]],                   # bs 1: width 2, width 4
         [[4e-3, 8e-3], [6e-3, 14e-3]]]                  # bs 4: width 2, width 4


def _table(extend: bool) -> LatencyTable:
    bs, kv = np.array([1.0, 4.0]), np.array([0.0, 1000.0])
    v3 = Grid.build((bs, [1.0, 2.0], kv), np.full((2, 2, 2), 1e-2))
    kw = {}
    if extend:
        kw = dict(extend_graph=Grid.build((bs, [2.0, 4.0], kv), EXT_G),
                  extend_eager=Grid.build((bs, [2.0, 4.0], kv), np.asarray(EXT_G) + 5e-4))
    return LatencyTable(verify_graph=v3, verify_eager=v3,
                        draft_graph=Grid.build((bs, kv), DRAFT_G),
                        draft_eager=Grid.build((bs, kv), np.asarray(DRAFT_G) + 1e-4),
                        prefill=Grid.build(([1.0, 100.0], [0.0, 100.0]), [[1e-3, 2e-3], [3e-3, 4e-3]]),
                        source={"kind": "hand"}, **kw)


def _batch(graph: bool, width: int = 3) -> DraftExtendBatch:
    return DraftExtendBatch(bs_real=3, bs_padded=4 if graph else 3, width=width,
                            kv_lens=np.array([200, 400, 600]), graph=graph)


def test_table_executor_interpolates_the_extend_grids_by_hand():
    ex = TableExecutor("hand", _table(True))
    # graph: padded bs 4, width 3 (halfway 2..4), KV 1200/4 = 300 (0.3 of 0..1000):
    # w2 4 + 0.3*4 = 5.2 ms, w4 6 + 0.3*8 = 8.4 ms, halfway 6.8 ms
    assert ex.draft_extend(_batch(True)) == pytest.approx(6.8e-3, rel=1e-12)
    # eager: bs 3 (2/3 of 1..4), KV 1200/3 = 400: bs 1 -> (2.8 + 4.6)/2 = 3.7 ms, bs 4 ->
    # (5.6 + 9.2)/2 = 7.4 ms; 3.7 + 2/3 * 3.7 = 6.1667 ms, plus the eager grid's 0.5 ms
    assert ex.draft_extend(_batch(False)) == pytest.approx(20 / 3 * 1e-3, rel=1e-12)
    # width 8 is past the grid: the last width segment (3.2 ms per 2 rows) is extended, flagged
    t = ex.latency_table()
    assert t.extend_s(*extend_axes(_batch(True, 8)), True) == (pytest.approx(14.8e-3, rel=1e-12), True)
    assert t.extend_measured and "caveats" not in ex.describe()


def test_a_table_without_extend_grids_times_one_draft_decode_pass_and_says_so():
    t = _table(False)
    ex = TableExecutor("hand", t)
    # graph: draft at bs 4, KV 300: 3 + 0.3 * 2 = 3.6 ms, whatever the width, not flagged
    for w in (1, 3, 8, 64):
        assert t.extend_s(*extend_axes(_batch(True, w)), True) == (pytest.approx(3.6e-3, rel=1e-12), False)
    # eager: draft eager at bs 3, KV 400: bs 1 -> 1.5 ms, bs 4 -> 3.9 ms; 1.5 + 2/3 * 2.4 = 3.1 ms
    assert ex.draft_extend(_batch(False)) == pytest.approx(3.1e-3, rel=1e-12)
    assert not t.extend_measured
    assert t.source == {"kind": "hand", "draft_extend": EXTEND_FALLBACK_CAVEAT}
    assert EXTEND_FALLBACK_CAVEAT in ex.describe()["caveats"]
    assert "underestimate" in EXTEND_FALLBACK_CAVEAT


def test_extend_arrays_are_what_interp3_reads():
    for t in (_table(True), _table(False)):
        arrs = extend_arrays(t)
        assert len(arrs) == 8
        for a in arrs:
            assert a.dtype == np.float64 and a.flags["C_CONTIGUOUS"]
        assert np.array_equal(arrs[3], t.extend_graph.values)
        assert np.array_equal(arrs[7], t.extend_eager.values)
        assert np.array_equal(arrs[0], t.extend_graph.axes[0])
    fb = extend_arrays(_table(False))
    assert fb[1].tolist() == [1.0, 1024.0] and np.array_equal(fb[3][:, 0, :], DRAFT_G)


def test_extend_grids_come_in_pairs():
    t = _table(True)
    with pytest.raises(ValueError, match="both extend_graph and extend_eager"):
        replace(_table(False), extend_graph=t.extend_graph, extend_eager=None)


def test_extend_kv_uses_the_verify_rule_at_the_extend_width():
    """The draft-extend attention has ``width`` rows per request, like a uniform verify launch."""
    att = attention_params({"sms": 132, "kv_heads": 8, "block_q": 4, "target_programs": 528,
                            "min_segments": 16, "max_segments": 128,
                            "slots_per_sm": {"2d": 4, "2d_decode": 8, "3d": 4}})
    kv = np.array([100, 200, 30000, 50])
    for graph, w in ((True, 4), (False, 2), (True, 8)):
        b = DraftExtendBatch(bs_real=4, bs_padded=6 if graph else 4, width=w, kv_lens=kv, graph=graph)
        v = VerifyBatch(bs_real=4, bs_padded=b.bs_padded, widths=np.full(4, w), kv_lens=kv,
                        launch_width=w, mode="uniform", graph=graph)
        assert extend_axes(b, att) == verify_axes(v, att)
        assert extend_axes(b)[2] == kv.sum() / b.bs_padded   # mean KV without the occupancy


# ---- profiles --------------------------------------------------------------------------------
def _extend_rows(m, gpu="H200", widths=(2, 3, 4, 6, 8)):
    rows = []
    for bs in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        for w in widths:
            for kv in (256, 1024, 4096, 16384, 65536):
                if bs * kv > 256 * 16384:
                    continue
                lat = float(R.draft_extend_time(m, gpu, bs, w, kv))
                rows.append(dict(kind="draft_extend", graph=True, bs=bs, width=w, kv_len=kv,
                                 tokens=bs * w, latency_s=lat, p10_s=lat * 0.98, p90_s=lat * 1.03,
                                 reps=5))
    return rows


def test_profile_roundtrip_with_draft_extend_rows(tmp_path):
    m, rows = roofline_profile_rows(draft_eager=True)
    ext = _extend_rows(m)
    p = tmp_path / "llama-3.1-8b__H200.parquet"
    write_profile(rows + ext, p, profile_metadata(m, {"name": "H200"}))
    ex = ProfileExecutor(p, model="llama-3.1-8b")
    t = ex.latency_table()
    assert t.extend_measured and t.source["draft_extend"] == f"measured: {len(ext)} graph and 0 eager rows"
    assert "caveats" not in ex.describe()
    for r in ext:  # exact on measured points
        b = DraftExtendBatch(bs_real=r["bs"], bs_padded=r["bs"], width=r["width"],
                             kv_lens=np.full(r["bs"], r["kv_len"]), graph=True)
        assert ex.draft_extend(b) == pytest.approx(r["latency_s"], rel=1e-12)
    # a skipped point (bs 256, KV 65536): KV extrapolation of an affine-in-KV truth is exact
    want = float(R.draft_extend_time(m, "H200", 256, 4, 65536))
    assert t.extend_s(256, 4, 65536, True) == (pytest.approx(want, rel=1e-6), False)
    assert t.source["holes_filled"]["draft_extend_graph"] > 0
    # no eager draft-extend rows: the draft's measured eager overhead, scaled by the kernel ratio
    # (EAGLE's fc runs in both passes: ratio 1), on top of the graph -- the roofline's own rule
    d = m.draft
    assert R.kernel_count(d, extend=True) == R.kernel_count(d)
    ed = t.source["eager_derived"]["draft_extend"]
    assert "kernel-count ratio 1.0000" in ed["overhead_rule"]
    over = R.kernel_count(d) * GPUS["H200"].kernel_launch_s - GPUS["H200"].graph_launch_s
    assert ed["overhead_s"] == pytest.approx(over, rel=1e-6)
    want = float(R.draft_extend_time(m, "H200", 16, 3, 1024, graph=False))
    assert t.extend_s(16, 3, 1024, False)[0] == pytest.approx(want, rel=1e-6)


def test_profiles_without_draft_extend_rows_still_load_with_the_fallback(tmp_path):
    m, rows = roofline_profile_rows()
    p = tmp_path / "old.parquet"
    write_profile(rows, p, profile_metadata(m, {"name": "H200"}))
    ex = ProfileExecutor(p)
    t = ex.latency_table()
    assert not t.extend_measured and t.source["draft_extend"] == EXTEND_FALLBACK_CAVEAT
    assert any(w.startswith(EXTEND_FALLBACK_CAVEAT) for w in ex.describe()["warnings"])
    assert EXTEND_FALLBACK_CAVEAT in ex.describe()["caveats"]
    b = DraftExtendBatch(bs_real=8, bs_padded=8, width=4, kv_lens=np.full(8, 1024), graph=True)
    assert ex.draft_extend(b) == t.draft_pass_s(8, 1024, True)[0]


BASE = dict(kind="draft_extend", graph=True, bs=2, width=4, kv_len=100, tokens=8, latency_s=1e-3,
            p10_s=0.9e-3, p90_s=1.1e-3, reps=5)


@pytest.mark.parametrize("edit,column", [({"tokens": 9}, "tokens"), ({"width": 0}, "width")])
def test_bad_draft_extend_rows_name_file_row_and_column(tmp_path, edit, column):
    m, rows = roofline_profile_rows()
    rows = rows[:3] + [dict(BASE, **edit)] + rows[3:]
    p = tmp_path / "bad.parquet"
    with pytest.raises(TraceValidationError) as e:
        write_profile(rows, p, profile_metadata(m, {"name": "H200"}))
    msg = str(e.value)
    assert str(p) in msg and "row 3" in msg and f"column '{column}'" in msg and "draft_extend" in msg
    assert not p.exists()


def test_eager_draft_extend_rows_need_graph_rows(tmp_path):
    m, rows = roofline_profile_rows()
    p = tmp_path / "eager_only.parquet"
    with pytest.raises(SpecschedError, match="column 'graph'.*draft_extend graph rows"):
        write_profile(rows + [dict(BASE, graph=False)], p, profile_metadata(m, {"name": "H200"}))


def test_a_profile_of_another_draft_kind_is_refused(tmp_path):
    m, rows = roofline_profile_rows()
    p = tmp_path / "e3.parquet"
    m3 = load_model("llama-3.1-8b", draft_kind="eagle3")
    write_profile(rows, p, profile_metadata(m3, {"name": "H200"}))
    with pytest.raises(SpecschedError, match="draft_kind: profile 'eagle3', asked 'eagle'"):
        ProfileExecutor(p, model="llama-3.1-8b")
    assert ProfileExecutor(p, model=m3).name == "profile"


# ---- roofline --------------------------------------------------------------------------------

def test_roofline_draft_extend_closed_form_small_batch():
    """bs 1, width 2, no KV, tiny EAGLE draft (fc 128 -> 64, one layer): every kernel is
    bandwidth-bound, so the pass takes its bytes over 1e12 B/s plus one graph launch."""
    m, g = tiny_model(), round_gpu()
    B, T = 1e12, 2  # two rows: the accepted token and the bonus token
    gemm = lambda K, N, t=T: (K * N * 2 + t * (K + N) * 2) / B  # noqa: E731 - weights + rows
    fc = gemm(128, 64)                      # EAGLE fc over (embedding, hidden)
    qkv = gemm(64, (2 + 2) * 32)            # 2 query heads + K and V of 1 KV head, head_dim 32
    o, gate_up, down = gemm(64, 64), gemm(64, 256), gemm(128, 64)
    # attention: K,V of 1 head x 32 x 2 bytes = 128 B per cached token; 2 rows (KV 0 + 2 new),
    # each row reads q and writes o (2 heads x 32 x 2 B each) and its K,V = 128 + 256 B
    attn = (128 * 2 + (128 + 256) * 2) / B
    ew = T * 2 * (6 * 64 + 3 * 128) / B
    lm = gemm(64, 256, 1)                   # logits for the last row of the request only
    final = (T * 64 * 2 + 1 * 256 * 4) / B
    want = fc + qkv + o + gate_up + down + attn + ew + lm + final + 5e-6
    assert float(R.draft_extend_time(m, g, 1, 2, 0)) == pytest.approx(want, rel=1e-12)
    every = float(R.draft_extend_time(m, g, 1, 2, 0, extend_logits="all"))
    assert every - want == pytest.approx(gemm(64, 256, 2) - lm + 256 * 4 / B, rel=1e-9)
    with pytest.raises(SpecschedError, match="extend_logits"):
        R.draft_extend_time(m, g, 1, 2, 0, extend_logits="some")


def test_roofline_eagle3_fusion_runs_in_the_extend_pass_only():
    m3, g = tiny_model(draft_kind="eagle3"), round_gpu()
    fusion = (192 * 64 * 2 + 1 * (192 + 64) * 2) / 1e12   # 3*hidden -> hidden over one row
    ext = float(R.draft_extend_time(m3, g, 1, 1, 100))
    dec = float(R.draft_pass_time(m3, g, 1, 100))
    assert ext - dec == pytest.approx(fusion, rel=1e-9)
    assert R.kernel_count(m3.draft, extend=True) == R.kernel_count(m3.draft) + 1
    # EAGLE runs its fc in both: width 1 extend = one decode step
    m = tiny_model()
    assert float(R.draft_extend_time(m, g, 1, 1, 100)) == pytest.approx(
        float(R.draft_pass_time(m, g, 1, 100)), rel=1e-12)


def test_roofline_extend_attention_has_width_rows_per_request():
    m = tiny_model()
    g = round_gpu(hbm_bw=1e20)  # attention compute-bound
    bs, w, L = 3, 5, 1000
    attn = R.breakdown(m, g, kind="draft_extend", bs=bs, width=w, kv=L)["attention"]
    assert attn == pytest.approx(bs * 4 * 2 * 32 * (w * L + w * (w + 1) / 2) / 1e14, rel=1e-12)


def test_roofline_executor_draft_extend():
    ex = R.make_roofline_executor("llama-3.1-8b", "H200")
    t = ex.latency_table()
    assert t.extend_measured and EXTEND_FALLBACK_CAVEAT not in ex.describe()["caveats"]
    b = DraftExtendBatch(bs_real=5, bs_padded=6, width=4, kv_lens=np.array([100, 200, 300, 400, 500]),
                         graph=True)
    want = float(R.draft_extend_time("llama-3.1-8b", "H200", 6, 4, 1500 / 6))
    assert ex.draft_extend(b) == pytest.approx(want, rel=1e-9)
    e = replace(b, bs_padded=5, graph=False)
    want = float(R.draft_extend_time("llama-3.1-8b", "H200", 5, 4, 300, graph=False))
    assert ex.draft_extend(e) == pytest.approx(want, rel=1e-9)
    # between KV grid points the formula is linear (its ridges are grid points): reproduced
    got = t.extend_s(37, 3, 777.0, True)[0]
    assert got == pytest.approx(float(R.draft_extend_time("llama-3.1-8b", "H200", 37, 3, 777.0)),
                                rel=1e-9)
