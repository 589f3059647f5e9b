"""MLA attention and MoE layers of the live executor, on the CPU.

The first tests need neither torch nor Triton (the preset, the width rule, the routing plan).  The
others run AITER's Triton kernels under the Triton interpreter (float16, tiny shapes), each in its
own process, through the runner's real metadata path, against the float32 references of
``backends.aiter.mla_reference`` -- the same comparisons ``test_aiter_mla_gpu.py`` makes on the GPU.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.aiter.conftest import INTERPRETED_MARKS, run_interpreted

needs_triton = INTERPRETED_MARKS


# ---- no kernels --------------------------------------------------------------------------------
def test_deepseek_v2_lite_preset_has_the_published_shape():
    from backends.models import PRESETS, load_model

    assert "deepseek-v2-lite" in PRESETS
    m = load_model("deepseek-v2-lite")
    got = (m.layers, m.hidden, m.heads, m.kv_lora_rank, m.q_lora_rank, m.qk_rope_head_dim,
           m.qk_nope_head_dim, m.v_head_dim, m.experts, m.experts_per_token, m.shared_experts,
           m.moe_intermediate, m.intermediate, m.dense_layers, m.vocab, m.tp, m.attention)
    assert got == (27, 2048, 16, 512, 0, 64, 128, 128, 64, 6, 2, 1408, 10944, 1, 102400, 1, "mla")
    assert round(m.params_total / 1e9, 1) == 15.7          # the model card's 15.7B
    assert m.kv_bytes_per_token == 27 * (512 + 64) * 2      # one latent row per layer, bf16
    d = m.draft                                             # MTP-style draft: MLA + MoE layer
    assert (d.layers, d.dense_layers, d.fusion_in) == (1, 0, 2 * 2048)


def test_mla_widths_run_as_the_kernels_take_them():
    from backends.aiter.mla import mla_kernel_width
    from traces.errors import SpecschedError

    assert [mla_kernel_width(w) for w in (1, 2, 3, 4)] == [1, 2, 4, 4]
    for w in (5, 6, 8, 0):
        with pytest.raises(SpecschedError, match="take 1, 2 or 4 query rows per request"):
            mla_kernel_width(w)


def test_decode_rows_and_splits_by_hand():
    from backends.aiter.mla import decode_splits, row_index_count

    # row j of request i reads kv_i + j + 1 keys: (10+1..10+4) + (37+1..37+4) = 50 + 158
    assert row_index_count([10, 37], [4, 4]) == 208
    assert row_index_count([5], [1]) == 6
    # enough programs to cover 132 SMs twice, 2..16 splits
    assert [decode_splits(r) for r in (1, 16, 17, 32, 132, 1024)] == [16, 16, 16, 9, 2, 2]


def test_contiguous_decode_rows_by_hand():
    from backends.aiter.mla_kernels import contiguous_decode_rows

    # 2 requests x width 2 at KV 3: request 0 owns tokens 0-4, request 1 tokens 5-9
    lens, indptr, indices = contiguous_decode_rows(2, 2, 3)
    assert lens.tolist() == [4, 5, 4, 5]
    assert indptr.tolist() == [0, 4, 9, 13, 18]
    assert indices.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 8, 5, 6, 7, 8, 9]


def test_latent_views_stay_within_32_bit_offsets():
    from backends.aiter.mla import plan_latent_pool
    from traces.errors import SpecschedError

    # page 64 x 576 values = 36,864 a page; (2**31 - 1) // 36,864 = 58,254 pages a view
    # (58,254 x 36,864 = 2,147,475,456; one page more is 2,147,512,320 > 2**31 - 1)
    p = plan_latent_pool(100 << 30, views=2, page_size=64, dim=576, dtype_bytes=2,
                         max_blocks=512, want_view_pages=80_000)
    assert p.view_pages == 58_254
    small = plan_latent_pool(1 << 30, views=2, page_size=64, dim=576, dtype_bytes=2,
                             max_blocks=512, want_view_pages=4_000)
    assert small.view_pages == 4_000           # under the limit: as asked
    with pytest.raises(SpecschedError, match="lower --max-context"):
        plan_latent_pool(100 << 30, views=2, page_size=64, dim=576, dtype_bytes=2,
                         max_blocks=30_000, want_view_pages=80_000)


def test_routing_plans_uniform_and_skewed():
    from backends.aiter.moe import routing_plan
    from traces.errors import SpecschedError

    rows, E, k = 6400, 64, 6
    u = routing_plan(rows, E, k, seed=3)
    assert u.shape == (rows, k)
    assert all(len(set(r)) == k for r in u)                       # distinct experts per row
    assert np.array_equal(u, routing_plan(rows, E, k, seed=3))     # deterministic
    assert np.array_equal(u[:100], routing_plan(100, E, k, seed=3))  # row r's plan: same
    counts = np.bincount(u.ravel(), minlength=E)
    # 6 of 64 per row: 600 per expert expected, binomial sd ~ 23.7; 5 sd either way
    assert counts.min() > 600 - 120 and counts.max() < 600 + 120
    s = routing_plan(rows, E, k, routing="skewed", skew=1.2, seed=3)
    sc = np.sort(np.bincount(s.ravel(), minlength=E))[::-1]
    assert sc[0] > 2 * 600 and sc[-1] < 600 // 2                  # a few experts take most rows
    # fewer distinct experts' weights are read by a small batch (8 rows)
    du = np.mean([len(np.unique(u[i:i + 8])) for i in range(0, rows, 8)])
    ds = np.mean([len(np.unique(s[i:i + 8])) for i in range(0, rows, 8)])
    assert ds < du - 5
    with pytest.raises(SpecschedError, match="uniform, skewed"):
        routing_plan(4, E, k, routing="zipf")
    with pytest.raises(SpecschedError, match="top_k"):
        routing_plan(4, E, 65)


def test_mla_geometry_refuses_what_the_live_executor_cannot_run():
    from backends.aiter.mla import mla_geometry
    from backends.models import load_model
    from traces.errors import SpecschedError

    g = mla_geometry(load_model("deepseek-v2-lite"))
    assert (g["heads"], g["kv_lora_rank"], g["qk_rope"], g["experts"], g["shared_intermediate"],
            g["dense_layers"], g["head_dim"]) == (16, 512, 64, 64, 2 * 1408, 1, 576)
    with pytest.raises(SpecschedError, match="64 routed experts do not split over ep 3"):
        lite = load_model("deepseek-v2-lite")                 # at ep = tp = 3
        mla_geometry(type(lite)(**{**lite.as_dict(), "tp": 3, "heads": 48,
                                   "moe_intermediate": 1407, "intermediate": 10947}))
    with pytest.raises(SpecschedError, match="is not MLA"):
        mla_geometry(load_model("llama-3.1-8b"))


def test_make_executor_still_needs_a_gpu_for_mla_models():
    from backends.aiter import bridge, make_executor
    from traces.errors import SpecschedError

    if bridge.gpu_problem() is None:
        pytest.skip("a GPU is present")
    with pytest.raises(SpecschedError, match="needs a CUDA or ROCm GPU"):
        make_executor("deepseek-v2-lite")


# ---- AITER's kernels under the Triton interpreter ---------------------------------------------
def interpreted(test):
    """Mark a test that runs AITER's kernels under the interpreter (slow; needs Triton, aiter)."""
    for mark in reversed(needs_triton):
        test = mark(test)
    return test


def _run(body: str) -> dict:
    out = run_interpreted("import json\nfrom tests.aiter.mla_checks import *\n" + body)
    return json.loads(out.strip().splitlines()[-1])


@interpreted
def test_mla_decode_matches_reference_at_widths_1_2_4_and_3_padded():
    d = _run("""
r = tiny_runner()
res = {'w1': decode_case(r, [1, 1, 1], [3, 50, 17], 1),
       'w2': decode_case(r, [2, 2], [9, 64], 2),
       'w4': decode_case(r, [4, 4], [10, 37], 4),
       'w3': decode_case(r, [3, 3, 3], [5, 21, 60], 3)}
print(json.dumps(res))
""")
    for name, c in d.items():
        assert c["max_abs_error"] < 1e-2 * max(1.0, c["output_scale"]), (name, c)
        assert c["latent_error"] < 1e-2 * c["latent_scale"], (name, c)   # the cache write
        assert c["extents_ok"], (name, c)
    assert d["w1"]["key"] == ["verify", 3, 1] and d["w1"]["rows"] == 3
    assert d["w2"]["indptr_total"] == (9 + 1 + 9 + 2) + (64 + 1 + 64 + 2)
    # width 3 runs as 4: the width-4 graph key, 4 rows per request, 3 of them real
    assert d["w3"]["key"] == ["verify", 3, 4]
    assert (d["w3"]["rows"], d["w3"]["real_rows"]) == (12, 9)


@interpreted
def test_mla_prefill_matches_reference_with_and_without_prefix():
    d = _run("""
r = tiny_runner()
print(json.dumps({'prefix': prefill_case(r, [5, 7], [0, 9]), 'none': prefill_case(r, [6, 3], [0, 0], seed=4)}))
""")
    assert d["prefix"]["prefix"] is True and d["none"]["prefix"] is False
    for c in d.values():
        assert c["max_abs_error"] < 1e-2 * max(1.0, c["output_scale"]), c


@interpreted
def test_fused_moe_matches_a_per_expert_loop_uniform_and_skewed():
    d = _run("""
res = {'uniform': moe_case(tiny_runner(), 37),
       'skewed': moe_case(tiny_runner(routing='skewed', routing_skew=1.5), 37)}
print(json.dumps(res))
""")
    for name, c in d.items():
        assert c["routed_as_planned"], (name, c)      # the steered router picked the plan
        assert c["max_abs_error"] < 1e-2 * max(1.0, c["output_scale"]), (name, c)
        assert c["weight_sum_max"] <= 1.0 + 1e-3
    assert d["skewed"]["distinct_experts"] <= d["uniform"]["distinct_experts"]


@interpreted
def test_mla_executor_runs_verify_draft_prefill_and_enforces_the_width_rule():
    d = _run("""
import numpy as np, torch
from backends.aiter.mla_runner import MLAExecutor
from backends.protocol import VerifyBatch, DraftBatch, PrefillBatch, Executor
from traces.errors import SpecschedError
r = tiny_runner()
ex = MLAExecutor(r, model=r.shape, gpu='H200')
res = {'protocol': isinstance(ex, Executor)}
v = ex.verify(VerifyBatch(bs_real=2, bs_padded=2, widths=np.array([3, 3]), kv_lens=np.array([10, 40]),
                          launch_width=3, mode='uniform', graph=False))
st = r.graphs[('eager', 'verify', 2, 4)]
res['verify'] = [v.latency_s > 0, v.extra['key'], list(st.out.shape), bool(torch.isfinite(st.out).all())]
res['draft'] = ex.draft(DraftBatch(bs_real=2, bs_padded=2, kv_lens=np.array([7, 9]), passes=1, graph=False))
res['prefill'] = ex.prefill(PrefillBatch(tokens=np.array([6, 0]), prefix=np.array([3, 0])))
errs = []
for w in (5, 8):
    try:
        ex.verify(VerifyBatch(bs_real=1, bs_padded=1, widths=np.array([w]), kv_lens=np.array([10]),
                              launch_width=w, mode='uniform', graph=False))
    except SpecschedError as e:
        errs.append(str(e))
try:
    r.verify_launch(np.array([4]), np.array([10 ** 6]), mode='uniform', padded_bs=1, launch_width=4)
except SpecschedError as e:
    errs.append(str(e))
res['errors'] = errs
res['describe'] = ex.describe()
print(json.dumps(res, default=str))
""")
    assert d["protocol"] is True
    ok, key, shape, finite = d["verify"]
    assert ok and key == ["verify", 2, 4] and shape == [8, 96] and finite   # 3 ran (and timed) as 4
    assert d["draft"] > 0 and d["prefill"] > 0
    assert len(d["errors"]) == 3
    assert all("1, 2 or 4 query rows" in e for e in d["errors"][:2])
    assert "index buffer holds" in d["errors"][2]
    desc = d["describe"]
    assert "mla_attention_decode" in desc["kernels"] and "moe_gemm" in desc["kernels"]
    assert desc["runner"]["mla"]["kernel_widths"]["3"] == 4


@interpreted
def test_mla_draft_extend_rows_match_reference_at_widths_1_2_4_and_3_as_4():
    """The draft-extend pass through the MTP layer's attention: row j of a request at KV kv sits
    at position kv + j and sees kv + j + 1 keys; width 3 takes the width-4 key and rows; a
    padded request (bs 2 in the bs-3 launch) sits at the fill length."""
    d = _run("""
r = tiny_runner()
res = {'w1': extend_case(r, [3, 50, 17], 1),
       'w2': extend_case(r, [9, 64], 2),
       'w4': extend_case(r, [10, 37], 4),
       'w3': extend_case(r, [5, 21], 3, padded_bs=3)}
st = r._new_static(tuple(res['w3']['key']))
r._stage(st, r.extend_launch(np.array([5, 21]), 3, 3)[0])
res['seq_lens'] = st.seqused_k.cpu().tolist()
res['fill'] = r.fill
print(json.dumps(res))
""")
    for name in ("w1", "w2", "w4", "w3"):
        c = d[name]
        assert c["extents_ok"] and c["positions_ok"], (name, c)
        assert c["max_abs_error"] < 1e-2 * max(1.0, c["output_scale"]), (name, c)
        assert c["latent_error"] < 1e-2 * c["latent_scale"], (name, c)
    assert d["w1"]["key"] == ["extend", 3, 1] and d["w1"]["rows"] == 3
    assert d["w2"]["indptr_total"] == (9 + 1 + 9 + 2) + (64 + 1 + 64 + 2)
    # width 3 runs as 4: the width-4 key, 4 rows for each of the 3 requests (one padded)
    assert d["w3"]["key"] == ["extend", 3, 4] and d["w3"]["rows"] == 12
    assert d["w3"]["real_rows"] == 8
    # seqused_k = kv + width (at the kernel's width), the padded request at fill + 4
    assert d["seq_lens"] == [5 + 4, 21 + 4, d["fill"] + 4]


@interpreted
def test_mla_executor_draft_extend_logits_and_width_rule():
    """``MLAExecutor.draft_extend``: the last row's logits per request (the same numbers as the
    matching rows of an extend_logits="all" runner built from the same seed), width 3 timed as
    4, widths 5 and 8 refused."""
    d = _run("""
import numpy as np, torch
from backends.aiter.mla_runner import MLAExecutor
from backends.protocol import DraftExtendBatch
from traces.errors import SpecschedError
kv = np.array([12, 40])
res = {}
outs = {}
for mode in ('last', 'all'):
    r = tiny_runner(extend_logits=mode)
    ex = MLAExecutor(r, model=r.shape, gpu='H200')
    t = ex.draft_extend(DraftExtendBatch(bs_real=2, bs_padded=2, width=3, kv_lens=kv, graph=False))
    st = r.graphs[('eager', 'extend', 2, 4)]
    outs[mode] = st.out.float().clone()
    res[mode] = [t > 0, list(st.out.shape), bool(torch.isfinite(st.out).all()), ex.calls['draft_extend']]
res['diff'] = float((outs['all'][[3, 7]] - outs['last']).abs().max())
res['scale'] = float(outs['last'].abs().max())
res['w1'] = ex.draft_extend(DraftExtendBatch(bs_real=2, bs_padded=2, width=1, kv_lens=kv, graph=False))
errs = []
for w in (5, 8):
    try:
        ex.draft_extend(DraftExtendBatch(bs_real=1, bs_padded=1, width=w, kv_lens=kv[:1], graph=False))
    except SpecschedError as e:
        errs.append(str(e))
res['errors'] = errs
desc = ex.describe()
res['role'] = desc['runner']['draft_role']
res['caveat'] = [c for c in desc['caveats'] if 'draft-extend' in c]
print(json.dumps(res, default=str))
""")
    assert d["last"] == [True, [2, 96], True, 1]          # logits of each request's last row
    assert d["all"] == [True, [8, 96], True, 1]           # every row: 2 requests x 4 rows
    assert d["diff"] <= 1e-2 * max(1.0, d["scale"]), d
    assert d["w1"] > 0
    assert len(d["errors"]) == 2 and all("1, 2 or 4 query rows" in e for e in d["errors"])
    assert d["role"] == "mtp" and len(d["caveat"]) == 1 and "3 as 4" in d["caveat"][0]


@pytest.mark.parametrize("opts, message", [
    ({"num_draft_tokens": 5}, "1, 2 or 4 query rows"),
    ({"routing": "zipf"}, "uniform, skewed"),
    ({"routing_skew": 0}, "routing_skew must be > 0"),
    ({"bogus": 1}, "unknown option"),
    ({"extend_logits": "first"}, "choose one of last, all"),
])
def test_mla_executor_options_are_checked_before_anything_is_built(monkeypatch, opts, message):
    from backends.aiter import bridge
    from backends.aiter.mla_runner import make_mla_executor
    from backends.models import load_model
    from traces.errors import SpecschedError

    monkeypatch.setattr(bridge, "require_gpu", lambda: None)  # the checks come before the GPU
    with pytest.raises(SpecschedError, match=message):
        make_mla_executor(load_model("deepseek-v2-lite"), **opts)
    with pytest.raises(SpecschedError, match="no MLA width"):
        make_mla_executor(load_model("deepseek-v2-lite"), capture_widths=[5, 8])


@pytest.mark.parametrize("widths, message", [
    ({"extend_widths": (2, 5)}, "MLA draft-extend width 5"),
    ({"extend_eager_widths": (1, 8)}, "MLA draft-extend width 8"),
    ({"widths": (1, 6)}, "MLA verify width 6"),
])
def test_profile_refuses_widths_the_mla_kernels_lack_before_building(tmp_path, widths, message):
    """``run_profile`` checks every width list of an MLA model before any GPU work (so on a CPU)."""
    from backends.aiter.profiling import ProfileSpec, run_profile
    from traces.errors import SpecschedError

    spec = ProfileSpec(**{"widths": (1, 2, 3, 4), "eager_widths": (1, 4), "extend_widths": (2, 3, 4),
                          "extend_eager_widths": (1, 2, 4), **widths})
    out = tmp_path / "p.parquet"
    with pytest.raises(SpecschedError, match=message):
        run_profile("deepseek-v2-lite", str(out), spec)
    assert not out.exists()
