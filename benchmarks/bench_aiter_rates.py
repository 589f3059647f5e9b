"""The achieved rates of the kernels DeepSeek-V2-Lite's live step runs, each alone (GPU).

Measures, in bf16 on the current GPU, each kernel class of ``backends/aiter/estimate.py`` at sizes
of V2-Lite's step (hidden 2048, 16 heads, latent 512 + rope 64, 64 experts of 1408, top-6):

* ``launch_floor_graph_s``: one kernel's time in a CUDA graph of 256 one-row RMSNorms (AITER's
  Triton kernel), replayed queued behind a spin kernel; ``launch_floor_eager_s``: the same 256
  launched eagerly, queued behind a spin kernel (what the executor's queued timing sees);
* ``gemm_flops``: cuBLAS through ``torch.nn.functional.linear`` at M = 8192 (q, shared gate/up,
  dense gate/up, dense down); ``gemm_bw``: weight streaming at M = 1 and 16 (q, shared gate/up,
  dense gate/up, LM head), bytes = weights + activations;
* ``moe_bw``: AITER's Triton ``fused_moe`` (gate/up then down, as ``backends/aiter/moe.py``
  calls it) at 1, 4, 16 and 64 rows, bytes = the weights of the experts the rows touch (+
  activations); ``moe_flops``: its FLOP rate at 255 (``small_M`` tile), 768 (``medium_M``) and
  2048 rows (``large_M``), FLOPs = ``2 T k 3 H I``;
* ``mla_decode_bw`` / ``mla_decode_flops``: AITER's Triton MLA decode (both stages) at 32
  requests x width 1 x KV 8192, bytes = the latent rows each decode row reads (also measured, not
  used: width 4 x KV 4096, where L2 may serve a request's repeated reads);
* ``elementwise_bw``: AITER's residual add + RMSNorm (16384 rows), the SiLU-and-mul kernel (8192 x
  10944) and the fused rope + latent-cache write (4096 rows); the median;
* ``flash_flops``: the prefill's varlen flash attention (one causal request of 2048 and of 8192
  tokens, q/k 192, v 128); the median;
* ``mla_decode_curve``: stage 1 of the MLA decode alone at each (rows, KV) of
  ``DECODE_CURVE_GRID`` (one row per request, the latent cache rotated over 256 MB): its
  programs (head groups x rows x KV splits), mean keys per row, bytes (as above), seconds;
* ``flash_curve``: the flash attention at each (query tokens, prefix) of ``FLASH_CURVE_GRID``
  (one request): its programs, FLOPs, seconds.

The two curves make the estimate's decode and flash rates depend on the launch
(``backends/aiter/rate_curves.py``); the single rates stay for files and readers without them.
The ``moe_bw`` points (with ``tokens``) and the ``gemm_bw`` points (with ``m``, ``k``, ``n``) are
read as two more curves, the MoE's bandwidth by rows and a GEMM's by its weight bytes.

The workloads are in ``benchmarks/aiter_rate_workloads.py``. Every figure is a median of repeated
replays; the weights read per call rotate over copies of more than 256 MB so that the 50 MB L2
never holds them. Rates are "bytes (or FLOPs) / time" at the measured size. Without a usable GPU it
prints one ``error:`` line and exits 2.

    python benchmarks/bench_aiter_rates.py --json rates.json      # about 30-60 s on an H200
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.aiter_rate_workloads import (  # noqa: E402
    DECODE_CURVE_GRID, DENSE_I, FLASH_CURVE_GRID, HEADS, LORA, NOPE, ROPE, SHARED_I, VOCAB, Env, H,
    w_add_rmsnorm, w_flash, w_linear, w_mla_decode, w_moe, w_rmsnorm, w_rope_cache, w_silu)


# ---- timing (GPU) -------------------------------------------------------------------------------
SPIN_CYCLES = 20_000_000  # about 10 ms at 2 GHz: the host queues the launches meanwhile


def graph_time(fn, n: int, reps: int = 7) -> float:
    """Seconds per call of ``fn(i)``: a graph of ``n`` calls, replayed queued behind a spin
    kernel (so the graph's launch latency is not counted), median of ``reps``."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(min(n, 3)):
            fn(i)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(n):
            fn(i)
    g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(SPIN_CYCLES)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) / 1e3)
    del g
    return float(np.median(ts)) / n


def eager_time(fn, n: int, reps: int = 7) -> float:
    """Seconds per call of ``fn(i)`` launched eagerly ``n`` times, queued behind a spin kernel."""
    import torch

    for i in range(3):
        fn(i)
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(SPIN_CYCLES * 3)
        e0.record()
        for i in range(n):
            fn(i)
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) / 1e3)
    return float(np.median(ts)) / n


def calls_for(est_s: float, target_s: float = 5e-3) -> int:
    return int(min(64, max(2, round(target_s / max(est_s, 1e-7)))))


def measure(env: Env, *, log=print) -> dict:
    """Every figure of the module docstring (GPU): ``{"rates": {...}, "points": [...]}``."""
    import torch

    points: list[dict] = []

    def point(cls, what, fn, nbytes, flops, n, **extra):
        t = graph_time(fn, n)
        p = {"class": cls, "what": what, "seconds": t, "bytes": nbytes, "flops": flops,
             "bytes_per_s": nbytes / t, "flops_per_s": flops / t if flops else None, **extra}
        points.append(p)
        log(f"{cls:12s} {what:42s} {t * 1e6:10.2f} us  {nbytes / t / 1e12:7.3f} TB/s"
            + (f"  {flops / t / 1e12:8.1f} TFLOP/s" if flops else ""))
        torch.cuda.empty_cache()
        return p

    # launch floor
    fn, _, _ = w_rmsnorm(env, 1)
    floor_g = graph_time(fn, 256)
    floor_e = eager_time(fn, 256)
    tiny = torch.zeros(1, device=env.device, dtype=env.dtype)
    floor_torch = graph_time(lambda i: tiny.add_(1), 256)
    log(f"launch floor: {floor_g * 1e6:.2f} us per kernel in a graph (1-row RMSNorm), "
        f"{floor_e * 1e6:.2f} us eager queued; torch 1-element add in a graph {floor_torch * 1e6:.2f} us")
    # GEMMs
    for k, n in ((H, HEADS * (NOPE + ROPE)), (H, 2 * SHARED_I), (H, 2 * DENSE_I), (DENSE_I, H)):
        fn, b, f = w_linear(env, 8192, k, n, rotate=False)
        point("gemm_flops", f"linear M 8192 K {k} N {n}", fn, b, f, 8)
    for m in (1, 16):
        for k, n in ((H, HEADS * (NOPE + ROPE)), (H, 2 * SHARED_I), (H, 2 * DENSE_I), (H, VOCAB)):
            fn, b, f = w_linear(env, m, k, n, rotate=True)
            point("gemm_bw", f"linear M {m} K {k} N {n}", fn, b, f, calls_for(b / 4e12), m=m,
                  k=k, n=n)
    # fused MoE
    for t in (1, 4, 16, 64):
        fn, b, f, touched = w_moe(env, t)
        point("moe_bw", f"fused_moe x2, {t} rows ({touched} experts)", fn, b, f,
              calls_for(b / 4e12), tokens=t, experts_touched=touched)
    for t, tile in ((255, "small_M"), (768, "medium_M"), (2048, "large_M")):
        fn, b, f, touched = w_moe(env, t, sets=1)
        point("moe_flops", f"fused_moe x2, {t} rows ({tile})", fn, b, f, 4, tokens=t, tile=tile)
    # MLA decode
    fn, b, f = w_mla_decode(env, 32, 1, 8192)
    point("mla_decode", "32 x width 1, KV 8192", fn, b, f, 8, use=True)
    fn, b, f = w_mla_decode(env, 8, 4, 4096)
    point("mla_decode", "8 x width 4, KV 4096 (not used)", fn, b, f, 8, use=False)
    # the curves: MLA decode stage 1 by launch size, flash by (q, prefix)
    from backends.aiter.mla_kernels import decode_programs, decode_splits, flash_programs

    decode_curve = []
    from backends.aiter.mla import MAX_VIEW_ELEMENTS

    for rows, kv in DECODE_CURVE_GRID:
        if rows * (kv + 1) * (LORA + ROPE) > MAX_VIEW_ELEMENTS:
            # one cache of these rows is past the kernel's 32-bit offsets (an illegal address)
            print(f"mla_decode_curve stage 1, {rows} rows, KV {kv}: skipped, "
                  f"{rows * (kv + 1) * (LORA + ROPE):,} cache values > 2**31 - 1")
            continue
        fn, b, f = w_mla_decode(env, rows, 1, kv, stage1_only=True, rotate=True)
        p = point("mla_decode_curve", f"stage 1, {rows} rows, KV {kv}", fn, b, f,
                  calls_for(b / 1e12), rows=rows, kv=kv, splits=decode_splits(rows),
                  programs=decode_programs(rows, HEADS), keys_per_row=float(kv + 1))
        decode_curve.append({k: p[k] for k in ("programs", "rows", "kv", "splits", "keys_per_row",
                                               "bytes", "seconds", "bytes_per_s", "flops_per_s")})
    flash_curve = []
    for q, pre in FLASH_CURVE_GRID:
        fn, b, f = w_flash(env, q, prefix=pre)
        p = point("flash_curve", f"varlen causal, {q} tokens over {pre}", fn, b, f,
                  calls_for(f / 2e14), q=q, prefix=pre, programs=flash_programs(1, HEADS, q))
        flash_curve.append({k: p[k] for k in ("programs", "q", "prefix", "flops", "seconds",
                                              "flops_per_s")})
    # element-wise
    for what, (fn, b, f) in (("add + rmsnorm, 16384 rows", w_add_rmsnorm(env, 16384)),
                             ("silu-and-mul, 8192 x 10944", w_silu(env, 8192)),
                             ("rope + latent write, 4096 rows", w_rope_cache(env, 4096))):
        point("elementwise", what, fn, b, f, 8)
    # prefill flash attention
    for t in (2048, 8192):
        fn, b, f = w_flash(env, t)
        point("flash", f"varlen causal, {t} tokens", fn, b, f, 4)

    def med(cls, key):
        return float(np.median([p[key] for p in points if p["class"] == cls and p.get("use", True)]))

    rates = {
        "launch_floor_graph_s": floor_g,
        "launch_floor_eager_s": floor_e,
        "gemm_flops": med("gemm_flops", "flops_per_s"),
        "gemm_bw": med("gemm_bw", "bytes_per_s"),
        "moe_bw": med("moe_bw", "bytes_per_s"),
        "moe_flops": {p["tile"]: p["flops_per_s"] for p in points if p["class"] == "moe_flops"},
        "mla_decode_bw": med("mla_decode", "bytes_per_s"),
        "mla_decode_flops": med("mla_decode", "flops_per_s"),
        "elementwise_bw": med("elementwise", "bytes_per_s"),
        "flash_flops": med("flash", "flops_per_s"),
        "mla_decode_curve": decode_curve,
        "flash_curve": flash_curve,
    }
    return {"rates": rates, "launch_floor_torch_add_graph_s": floor_torch, "points": points}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args()
    from backends.aiter import bridge

    problem = bridge.gpu_problem()
    if problem is not None:
        print(f"error: bench_aiter_rates.py needs a CUDA or ROCm GPU: {problem}", file=sys.stderr)
        return 2
    import torch

    from backends.aiter.executor import gpu_info

    t0 = time.perf_counter()
    env = Env(torch.device("cuda", torch.cuda.current_device()), torch.bfloat16)
    out = measure(env)
    out.update({"gpu": gpu_info(), "versions": bridge.versions(), "wall_s": time.perf_counter() - t0,
                "command": "python benchmarks/bench_aiter_rates.py" + (" --json ..." if args.json else "")})
    r = out["rates"]
    print("rates:")
    for k, v in r.items():
        print(f"  {k}: " + (f"{len(v)} points" if isinstance(v, list) else json.dumps(v)))
    print(f"wall {out['wall_s']:.1f} s")
    if args.json:
        from traces.atomic import atomic_output_file

        with atomic_output_file(args.json) as tmp:
            Path(tmp).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
