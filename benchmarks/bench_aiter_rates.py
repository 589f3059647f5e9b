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

Every figure is a median of repeated replays; the weights read per call rotate over copies of
more than 256 MB so that the 50 MB L2 never holds them.  Rates are "bytes (or FLOPs) / time" at
the measured size.  Without a usable GPU it prints one ``error:`` line and exits 2.

    python benchmarks/bench_aiter_rates.py --json rates.json      # about 30-60 s on an H200
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

H, HEADS, LORA, ROPE, NOPE, VHEAD = 2048, 16, 512, 64, 128, 128
E, TOPK, MOE_I, DENSE_I, SHARED_I, VOCAB = 64, 6, 1408, 10944, 2816, 102400
ROTATE_BYTES = 256 << 20

#: the MLA decode curve's launches: (rows, KV) with one row per request (width 1)
DECODE_CURVE_GRID = tuple((r, kv) for kv in (2048, 32768) for r in (1, 2, 4, 8, 16, 32, 64, 128, 192)) \
    + tuple((r, 8192) for r in (1, 4, 16, 64, 192))
#: the flash curve's launches: (query tokens, cached prefix tokens), one request
FLASH_CURVE_GRID = tuple((q, p) for p in (0, 8192) for q in (64, 128, 256, 512, 1024, 2048, 4096, 8192)) \
    + tuple((q, 2048) for q in (64, 256, 1024))


# ---- workloads: each returns (fn(i), bytes per call, flops per call) --------------------------
# They run on any device (the CPU tests call them under the Triton interpreter at tiny sizes).
class Env:
    """Device, dtype, generator and the kernels."""

    def __init__(self, device, dtype):
        import torch

        from backends.aiter import bridge
        from backends.aiter.mla_kernels import load_mla_kernels

        self.torch = torch
        self.device, self.dtype = device, dtype
        self.k = bridge.load_kernels()
        self.mk = load_mla_kernels()
        self.gen = torch.Generator(device=device).manual_seed(0)

    def randn(self, *shape, scale=1.0, dtype=None):
        t = self.torch.empty(shape, device=self.device, dtype=dtype or self.dtype)
        return t.normal_(0.0, scale, generator=self.gen)


def copies_for(nbytes: int, limit: int = ROTATE_BYTES) -> int:
    """Copies of a ``nbytes`` operand whose total passes ``limit`` (at least 1, at most 64)."""
    return int(min(64, max(1, -(-limit // max(1, nbytes)))))


def w_rmsnorm(env: Env, rows: int, hidden: int = H):
    x = env.randn(rows, hidden)
    w = env.randn(hidden) + 1.0
    return (lambda i: env.k.rms_norm(x, w, 1e-6)), 2 * rows * hidden * 2, 0.0


def w_add_rmsnorm(env: Env, rows: int, hidden: int = H):
    torch = env.torch
    x, r = env.randn(rows, hidden), env.randn(rows, hidden)
    w = env.randn(hidden) + 1.0
    out, res = torch.empty_like(x), torch.empty_like(x)
    return ((lambda i: env.k.rmsnorm_add(out, x, r, res, w, 1e-6)), 4 * rows * hidden * 2, 0.0)


def w_silu(env: Env, rows: int, inter: int = DENSE_I):
    from backends.aiter.model import silu_and_mul

    x = env.randn(rows, 2 * inter)
    out = env.torch.empty((rows, inter), device=env.device, dtype=env.dtype)
    return (lambda i: silu_and_mul(x, out)), rows * 3 * inter * 2, 0.0


def w_rope_cache(env: Env, rows: int, heads: int = HEADS, lora: int = LORA, rope: int = ROPE):
    torch = env.torch
    from backends.aiter.model import Rope

    ro = Rope(rope, rows + 64, device=env.device, dtype=env.dtype, base=10000.0)
    q_lat, q_pe = env.randn(rows, heads, lora), env.randn(rows, heads, rope)
    c, k_pe = env.randn(rows, 1, lora), env.randn(rows, 1, rope)
    cache = env.randn(rows + 16, 1, lora + rope)
    slots = torch.arange(rows, device=env.device, dtype=torch.int64)
    pos = torch.arange(rows, device=env.device, dtype=torch.int64)
    q_full = torch.empty((rows, heads, lora + rope), device=env.device, dtype=env.dtype)
    ks = torch.ones(1, dtype=torch.float32, device=env.device)

    def fn(i):
        env.mk.rope_cat_cache(q_lat, q_pe, c, k_pe, cache, slots, pos, ro.cos, ro.sin, ks, False,
                              q_out=q_full)

    lat = lora + rope
    return fn, 2 * (rows * heads * lat + rows * lat) * 2, 0.0


def w_linear(env: Env, m: int, k: int, n: int, rotate: bool):
    import torch.nn.functional as F

    wbytes = k * n * 2
    ws = [env.randn(n, k, scale=1.0 / math.sqrt(k)) for _ in range(copies_for(wbytes) if rotate else 1)]
    x = env.randn(m, k)
    return (lambda i: F.linear(x, ws[i % len(ws)])), wbytes + m * (k + n) * 2, 2.0 * m * k * n


def moe_setup(env: Env, tokens: int, hidden: int = H, inter: int = MOE_I, experts: int = E,
              top_k: int = TOPK, sets: int = 2):
    """Expert weights (``sets`` copies), the routed rows of a uniform plan and their alignment, as
    ``backends/aiter/moe.py`` builds them."""
    torch = env.torch
    from backends.aiter.moe import moe_config, routing_plan

    ids = torch.as_tensor(routing_plan(tokens, experts, top_k, seed=0), device=env.device)
    weights = torch.rand((tokens, top_k), device=env.device, dtype=torch.float32, generator=env.gen)
    w13 = [env.randn(experts, 2 * inter, hidden, scale=1.0 / math.sqrt(hidden)) for _ in range(sets)]
    w2 = [env.randn(experts, hidden, inter, scale=1.0 / math.sqrt(inter)) for _ in range(sets)]
    cfg = moe_config(tokens)
    bm = cfg["BLOCK_SIZE_M"]
    pairs = tokens * top_k
    cap = pairs + experts * (bm - 1)
    sorted_ids = torch.full((cap,), pairs, dtype=torch.int32, device=env.device)
    expert_ids = torch.empty((-(-cap // bm),), dtype=torch.int32, device=env.device)
    post_pad = torch.empty((1,), dtype=torch.int32, device=env.device)
    env.mk.moe_align(ids, experts, bm, sorted_ids, expert_ids, post_pad)
    touched = int(torch.unique(ids).numel())
    return dict(ids=ids, weights=weights, w13=w13, w2=w2, cfg=cfg, sorted_ids=sorted_ids,
                expert_ids=expert_ids, post_pad=post_pad, touched=touched, tokens=tokens,
                pairs=pairs, hidden=hidden, inter=inter, top_k=top_k)


def w_moe(env: Env, tokens: int, **kw):
    """Both ``fused_moe`` calls of a MoE layer (gate/up, then down with the routing weights)."""
    import triton.language as tl

    torch = env.torch
    s = moe_setup(env, tokens, **kw)
    h, inter, k, pairs = s["hidden"], s["inter"], s["top_k"], s["pairs"]
    x = env.randn(tokens, h)
    act = env.randn(pairs, inter)
    up = torch.empty((tokens, k, 2 * inter), dtype=env.dtype, device=env.device)
    down = torch.empty((tokens, k, h), dtype=env.dtype, device=env.device)
    ctype = tl.bfloat16 if env.dtype == torch.bfloat16 else tl.float16

    def fn(i):
        j = i % len(s["w13"])
        env.mk.fused_moe(x, s["w13"][j], up, None, None, None, s["weights"], s["ids"],
                         s["sorted_ids"], s["expert_ids"], s["post_pad"], False, k, ctype, False,
                         False, False, None, dict(s["cfg"]))
        env.mk.fused_moe(act, s["w2"][j], down, None, None, None, s["weights"], s["ids"],
                         s["sorted_ids"], s["expert_ids"], s["post_pad"], True, 1, ctype, False,
                         False, False, None, dict(s["cfg"]))

    nbytes = s["touched"] * 3 * inter * h * 2 + (tokens * h + pairs * 2 * inter + pairs * inter
                                                 + pairs * h) * 2
    return fn, nbytes, 2.0 * pairs * 3 * h * inter, s["touched"]


def mla_stage1(env: Env):
    """Stage 1 of AITER's MLA decode alone (the module's private launcher, which
    ``decode_attention_fwd_grouped_rope`` calls before its stage 2)."""
    mod = sys.modules[env.mk.mla_decode.__module__]
    fn = getattr(mod, "_decode_grouped_att_m_fwd_rope", None)
    if fn is None:
        raise RuntimeError(f"{mod.__name__} has no _decode_grouped_att_m_fwd_rope: the installed "
                           f"amd-aiter launches the MLA decode's stages differently")
    return fn


def w_mla_decode(env: Env, bs: int, width: int, kv: int, heads: int = HEADS, lora: int = LORA,
                 rope: int = ROPE, *, stage1_only: bool = False, rotate: bool = False):
    """AITER's MLA decode over ``bs x width`` decode rows (row ``j`` of a request reads its
    ``kv + j + 1`` first latent rows), as ``backends/aiter/mla.py`` launches it; ``stage1_only``:
    its stage 1 alone (what ``backends/aiter/estimate.py``'s ``mla_decode`` class prices);
    ``rotate``: the latent cache rotates over copies of more than 256 MB (a small cache would
    otherwise be read from L2 on every call after the first)."""
    torch = env.torch
    from backends.aiter.mla_kernels import DECODE_CONFIG, decode_splits

    rows = bs * width
    lens = np.array([kv + j + 1 for _ in range(bs) for j in range(width)], dtype=np.int64)
    starts = np.repeat(np.arange(bs) * (kv + width), width)
    indptr = np.concatenate([[0], np.cumsum(lens)])
    indices = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lens)])
    n_cache = bs * (kv + width)
    caches = [env.randn(n_cache, 1, lora + rope)
              for _ in range(copies_for(n_cache * (lora + rope) * 2) if rotate else 1)]
    q = env.randn(rows, heads, lora + rope)
    o = torch.empty((rows, heads, lora), device=env.device, dtype=env.dtype)
    splits = decode_splits(rows)
    logits = torch.empty((rows, heads, splits, lora + 1), device=env.device, dtype=torch.float32)
    kvi = torch.as_tensor(indptr, dtype=torch.int32, device=env.device)
    kvx = torch.as_tensor(indices, dtype=torch.int32, device=env.device)
    scale = 1.0 / math.sqrt(NOPE + ROPE)

    stage1 = mla_stage1(env) if stage1_only else None

    def fn(i):
        cache = caches[i % len(caches)]
        if stage1 is not None:
            stage1(q, cache, cache[..., :lora], logits, None, lora, None, None, rope, kvi, kvx,
                   splits, scale, 0.0, False, False,
                   dict(DECODE_CONFIG["fwd_grouped_kernel_stage1_rope"]))
            return
        cfg = {a: dict(b) for a, b in DECODE_CONFIG.items()}
        env.mk.mla_decode(q, cache, cache[..., :lora], o, kvi, kvx, None, lora, rope, None, None,
                          logits, splits, scale, 0.0, False, False, cfg)

    keys = int(lens.sum())
    nbytes = keys * ((lora + rope) * 2 + 4) + rows * heads * (lora + rope) * 2 \
        + rows * heads * splits * (lora + 1) * 4
    return fn, nbytes, 2.0 * heads * (2 * lora + rope) * keys


def w_flash(env: Env, tokens: int, heads: int = HEADS, qk: int = NOPE + ROPE, v: int = VHEAD, *,
            prefix: int = 0):
    """One request's causal varlen flash attention: ``tokens`` queries over ``prefix + tokens``
    keys (query ``t`` sees the prefix and queries ``0..t``), as the executor's prefill calls it."""
    torch = env.torch
    nk = tokens + prefix
    q, k, vv = env.randn(tokens, heads, qk), env.randn(nk, heads, qk), env.randn(nk, heads, v)
    cu_q = torch.tensor([0, tokens], dtype=torch.int32, device=env.device)
    cu_k = torch.tensor([0, nk], dtype=torch.int32, device=env.device)
    scale = 1.0 / math.sqrt(qk)

    def fn(i):
        env.mk.flash_varlen(q, k, vv, cu_q, cu_k, tokens, nk, softmax_scale=scale, causal=True)

    pairs = tokens * prefix + tokens * (tokens + 1) // 2
    return (fn, (tokens * heads * qk + nk * heads * (qk + v) + tokens * heads * v) * 2,
            2.0 * heads * (qk + v) * pairs)


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
            point("gemm_bw", f"linear M {m} K {k} N {n}", fn, b, f, calls_for(b / 4e12))
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
    for rows, kv in DECODE_CURVE_GRID:
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
