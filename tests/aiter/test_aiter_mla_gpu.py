"""MLA attention, the fused MoE and the MLA executor on a real GPU (skipped without one).

The layer checks are those of ``test_aiter_mla_cpu.py`` (``tests/aiter/mla_checks.py``) at
DeepSeek-V2-Lite's per-layer shapes in bfloat16: 16 heads, latent 512 + rope 64, nope/v 128,
64 routed experts of 1408 (6 per token) plus 2 shared, hidden 2048 -- two layers (one dense, one
MoE) with random weights.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

#: DeepSeek-V2-Lite's layer shapes, two layers, a small vocabulary
V2_LITE_LAYERS = dict(name="v2-lite-2l", layers=2, hidden=2048, heads=16, kv_heads=16,
                      head_dim=128, intermediate=10944, vocab=8192, kv_lora_rank=512,
                      q_lora_rank=0, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
                      experts=64, experts_per_token=6, shared_experts=2, moe_intermediate=1408,
                      dense_layers=1)

#: bfloat16 through several GEMMs against a float32 reference
TOL = 3e-2


def _sms() -> int:
    import torch

    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count)


@pytest.fixture(scope="module")
def runner():
    from tests.aiter.mla_checks import tiny_runner

    return tiny_runner(device="cuda", dtype="bfloat16", sms=_sms(), shape=V2_LITE_LAYERS,
                       max_context=16384, capture_bs=[1, 2, 3, 4, 8], kv_pool_bytes=1 << 30)


def test_mla_decode_matches_reference_at_widths_1_2_4_and_3_padded(runner):
    from tests.aiter.mla_checks import decode_case

    cases = {"w1": decode_case(runner, [1, 1, 1, 1], [1, 100, 1500, 4097], 1),
             "w2": decode_case(runner, [2, 2, 2], [3, 2048, 777], 2),
             "w4": decode_case(runner, [4, 4, 4], [5, 4096, 300], 4),
             "w3": decode_case(runner, [3, 3], [2, 3000], 3)}
    for name, c in cases.items():
        assert c["extents_ok"], (name, c)
        assert c["max_abs_error"] < TOL * max(1.0, c["output_scale"]), (name, c)
        assert c["latent_error"] < TOL * c["latent_scale"], (name, c)
    assert cases["w3"]["key"] == ["verify", 2, 4] and cases["w3"]["rows"] == 8


def test_mla_prefill_matches_reference_with_and_without_prefix(runner):
    from tests.aiter.mla_checks import prefill_case

    for c in (prefill_case(runner, [300, 47], [0, 1200]), prefill_case(runner, [256], [0])):
        assert c["max_abs_error"] < TOL * max(1.0, c["output_scale"]), c


@pytest.mark.parametrize("rows", [1, 37, 300, 1500])
def test_fused_moe_matches_a_per_expert_loop(runner, rows):
    """Row counts that pick AITER's small, medium and large fused-MoE tiles."""
    from tests.aiter.mla_checks import moe_case

    c = moe_case(runner, rows)
    assert c["routed_as_planned"], c
    assert c["max_abs_error"] < TOL * max(1.0, c["output_scale"]), c


def test_skewed_routing_reads_fewer_experts():
    from tests.aiter.mla_checks import moe_case, tiny_runner

    r = tiny_runner(device="cuda", dtype="bfloat16", sms=_sms(),
                    shape={**V2_LITE_LAYERS, "layers": 2}, routing="skewed", routing_skew=1.2,
                    kv_pool_bytes=64 << 20, max_context=4096)
    c = moe_case(r, 32)
    assert c["routed_as_planned"] and c["max_abs_error"] < TOL * max(1.0, c["output_scale"]), c
    assert c["distinct_experts"] < 64


def test_graph_replay_matches_eager_and_width_3_shares_the_width_4_graph(runner):
    """The verify forward captured in a CUDA graph gives the eager forward's logits; a width-3
    batch replays the width-4 graph."""
    import torch

    r = runner
    launch, key = r.verify_launch(np.array([3, 3, 3]), np.array([50, 700, 2000]), mode="uniform",
                                  padded_bs=4, launch_width=3)
    assert key == ("verify", 4, 4) and launch.rows == 16
    st = r.capture(("verify", 4, 3))
    assert r.graphs.get(("verify", 4, 4)) is st
    r.replay_step(st, launch)
    torch.cuda.synchronize()
    g_out = st.out.float().clone()
    e = r._eager_static(key, launch)
    r._stage(e, launch)
    with torch.no_grad():
        e_out = r._body(e).float()
    torch.cuda.synchronize()
    assert torch.isfinite(g_out).all()
    err = float((g_out - e_out).abs().max())
    assert err <= 1e-2 * max(1.0, float(e_out.abs().max())), err
    d = r.capture(("draft", 4))  # the MTP-style draft step captures too
    dl, _ = r.draft_launch(np.array([51, 701, 2001]), 4)
    r.replay_step(d, dl)
    torch.cuda.synchronize()
    assert torch.isfinite(d.out.float()).all()


def test_draft_extend_rows_graph_replay_and_width_3_as_4(runner):
    """The draft-extend pass through the MTP layer at V2-Lite's shapes: its attention rows against
    the float32 reference; the captured graph gives the eager forward's logits; width 3 replays the
    width-4 graph (a padded request at the fill length); 4 rows per request take longer than 1."""
    import torch

    from tests.aiter.mla_checks import extend_case

    r = runner
    for w, kv in ((2, [3, 2048, 777]), (4, [5, 4096, 300]), (3, [2, 3000])):
        c = extend_case(r, kv, w, padded_bs=len(kv) + 1)
        assert c["extents_ok"] and c["positions_ok"], (w, c)
        assert c["max_abs_error"] < TOL * max(1.0, c["output_scale"]), (w, c)
        assert c["latent_error"] < TOL * c["latent_scale"], (w, c)
    assert c["key"] == ["extend", 3, 4] and c["rows"] == 12
    launch, key = r.extend_launch(np.array([50, 700, 2000]), 4, 3)
    assert key == ("extend", 4, 4) and launch.rows == 16
    st = r.capture(("extend", 4, 3))
    assert r.graphs.get(("extend", 4, 4)) is st and list(st.out.shape) == [4, r.draft_geometry["vocab"]]
    r.replay_step(st, launch)
    torch.cuda.synchronize()
    g_out = st.out.float().clone()
    assert st.seqused_k[:4].tolist() == [54, 704, 2004, r.fill + 4]   # kv + 4
    e = r._eager_static(key, launch)
    r._stage(e, launch)
    with torch.no_grad():
        e_out = r._body(e).float()
    torch.cuda.synchronize()
    assert torch.isfinite(g_out).all()
    err = float((g_out - e_out).abs().max())
    assert err <= 1e-2 * max(1.0, float(e_out.abs().max())), err
    # bs 8 at KV 2048: 8 rows route ~33 of the 64 experts, 32 rows ~60: width 4 reads more
    t = {}
    for w in (1, 4):
        lw, kw = r.extend_launch(np.full(8, 2048), 8, w)
        t[w] = float(np.median([x.latency_s for x in r.run(kw, lw, graph=True, reps=7, warmup=2)]))
    assert 0 < t[1] < t[4], t


def test_executor_times_verify_draft_prefill_and_refuses_other_widths():
    from backends.aiter import make_executor
    from backends.models import ModelShape
    from backends.protocol import DraftBatch, DraftExtendBatch, PrefillBatch, VerifyBatch
    from traces.errors import SpecschedError

    ex = make_executor(ModelShape(**V2_LITE_LAYERS, attention="mla"), capture_bs=[1, 2, 4, 8],
                       max_context=16384,
                       kv_pool_gib=1)

    def verify(w, graph=True):
        return ex.verify(VerifyBatch(bs_real=3, bs_padded=4, widths=np.full(3, w),
                                     kv_lens=np.array([100, 1000, 3000]), launch_width=w,
                                     mode="uniform", graph=graph))

    t4, t3 = verify(4), verify(3)
    assert t3.extra["key"] == t4.extra["key"] == ["verify", 4, 4]
    assert t3.latency_s > 0 and t4.latency_s > 0
    assert verify(2, graph=False).latency_s > 0
    with pytest.raises(SpecschedError, match="1, 2 or 4 query rows"):
        verify(5)
    assert ex.draft(DraftBatch(bs_real=3, bs_padded=4, kv_lens=np.array([100, 1000, 3000]),
                               passes=2, graph=True)) > 0
    assert ex.prefill(PrefillBatch(tokens=np.array([512]), prefix=np.array([1024]))) > 0

    def extend(w, graph=True):
        return ex.draft_extend(DraftExtendBatch(bs_real=3, bs_padded=4, width=w, graph=graph,
                                                kv_lens=np.array([100, 1000, 3000])))

    assert extend(4) > 0 and extend(3) > 0 and extend(1, graph=False) > 0
    assert ("extend", 4, 4) in ex.runner.graphs and ("extend", 4, 3) not in ex.runner.graphs
    with pytest.raises(SpecschedError, match="1, 2 or 4 query rows"):
        extend(5)
    d = ex.describe()
    assert d["runner"]["graphs_captured"] >= 3 and "mla_attention_decode" in d["kernels"]
    assert d["runner"]["draft_role"] == "mtp" and d["calls"]["draft_extend"] == 3


def test_mla_decode_occupancy_is_read_from_the_compiled_kernel():
    """``attention_occupancy`` on an MLA runner asks the driver about AITER's stage-1 MLA decode
    kernel (``mla_occupancy``), and the result drives the straggler-aware lookup's MLA branch."""
    import torch

    from backends.aiter import make_executor
    from backends.aiter.occupancy import attention_occupancy
    from backends.attention_kv import ATT_MLA, attention_params
    from backends.models import ModelShape

    ex = make_executor(ModelShape(**V2_LITE_LAYERS, attention="mla"), capture_bs=[1, 2],
                       max_context=8192, kv_pool_gib=1)
    att = attention_occupancy(ex.runner)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert att["kernel"] == "mla_decode" and att["sms"] == sms
    assert att["head_groups"] == 1 and att["target_programs"] == 2 * sms  # 16 heads: one group
    assert (att["min_splits"], att["max_splits"]) == (2, 16)
    n, k = att["slots_per_sm"]["mla_decode"], att["kernels"]["mla_decode"]
    assert 1 <= n <= 32 and k["n_regs"] > 0
    assert n <= 65536 // (k["n_regs"] * 32 * k["num_warps"])  # what the registers alone allow
    assert attention_params(att)[ATT_MLA] == 1.0


def test_mla_prefill_attention_holds_the_slots_the_wave_term_counts():
    """An MLA prefill runs AITER's varlen flash forward with the 128-row tile
    (``FLASH_CONFIG``), and the driver puts as many of its programs on an SM as
    ``backends.prefill_waves`` counts waves with."""
    from backends.aiter import make_executor
    from backends.aiter.occupancy import prefill_occupancy
    from backends.models import ModelShape
    from backends.prefill_waves import PREFILL_SLOTS_PER_SM

    ex = make_executor(ModelShape(**V2_LITE_LAYERS, attention="mla"), capture_bs=[1],
                       max_context=8192, kv_pool_gib=1)
    occ = prefill_occupancy(ex.runner)
    assert occ["kernel"] == "_attn_fwd" and occ["block_m"] == 128
    assert occ["slots_per_sm"] == PREFILL_SLOTS_PER_SM, occ


def test_profile_sweep_of_an_mla_model(tmp_path):
    """A small ``specsched profile`` sweep: width 3 is measured through the width-4 graph, for
    verify and for draft-extend; a width the MLA kernels lack is refused before measuring."""
    from dataclasses import asdict

    import pyarrow.parquet as pq

    from backends.aiter.profiling import ProfileSpec, run_profile
    from backends.models import ModelShape

    spec = ProfileSpec(bs=(1, 4), widths=(1, 2, 3, 4), kv=(128, 2048), eager_bs=(1, 8),
                       eager_widths=(1, 4), eager_kv=(512,), prefill_tokens=(64, 512),
                       prefill_prefix=(0, 1024), extend_widths=(2, 3, 4),
                       extend_eager_widths=(1, 4), reps=3, warmup=1, eager_reps=2, settle_s=0.05)
    out = tmp_path / "p.parquet"
    run_profile(ModelShape(**V2_LITE_LAYERS, attention="mla"), str(out), spec,
                executor_opts={"max_context": 16384, "kv_pool_gib": 1})
    t = pq.read_table(out).to_pylist()
    v = {(r["bs"], r["width"], r["kv_len"]): r["latency_s"] for r in t if r["kind"] == "verify" and r["graph"]}
    assert len(v) == 2 * 4 * 2
    for b in (1, 4):
        for kv in (128, 2048):
            assert 0.8 < v[(b, 3, kv)] / v[(b, 4, kv)] < 1.25   # the same graph, measured twice
    e = {(r["bs"], r["width"], r["kv_len"]): r["latency_s"] for r in t
         if r["kind"] == "draft_extend" and r["graph"]}
    assert len(e) == 2 * 3 * 2
    for b in (1, 4):
        for kv in (128, 2048):
            assert 0.8 < e[(b, 3, kv)] / e[(b, 4, kv)] < 1.25
    assert len([r for r in t if r["kind"] == "draft_extend" and not r["graph"]]) == 2 * 2
    kinds = {r["kind"] for r in t}
    assert kinds == {"verify", "draft", "draft_extend", "prefill"}
    from traces.errors import SpecschedError

    with pytest.raises(SpecschedError, match="1, 2 or 4 query rows"):
        run_profile(ModelShape(**V2_LITE_LAYERS, attention="mla"), str(tmp_path / "q.parquet"),
                    ProfileSpec(**{**asdict(spec), "extend_widths": (2, 5)}),
                    executor_opts={"max_context": 16384, "kv_pool_gib": 1})
    assert not (tmp_path / "q.parquet").exists()


def test_deepseek_v2_lite_whole_model_steps():
    """The whole model (27 layers, 31 GB of bf16 weights) plus its MTP-style draft layer."""
    import json

    from backends.aiter import make_executor
    from backends.protocol import DraftBatch, DraftExtendBatch, PrefillBatch, VerifyBatch

    ex = make_executor("deepseek-v2-lite", capture_bs=[1, 8], kv_pool_gib=8)
    res = {}
    for w in (1, 2, 4):
        t = ex.verify(VerifyBatch(bs_real=8, bs_padded=8, widths=np.full(8, w),
                                  kv_lens=np.full(8, 2048), launch_width=w, mode="uniform",
                                  graph=True))
        res[f"verify_bs8_w{w}_kv2048_ms"] = t.latency_s * 1e3
    res["draft_bs8_kv2048_ms"] = 1e3 * ex.draft(DraftBatch(
        bs_real=8, bs_padded=8, kv_lens=np.full(8, 2048), passes=1, graph=True))
    res["draft_extend_bs8_w4_kv2048_ms"] = 1e3 * ex.draft_extend(DraftExtendBatch(
        bs_real=8, bs_padded=8, width=4, kv_lens=np.full(8, 2048), graph=True))
    res["prefill_1024_ms"] = 1e3 * ex.prefill(PrefillBatch(tokens=np.array([1024]),
                                                           prefix=np.array([0])))
    print(json.dumps(res))
    # 8 x 4 rows route 192 (token, expert) pairs over 64 experts: nearly every expert's weights
    # (about 28 of the 31 GB) are read, so a step takes milliseconds, not microseconds or seconds
    assert 2.0 < res["verify_bs8_w4_kv2048_ms"] < 200.0
    assert res["verify_bs8_w1_kv2048_ms"] <= res["verify_bs8_w4_kv2048_ms"] * 1.2
    # the draft-extend pass is one MoE layer against the verify's 27: a fraction of it
    assert 0 < res["draft_extend_bs8_w4_kv2048_ms"] < res["verify_bs8_w4_kv2048_ms"]
