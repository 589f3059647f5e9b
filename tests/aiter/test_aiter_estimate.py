"""The independent step-time estimate of the live MLA executor (backends/aiter/estimate.py) and
the kernel-rate benchmark's CPU behaviour; every count below is worked out by hand."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from backends.aiter import estimate as E
from backends.models import load_model
from traces.errors import SpecschedError

from tests.aiter.conftest import ROOT, run_interpreted

#: a made-up MLA + MoE geometry: hidden 16, 2 heads, latent 8 + rope 4, nope 4, v 4,
#: 8 experts of width 4 (top-2), 1 shared expert, one dense layer then one MoE layer
G = {"layers": 2, "hidden": 16, "heads": 2, "kv_lora_rank": 8, "qk_rope": 4, "qk_nope": 4,
     "v_head": 4, "vocab": 32, "intermediate": 12, "experts": 8, "experts_per_token": 2,
     "moe_intermediate": 4, "shared_intermediate": 4, "dense_layers": 1, "fusion_in": 0}

RATES = {"gemm_flops": 1e14, "gemm_bw": 1e12, "moe_bw": 2e12, "mla_decode_bw": 3e12,
         "mla_decode_flops": 5e13, "elementwise_bw": 4e12, "flash_flops": 2e14,
         "launch_floor_graph_s": 2e-6, "launch_floor_eager_s": 3e-6,
         "moe_flops": {"small_M": 1e13, "medium_M": 2e13, "large_M": 4e12}}


def _one(ks, name):
    got = [k for k in ks if k.name == name]
    assert len(got) >= 1, name
    return got


def test_decode_pass_bytes_and_flops_by_hand():
    # 2 requests with 3 and 5 cached tokens, 2 rows each: the rows see 4, 5 and 6, 7 keys
    ks = E.decode_kernels(G, [3, 5], 2, logits_rows=4)
    st1 = _one(ks, "MLA decode stage 1")
    assert len(st1) == 2                                # one per layer
    # keys 22 x (12 latent values x 2 B + 4 B index) + q 4 rows x 2 heads x 12 x 2 B
    # + split partials 4 x 2 x 16 splits x 9 x 4 B (4 rows: splits clamp to 16)
    assert st1[0].bytes == 22 * 28 + 4 * 2 * 12 * 2 + 4 * 2 * 16 * 9 * 4 == 5416
    assert st1[0].flops == 2 * 2 * (12 + 8) * 22 == 1760  # QK over 12 dims, PV over 8, per head
    q = _one(ks, "q proj")[0]                           # [4 x 16] @ [16 x 2*(4+4)]
    assert (q.bytes, q.flops) == (16 * 16 * 2 + 4 * (16 + 16) * 2, 2 * 4 * 16 * 16)
    wuk = _one(ks, "q_nope @ W_UK")[0]                  # per head [4 x 4] @ [4 x 8]
    assert (wuk.bytes, wuk.flops) == ((2 * 4 * 8 + 4 * 2 * 12) * 2, 2 * 4 * 2 * 4 * 8)
    # the MoE layer: 4 rows touch 8 (1 - (6/8)^4) = 5.46875 experts of 2 x 4 x 16 gate/up weights
    up = _one(ks, "fused moe gate/up")
    assert len(up) == 1 and up[0].tile == "small_M"
    assert up[0].bytes == pytest.approx(5.46875 * 8 * 16 * 2 + (4 * 16 + 8 * 8) * 2)
    assert up[0].flops == 2 * 8 * 16 * 8                # 8 (row, expert) pairs
    lm = _one(ks, "LM head")[0]
    assert lm.flops == 2 * 4 * 16 * 32
    # launches: 2 + 6 (front, row metadata); layer 0: 4 + 8 + 3 (dense MLP); layer 1: 4 + 8 +
    # 16 routed (router, bias, float, softmax, top-k, 6 align, ids fill, up, silu, down, sum)
    # + 4 shared; final norm + LM head
    assert sum(k.count for k in ks) == 8 + 15 + 32 + 2


def test_prefill_pairs_and_logits_by_hand():
    # one request of 3 tokens after a 2-token prefix: its rows see 3, 4 and 5 keys
    ks = E.prefill_kernels(G, [3], [2])
    fl = _one(ks, "flash attention")[0]
    assert fl.flops == 2 * 2 * (8 + 4) * 12
    kvb = _one(ks, "kv_b proj")[0]                      # over the 5 keys' latents
    assert kvb.flops == 2 * 5 * 8 * 2 * (4 + 4)
    assert _one(ks, "LM head")[0].flops == 2 * 1 * 16 * 32  # the last token only
    assert any(k.name == "prefix latent gather" for k in ks)
    assert not any(k.name == "prefix latent gather" for k in E.prefill_kernels(G, [3], [0]))


def test_kernel_time_is_floor_plus_the_slower_of_bytes_and_flops():
    k = E.Kernel("g", "gemm", 1e6, 1e9, count=2)
    # bytes 1e6 / 1e12 = 1 us; flops 1e9 / 1e14 = 10 us; floor 2 us (graph), 3 us (eager)
    assert E.kernel_time(k, RATES, graph=True) == pytest.approx(2 * 12e-6)
    assert E.kernel_time(k, RATES, graph=False) == pytest.approx(2 * 13e-6)
    m = E.Kernel("m", "moe", 2e7, 1e6, tile="large_M")  # 10 us of bytes vs 0.25 us of FLOPs
    assert E.kernel_time(m, RATES, graph=True) == pytest.approx(12e-6)
    b = E.breakdown([k, m], RATES, graph=True)
    assert b["floor"] == pytest.approx(6e-6) and b["gemm"] == pytest.approx(20e-6)


def test_expected_experts_and_tiles():
    assert E.expected_experts(1, 64, 6) == pytest.approx(6)
    assert E.expected_experts(0, 64, 6) == 0
    assert E.expected_experts(10_000, 64, 6) == pytest.approx(64)
    assert [E.moe_tile(t) for t in (1, 255, 256, 1023, 1024)] == \
        ["small_M", "small_M", "medium_M", "medium_M", "large_M"]


def test_v2_lite_passes_follow_the_mla_width_rule():
    m = load_model("deepseek-v2-lite")
    w3 = E.step_kernels(m, "verify", bs=2, width=3, kv_len=100, tokens=6)
    w4 = E.step_kernels(m, "verify", bs=2, width=4, kv_len=100, tokens=8)
    assert w3 == w4                                     # 3 runs as 4
    with pytest.raises(SpecschedError, match="MLA verify width 5"):
        E.step_kernels(m, "verify", bs=2, width=5, kv_len=100, tokens=10)
    # the draft pass is the one MTP layer (MoE) with eh_proj; 27 layers for the target
    d = E.step_kernels(m, "draft", bs=4, width=1, kv_len=100, tokens=4)
    assert sum(k.name == "MLA decode stage 1" for k in d) == 1
    assert sum(k.name == "eh_proj" for k in d) == 1
    assert sum(k.name == "MLA decode stage 1" for k in w4) == 27
    # draft-extend: logits for each request's last row only
    x = E.step_kernels(m, "draft_extend", bs=4, width=2, kv_len=100, tokens=8)
    assert _one(x, "LM head")[0].flops == 2 * 4 * 2048 * 102400


def test_compare_rows_and_summary():
    m = load_model("deepseek-v2-lite")
    row = {"kind": "draft", "graph": True, "bs": 1, "width": 1, "kv_len": 128, "tokens": 1}
    est = E.step_time(E.step_kernels(m, "draft", bs=1, width=1, kv_len=128, tokens=1), RATES,
                      graph=True)
    rows = [dict(row, latency_s=est * 1.1), dict(row, latency_s=est * 1.2, graph=False)]
    out = E.compare_rows(m, rows, RATES)
    assert out[0]["ratio"] == pytest.approx(1.1)
    s = E.summarize(out)
    assert s["groups"]["draft graph"]["share_within"] == 1.0
    # the eager row is estimated with the eager floor: a larger estimate, so a smaller ratio
    assert out[1]["estimate_s"] > est
    assert s["all"]["rows"] == 2


def test_rates_file_is_checked(tmp_path):
    p = tmp_path / "r.json"
    bad = dict(RATES)
    del bad["moe_bw"]
    p.write_text(json.dumps({"rates": bad}))
    with pytest.raises(SpecschedError, match=r"r\.json: rates\.moe_bw must be a positive number"):
        E.load_rates(p)
    p.write_text(json.dumps({"rates": dict(RATES, moe_flops={"small_M": 1.0})}))
    with pytest.raises(SpecschedError, match="rates.moe_flops.medium_M"):
        E.load_rates(p)
    p.write_text(json.dumps({"rates": RATES}))
    assert E.load_rates(p)["gemm_bw"] == 1e12


def test_comparison_script_on_the_shipped_profile(tmp_path):
    p = tmp_path / "rates.json"
    p.write_text(json.dumps({"rates": RATES}))
    out = tmp_path / "cmp.json"
    res = subprocess.run([sys.executable, "benchmarks/aiter_estimate_vs_profile.py", "--rates",
                          str(p), "--json", str(out)], cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    assert doc["summary"]["all"]["rows"] == len(doc["rows"]) > 400
    assert {"verify graph", "draft graph", "draft_extend graph", "prefill eager"} <= \
        set(doc["summary"]["groups"])
    res = subprocess.run([sys.executable, "benchmarks/aiter_estimate_vs_profile.py", "--rates",
                          str(tmp_path / "missing.json")], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert res.returncode == 2 and res.stderr.startswith("error: ") and "Traceback" not in res.stderr


def test_rates_benchmark_refuses_without_a_gpu(tmp_path):
    from backends.aiter import bridge

    if bridge.gpu_problem() is None:
        pytest.skip("a GPU is present")
    out = tmp_path / "r.json"
    res = subprocess.run([sys.executable, "benchmarks/bench_aiter_rates.py", "--json", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2
    assert res.stderr.strip().count("\n") == 0 and res.stderr.startswith("error: ")
    assert not out.exists()


def test_rates_benchmark_workloads_run_under_the_interpreter():
    """Each workload the benchmark times makes the executor's kernel calls (tiny sizes, CPU)."""
    out = run_interpreted("""
import sys, torch
import benchmarks.aiter_rate_workloads as B
env = B.Env(torch.device('cpu'), torch.float16)
for fn, b, f in [B.w_rmsnorm(env, 2, 64), B.w_add_rmsnorm(env, 3, 64), B.w_silu(env, 3, 32),
                 B.w_rope_cache(env, 3, 4, 32, 16), B.w_linear(env, 2, 32, 48, rotate=False),
                 B.w_mla_decode(env, 2, 2, 20, heads=16, lora=64, rope=16),
                 B.w_mla_decode(env, 2, 1, 20, heads=16, lora=64, rope=16, stage1_only=True,
                                rotate=True),
                 B.w_flash(env, 16, heads=2, qk=48, v=32),
                 B.w_flash(env, 16, heads=2, qk=48, v=32, prefix=8)]:
    fn(0)
fn, b, f, touched = B.w_moe(env, 3, hidden=64, inter=32, experts=8, top_k=2, sets=1)
fn(0)
print('ok', b, f, touched)
""", timeout=600)
    last = out.strip().splitlines()[-1].split()
    assert last[0] == "ok"
    touched = int(last[3])
    # 3 rows x top-2 of 8 experts: gate/up + down weights of the touched experts + activations
    assert int(last[1]) == touched * 3 * 32 * 64 * 2 + (3 * 64 + 6 * 64 + 6 * 32 + 6 * 64) * 2
    assert float(last[2]) == 2.0 * 6 * 3 * 64 * 32


def test_live_steps_are_scored_at_their_padded_batch_width_and_mean_kv(tmp_path):
    """A made-up recorded run: a verify step twice its estimate, a two-pass draft step exactly
    two single-pass estimates, a prefill (not scored)."""
    import importlib.util

    import pyarrow as pa
    import pyarrow.parquet as pq

    spec = importlib.util.spec_from_file_location(
        "est_cmp", ROOT / "benchmarks" / "aiter_estimate_vs_profile.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    model = load_model("deepseek-v2-lite")
    one = lambda kind, bs, w, kv: E.step_time(  # noqa: E731
        E.step_kernels(model, kind, bs=bs, width=w, kv_len=kv, tokens=0), RATES, graph=True)
    # verify: 3 requests padded to 4, width 4, mean KV 1000.4 -> looked up at (4, 4, 1000)
    verify_s = 2.0 * one("verify", 4, 4, 1000)
    draft_s = 2 * one("draft", 4, 1, 1000)
    steps = pa.table({"kind": ["prefill", "verify", "draft"], "graph": [False, True, True],
                      "bs_padded": [1, 4, 4], "width": [0, 4, 1],
                      "kv_mean": [0.0, 1000.4, 1000.4], "passes": [1, 1, 2],
                      "latency_s": [0.05, verify_s, draft_s]})
    run = tmp_path / "run"
    run.mkdir()
    pq.write_table(steps, run / "steps.parquet")
    (run / "summary.json").write_text(json.dumps({"model": "deepseek-v2-lite"}))
    rates = tmp_path / "rates.json"
    rates.write_text(json.dumps({"rates": RATES}))
    got = mod.run_steps(str(rates), str(run), within=0.15)["kinds"]
    assert set(got) == {"verify", "draft"}
    assert got["verify"]["median_ratio"] == pytest.approx(2.0)
    assert got["verify"]["share_within"] == 0.0 and got["verify"]["time_share_within"] == 0.0
    assert got["draft"]["median_ratio"] == pytest.approx(1.0)
    assert got["draft"]["share_within"] == 1.0
    with pytest.raises(SpecschedError, match="not a recorded run"):
        mod.run_steps(str(rates), str(tmp_path / "missing"), within=0.15)


# ---- the launch-size curves (backends/aiter/rate_curves.py) -------------------------------------
#: a made-up decode curve: at 1,024 keys per row 1e11 B/s at 16 programs, 5e11 at 256; at
#: 16,384 keys 2e11 and 1e12; the (256, 1024) point measured twice (5e11 and 1.5e12: 1e12 merged)
DECODE = [{"programs": 16, "keys_per_row": 1024, "bytes": 1e8, "seconds": 1e-3},
          {"programs": 256, "keys_per_row": 1024, "bytes": 1e9, "seconds": 2e-3},
          {"programs": 256, "keys_per_row": 1024, "bytes": 3e9, "seconds": 2e-3},
          {"programs": 16, "keys_per_row": 16384, "bytes": 2e8, "seconds": 1e-3},
          {"programs": 256, "keys_per_row": 16384, "bytes": 1e9, "seconds": 1e-3}]
#: a made-up flash curve: prefix 0: 1e13 FLOP/s at q 64, 1e14 at 1024; prefix 8192: 2e13, 1.2e14
FLASH = [{"q": 64, "prefix": 0, "flops": 1e10, "seconds": 1e-3},
         {"q": 1024, "prefix": 0, "flops": 1e11, "seconds": 1e-3},
         {"q": 64, "prefix": 8192, "flops": 2e10, "seconds": 1e-3},
         {"q": 1024, "prefix": 8192, "flops": 1.2e11, "seconds": 1e-3}]


def test_decode_bandwidth_is_log_linear_in_programs_and_keys_and_held_at_the_ends():
    from backends.aiter.rate_curves import decode_bandwidth as bw

    assert bw(DECODE, 16, 1024) == pytest.approx(1e11)
    assert bw(DECODE, 256, 1024) == pytest.approx(1e12)        # the two points merged
    # 64 programs: halfway from 16 to 256 in ln -> 5.5e11 at 1,024 keys, 6e11 at 16,384;
    # 4,096 keys: halfway from 1,024 to 16,384 in ln -> 5.75e11
    assert bw(DECODE, 64, 1024) == pytest.approx(5.5e11)
    assert bw(DECODE, 64, 16384) == pytest.approx(6e11)
    assert bw(DECODE, 64, 4096) == pytest.approx(5.75e11)
    # outside the measured programs and keys: the end values
    assert bw(DECODE, 4, 1024) == pytest.approx(1e11)
    assert bw(DECODE, 1000, 65536) == pytest.approx(1e12)
    assert bw(DECODE, 16, 100) == pytest.approx(1e11)
    # one measured KV only: programs alone
    assert bw(DECODE[3:], 64, 100) == pytest.approx(6e11)


def test_flash_rate_is_log_linear_in_q_and_linear_in_prefix():
    from backends.aiter.rate_curves import flash_rate as fr

    # q 256: halfway from 64 to 1,024 in ln -> 5.5e13 (prefix 0), 7e13 (prefix 8,192)
    assert fr(FLASH, 256, 0) == pytest.approx(5.5e13)
    assert fr(FLASH, 256, 8192) == pytest.approx(7e13)
    assert fr(FLASH, 256, 4096) == pytest.approx(6.25e13)      # halfway in prefix
    assert fr(FLASH, 8192, 16384) == pytest.approx(1.2e14)
    assert fr(FLASH, 16, 0) == pytest.approx(1e13)


def test_decode_and_prefill_kernels_carry_their_launch():
    from backends.aiter.mla_kernels import decode_programs, flash_programs

    # 16 heads (one head group of BLOCK_H 16) x rows x splits (2 x 132 programs over the rows,
    # 2-16): 1 row -> 16 splits; 16 rows -> 16; 32 rows -> 9; 128 -> 3; 192 -> 2
    assert [decode_programs(r, 16) for r in (1, 16, 32, 128, 192)] == [16, 256, 288, 384, 384]
    assert decode_programs(4, 32) == 2 * 4 * 16                 # 32 heads: two groups
    assert flash_programs(1, 16, 64) == 16 and flash_programs(2, 16, 129) == 64
    # G: 2 heads, one group; 4 rows -> 16 splits = 64 programs; 22 keys over 4 rows
    st1 = _one(E.decode_kernels(G, [3, 5], 2, logits_rows=4), "MLA decode stage 1")[0]
    assert (st1.programs, st1.keys_per_row) == (64, 5.5)
    fl = _one(E.prefill_kernels(G, [3, 5], [2, 6]), "flash attention")[0]
    assert (fl.q, fl.prefix) == (4.0, 4.0)                     # means per request


def test_kernel_time_uses_the_curves_when_present():
    rates = dict(RATES, mla_decode_curve=DECODE, flash_curve=FLASH)
    # 64 programs at 4,096 keys: 5.75e11 B/s; 5.75e5 bytes -> 1 us, + the 2 us graph floor;
    # the FLOPs are not a second bound with a curve (1e9 / 5e13 would be 20 us)
    d = E.Kernel("d", "mla_decode", 5.75e5, 1e9, programs=64, keys_per_row=4096)
    assert E.kernel_time(d, rates, graph=True) == pytest.approx(3e-6)
    # without the curve: max(5.75e5 / 3e12, 1e9 / 5e13) = 20 us
    assert E.kernel_time(d, RATES, graph=True) == pytest.approx(22e-6)
    # flash at q 256 over 4,096: 6.25e13 FLOP/s; 6.25e8 FLOPs -> 10 us, + the 3 us eager floor
    f = E.Kernel("f", "flash", 1.0, 6.25e8, q=256, prefix=4096)
    assert E.kernel_time(f, rates, graph=False) == pytest.approx(13e-6)
    assert E.kernel_time(f, RATES, graph=False) == pytest.approx(3e-6 + 6.25e8 / 2e14)


def test_rates_file_with_and_without_curves(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"rates": dict(RATES, mla_decode_curve=DECODE, flash_curve=FLASH)}))
    assert len(E.load_rates(p)["mla_decode_curve"]) == 5
    bad = [dict(DECODE[0]), dict(DECODE[1], seconds=0)]
    p.write_text(json.dumps({"rates": dict(RATES, mla_decode_curve=bad)}))
    with pytest.raises(SpecschedError, match=r"rates\.mla_decode_curve\[1\]\.seconds must be a "
                                             r"positive number"):
        E.load_rates(p)
    p.write_text(json.dumps({"rates": dict(RATES, flash_curve=[])}))
    with pytest.raises(SpecschedError, match="rates.flash_curve must be a non-empty list"):
        E.load_rates(p)
    p.write_text(json.dumps({"rates": dict(RATES, flash_curve=[dict(FLASH[0], q="64")])}))
    with pytest.raises(SpecschedError, match=r"flash_curve\[0\]\.q must be a positive number"):
        E.load_rates(p)


# ---- the fused MoE's and the GEMMs' bandwidth curves, from the file's points --------------------
#: made-up moe_bw points: 1 row 1e12 B/s, 4 rows 2e12, 16 rows measured twice (3e12 and 5e12:
#: 8e8 bytes over 2e-4 s merged, 4e12); made-up gemm_bw points: 2 MiB of weights (K 1024 N 1024)
#: 1e12, 8 MiB (N 4096) at M 1 4e12 and at M 16 2e12 (merged 3e12), 32 MiB (K and N as fields,
#: no "what" to read them from) 5e12; and points no curve takes
POINTS = [
    {"class": "moe_bw", "tokens": 1, "bytes": 1e8, "seconds": 1e-4},
    {"class": "moe_bw", "tokens": 4, "bytes": 2e8, "seconds": 1e-4},
    {"class": "moe_bw", "tokens": 16, "bytes": 3e8, "seconds": 1e-4},
    {"class": "moe_bw", "tokens": 16, "bytes": 5e8, "seconds": 1e-4},
    {"class": "gemm_bw", "what": "linear M 1 K 1024 N 1024", "bytes": 2e6, "seconds": 2e-6},
    {"class": "gemm_bw", "what": "linear M 1 K 1024 N 4096", "bytes": 8e6, "seconds": 2e-6},
    {"class": "gemm_bw", "what": "linear M 16 K 1024 N 4096", "bytes": 4e6, "seconds": 2e-6},
    {"class": "gemm_bw", "what": "cuBLAS", "k": 2048, "n": 8192, "bytes": 5e6, "seconds": 1e-6},
    {"class": "gemm_flops", "what": "linear M 8192 K 1024 N 1024", "bytes": 1, "seconds": 1},
    {"class": "moe_flops", "tokens": 255, "bytes": 1, "seconds": 1},
]
MIB = 2 ** 20


def _rates_file(tmp_path, points, name="r.json"):
    p = tmp_path / name
    p.write_text(json.dumps({"rates": RATES, "points": points}))
    return p


def test_moe_and_gemm_bandwidth_are_log_linear_between_the_measured_points(tmp_path):
    from backends.aiter.rate_curves import gemm_bandwidth, moe_bandwidth

    r = E.load_rates(_rates_file(tmp_path, POINTS))
    moe, gemm = r["moe_bw_curve"], r["gemm_bw_curve"]
    assert len(moe) == 4 and len(gemm) == 4                    # the *_flops points are not taken
    assert moe_bandwidth(moe, 1) == pytest.approx(1e12)
    assert moe_bandwidth(moe, 2) == pytest.approx(1.5e12)      # halfway from 1 to 4 rows in ln
    assert moe_bandwidth(moe, 8) == pytest.approx(3e12)        # halfway from 4 (2e12) to 16 (4e12)
    assert moe_bandwidth(moe, 16) == pytest.approx(4e12)       # the two points merged
    assert moe_bandwidth(moe, 0) == pytest.approx(1e12)        # held at the ends
    assert moe_bandwidth(moe, 1000) == pytest.approx(4e12)
    assert gemm_bandwidth(gemm, 2 * MIB) == pytest.approx(1e12)
    assert gemm_bandwidth(gemm, 8 * MIB) == pytest.approx(3e12)   # M 1 and M 16 merged
    assert gemm_bandwidth(gemm, 4 * MIB) == pytest.approx(2e12)   # halfway from 2 to 8 MiB in ln
    assert gemm_bandwidth(gemm, 16 * MIB) == pytest.approx(4e12)  # halfway from 8 to 32 MiB
    assert gemm_bandwidth(gemm, 1024) == pytest.approx(1e12)
    assert gemm_bandwidth(gemm, 1e12) == pytest.approx(5e12)


def test_a_file_without_tokens_or_shapes_keeps_the_single_rates(tmp_path):
    bare = [{k: v for k, v in p.items() if k not in ("tokens", "k", "n")} for p in POINTS]
    bare = [dict(p, what="cuBLAS") if p["class"] == "gemm_bw" else p for p in bare]
    r = E.load_rates(_rates_file(tmp_path, bare))
    assert "moe_bw_curve" not in r and "gemm_bw_curve" not in r
    # no points at all: the same
    assert "moe_bw_curve" not in E.load_rates(_rates_file(tmp_path, None, "n.json"))
    bad = [POINTS[0], dict(POINTS[1], tokens=0)]
    with pytest.raises(SpecschedError, match=r"r\.json: points\[1\]\.tokens must be a positive"):
        E.load_rates(_rates_file(tmp_path, bad))


def test_moe_and_gemm_kernels_are_priced_off_their_curves(tmp_path):
    r = E.load_rates(_rates_file(tmp_path, POINTS))
    # 8 rows: 3e12 B/s; 3e6 bytes -> 1 us + the 2 us graph floor; 1e6 FLOPs at 1e13 are 0.1 us
    m = E.Kernel("m", "moe", 3e6, 1e6, tile="small_M", rows=8)
    assert E.kernel_time(m, r, graph=True) == pytest.approx(3e-6)
    # the median moe_bw without the curve: 3e6 / 2e12 = 1.5 us
    assert E.kernel_time(m, RATES, graph=True) == pytest.approx(3.5e-6)
    # the FLOP bound is kept: 1e8 FLOPs at small_M's 1e13 = 10 us against 1 us of bytes
    m2 = E.Kernel("m", "moe", 3e6, 1e8, tile="small_M", rows=8)
    assert E.kernel_time(m2, r, graph=True) == pytest.approx(12e-6)
    # a GEMM with 4 MiB of weights: 2e12 B/s; 4e6 bytes -> 2 us + 2 us; without: 4e6 / 1e12
    g = E.Kernel("g", "gemm", 4e6, 1e3, weights=4 * MIB)
    assert E.kernel_time(g, r, graph=True) == pytest.approx(4e-6)
    assert E.kernel_time(g, RATES, graph=True) == pytest.approx(6e-6)


def test_decode_pass_kernels_carry_their_rows_and_weight_bytes():
    ks = E.decode_kernels(G, [3, 5], 2, logits_rows=4)
    assert [k.rows for k in _one(ks, "fused moe gate/up") + _one(ks, "fused moe down")] == [4, 4]
    assert _one(ks, "q proj")[0].weights == 16 * 16 * 2       # [16 x 2 heads * (4 + 4)], 2 B
    assert _one(ks, "q_nope @ W_UK")[0].weights == 2 * 4 * 8 * 2  # per head [4 x 8], 2 heads
    assert _one(ks, "LM head")[0].weights == 16 * 32 * 2


def test_comparison_script_prints_and_drops_curves(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "est_cmp2", ROOT / "benchmarks" / "aiter_estimate_vs_profile.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    p = str(_rates_file(tmp_path, POINTS))
    text = "\n".join(mod.curve_lines(mod.rates_without(p)))
    # the moe line: 1e12, 2e12, 4e12 B/s at 1, 4, 16 rows; the GEMMs' weights in MB (1e6 bytes)
    assert "      1.000   2.000   4.000" in text
    assert "    2.1     8.4    33.6" in text
    assert "moe_bw_curve" not in mod.rates_without(p, ("moe_bw_curve",))
    with pytest.raises(SpecschedError, match="--without moe: not a curve"):
        mod.rates_without(p, ("moe",))
