"""The workloads ``benchmarks/bench_aiter_rates.py`` times: DeepSeek-V2-Lite's kernels, one call each.

Each ``w_*`` function builds its operands on ``env``'s device and returns ``(fn(i), bytes per
call, FLOPs per call)`` (``w_moe`` also the experts the rows touch); ``fn(i)`` makes the call the
executor makes, with the ``i``-th copy of whatever rotates.  They run on any device: the CPU tests
call them at tiny sizes under the Triton interpreter.
"""

from __future__ import annotations

import math
import sys

H, HEADS, LORA, ROPE, NOPE, VHEAD = 2048, 16, 512, 64, 128, 128
E, TOPK, MOE_I, DENSE_I, SHARED_I, VOCAB = 64, 6, 1408, 10944, 2816, 102400
ROTATE_BYTES = 256 << 20

#: the MLA decode curve's launches: (rows, KV) with one row per request (width 1)
DECODE_CURVE_GRID = tuple((r, kv) for kv in (2048, 32768) for r in (1, 2, 4, 8, 16, 32, 64, 128, 192)) \
    + tuple((r, 8192) for r in (1, 4, 16, 64, 192))
#: the flash curve's launches: (query tokens, cached prefix tokens), one request
FLASH_CURVE_GRID = tuple((q, p) for p in (0, 8192) for q in (64, 128, 256, 512, 1024, 2048, 4096, 8192)) \
    + tuple((q, 2048) for q in (64, 256, 1024))


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
    from backends.aiter.moe import align_blocks, moe_config, routing_plan

    ids = torch.as_tensor(routing_plan(tokens, experts, top_k, seed=0), device=env.device)
    weights = torch.rand((tokens, top_k), device=env.device, dtype=torch.float32, generator=env.gen)
    w13 = [env.randn(experts, 2 * inter, hidden, scale=1.0 / math.sqrt(hidden)) for _ in range(sets)]
    w2 = [env.randn(experts, hidden, inter, scale=1.0 / math.sqrt(inter)) for _ in range(sets)]
    cfg = moe_config(tokens)
    pairs = tokens * top_k
    sorted_ids, expert_ids, post_pad = align_blocks(env.mk.moe_align, ids, experts,
                                                    cfg["BLOCK_SIZE_M"])
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
    from backends.aiter.mla_kernels import DECODE_CONFIG, contiguous_decode_rows, decode_splits

    rows = bs * width
    lens, indptr, indices = contiguous_decode_rows(bs, width, kv)
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
