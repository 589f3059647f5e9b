"""MLA (DeepSeek multi-head latent attention) from AITER's Triton kernels.

Per layer and forward (SGLang's ``DeepseekV2AttentionMLA`` order on ROCm):

* the q projection (``q_proj``, or ``q_a`` + RMSNorm + ``q_b`` with a q LoRA) and
  ``kv_a_proj_with_mqa`` (latent ``c`` of ``kv_lora_rank`` and the shared rope key ``k_pe``),
  RMSNorm of ``c`` -- GEMMs through ``torch`` (cuBLAS), as the dense model's;
* **verify, draft decode** (absorbed): ``q_nope @ W_UK`` per head (``torch.bmm``), then
  ``aiter.ops.triton.fused_kv_cache.fused_qk_rope_cat_and_cache_mla`` (rotary of ``q_pe`` and
  ``k_pe``, ``[q_lat, q_pe]``, and the write of ``[c, k_pe]`` into the latent cache), then
  ``aiter.ops.triton.mla_decode_rope.decode_attention_fwd_grouped_rope`` over the latent cache,
  ``@ W_UV`` per head, the o projection;
* **prefill** (not absorbed, as SGLang's AITER backend does for extend batches): the same fused
  rope + cache write, ``kv_b`` over the latents of every key (the prefix's are gathered from the
  cache), and AITER's varlen flash attention (``aiter.ops.triton.mha``'s forward kernel) with q/k
  of 192 and v of 128.

AITER's Triton MLA decode takes one query row per sequence (``kv_indptr`` rows).  A verify of
width ``w`` is therefore launched as ``bs * w`` rows, row ``j`` of a request attending to its
cached tokens plus drafts ``0..j`` -- exactly the causal extent the math requires.  The row
metadata (each row's extent, ``kv_indptr`` and the token-level ``kv_indices``) is expanded on the
GPU from the launch's per-request metadata by two Triton kernels of ours, once per forward and
shared by every layer (docs/aiter.md says how this differs from SGLang's ROCm kernel).
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import Any

from backends.aiter import metadata as md
from traces.errors import SpecschedError

__all__ = ["MLA_WIDTHS", "mla_kernel_width", "mla_geometry", "MLAKernels", "load_mla_kernels",
           "LatentPool", "plan_latent_pool", "decode_splits", "RowMetadata", "row_metadata",
           "ExtendPlan", "MLAAttention", "DECODE_CONFIG", "FLASH_CONFIG"]

#: verify widths a request may have on the MLA path (AITER's MLA decode kernels: 1, 2, 4; 3 as 4)
MLA_WIDTHS = tuple(sorted(md.MLA_KERNEL_Q_LEN))

#: AITER's MI300X defaults for the two MLA decode stages (``configs/MI300X-MLA_DECODE_ROPE-
#: DEFAULT.json``), without the AMD-only launch keys; AITER ships no table for NVIDIA GPUs.
DECODE_CONFIG = {"fwd_grouped_kernel_stage1_rope": {"BLOCK_N": 32, "BLOCK_H": 16, "num_stages": 1},
                 "fwd_kernel_stage2": {"num_stages": 2}}

#: The prefill attention's tile: AITER's MI300X "default" MHA entry (128 x 64, 4 warps), not its
#: 256-row "pe" entry, which is tuned for MI300X's register file; not tuned for the H200.
FLASH_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 64, "PRELOAD_V": False, "num_warps": 4, "num_ctas": 1,
                "num_stages": 1}


def mla_kernel_width(width: int) -> int:
    """Query rows per request an MLA verify of ``width`` runs (and is timed) with: 1, 2, 4 (3 runs
    as 4).  Other widths are refused as SGLang's AITER MLA path refuses them."""
    q = md.MLA_KERNEL_Q_LEN.get(int(width))
    if q is None:
        raise SpecschedError(
            f"MLA verify width {width}: AITER MLA decode kernels take 1, 2 or 4 query rows per "
            f"request (3 runs as 4); num_draft_tokens={width} runs only on gfx950 with an fp8 KV "
            f"cache (SGLang aiter_backend.py: mla_decode_fwd; AITER asm_mla.cu)")
    return q


def mla_geometry(shape: Any) -> dict[str, int]:
    """One rank's MLA (+ MoE) geometry from a ``ModelShape``.  MoE needs tp 1: expert
    parallelism is not modelled here."""
    tp = int(getattr(shape, "tp", 1))
    if getattr(shape, "experts", 0) and tp != 1:
        raise SpecschedError(
            f"model {shape.name!r} at tp {tp}: the live executor runs MoE layers on one GPU only "
            f"(tp 1); expert parallelism and its all-to-all are not implemented")
    if getattr(shape, "attention", "mha") != "mla":
        raise SpecschedError(f"model {shape.name!r} is not MLA: the MLA runner needs MLA attention "
                             f"(a MoE model with MHA/GQA attention is not supported live)")
    heads = int(shape.heads) // tp
    if md.mla_heads(heads)[0] is None:
        raise SpecschedError(f"model {shape.name!r}: {heads} query heads per GPU: "
                             f"{md.mla_heads(heads)[1]}")
    return {
        "layers": int(shape.layers), "hidden": int(shape.hidden), "heads": heads,
        "q_lora_rank": int(shape.q_lora_rank), "kv_lora_rank": int(shape.kv_lora_rank),
        "qk_nope": int(shape.qk_nope_head_dim), "qk_rope": int(shape.qk_rope_head_dim),
        "v_head": int(shape.v_head_dim), "vocab": -(-int(shape.vocab) // tp), "tp": tp,
        "intermediate": int(shape.intermediate) // tp, "experts": int(shape.experts),
        "experts_per_token": int(shape.experts_per_token),
        "shared_intermediate": int(shape.shared_experts) * int(shape.moe_intermediate),
        "moe_intermediate": int(shape.moe_intermediate),
        "dense_layers": int(shape.dense_layers) if shape.experts else int(shape.layers),
        "fusion_in": int(getattr(shape, "fusion_in", 0) or 0),
        # what the dense runner's shared code reads: one latent "KV head" of kv_lora + rope
        "kv_heads": 1, "head_dim": int(shape.kv_lora_rank) + int(shape.qk_rope_head_dim),
        "attn_in": int(shape.hidden),
    }


@dataclass(frozen=True)
class MLAKernels:
    """AITER's Triton kernels for MLA and MoE layers (loaded through the bridge)."""

    rope_cat_cache: Any
    mla_decode: Any
    flash_varlen: Any
    fused_moe: Any
    moe_align: Any
    topk: Any
    modules: dict


def _import(module: str):
    """Import an ``aiter.ops.triton`` module.  Under the Triton interpreter there is no GPU driver,
    and importing ``aiter.ops.triton.mha`` asks the active driver for its architecture (its
    ``flash_attn_triton_amd`` package picks launch configurations at import time); a stand-in that
    answers ``"interpreter"`` (no AMD architecture) is active for that import only."""
    from backends.aiter import bridge

    if bridge.runtime() != "interpreter":
        return importlib.import_module(module)
    cfg = importlib.import_module("triton.runtime.driver").driver
    if cfg._active is not None:
        return importlib.import_module(module)

    class _Target:
        backend = "interpreter"
        arch = "interpreter"
        warp_size = 32

    class _Driver:
        def get_current_target(self):
            return _Target()

    cfg._active = _Driver()
    try:
        return importlib.import_module(module)
    finally:
        cfg._active = None


def load_mla_kernels() -> MLAKernels:
    """Import the MLA/MoE kernels (after :func:`backends.aiter.bridge.load_kernels`)."""
    from backends.aiter import bridge

    bridge.load_kernels()
    imp = _import
    mods = {
        "mla_rope_kv_write": "aiter.ops.triton.fused_kv_cache.fused_qk_rope_cat_and_cache_mla",
        "mla_decode": "aiter.ops.triton.mla_decode_rope.decode_attention_fwd_grouped_rope",
        "mla_prefill_attention": "aiter.ops.triton._triton_kernels.mha._attn_fwd",
        "moe_gemm": "aiter.ops.triton.moe_op.fused_moe",
        "moe_align": "aiter.ops.triton.moe_align_block_size.moe_align_block_size_triton",
        "moe_topk": "aiter.ops.triton.topk.topk",
    }
    fns = {}
    for key, path in mods.items():
        mod, name = path.rsplit(".", 1)
        try:
            fns[key] = getattr(imp(mod), name)
        except Exception as exc:  # noqa: BLE001 - name the kernel that is missing
            raise SpecschedError(f"the installed amd-aiter lacks {path} ({type(exc).__name__}: "
                                 f"{exc}); the MLA/MoE executor needs it") from None
    mods["mla_prefill_attention"] += (" (the forward kernel of aiter.ops.triton.mha."
                                      "flash_attn_varlen_func, launched as that wrapper does)")
    mods["mla_attention_decode"] = mods.pop("mla_decode") + " (verify: bs x width decode rows)"
    attn_fwd = fns["mla_prefill_attention"]

    def flash_varlen(q, k, v, cu_q, cu_k, max_q, max_k, *, softmax_scale, causal=True,
                     config=None):
        return _flash_varlen(attn_fwd, q, k, v, cu_q, cu_k, max_q, max_k, softmax_scale, causal,
                             dict(config or FLASH_CONFIG))

    return MLAKernels(rope_cat_cache=fns["mla_rope_kv_write"], mla_decode=fns["mla_decode"],
                      flash_varlen=flash_varlen, fused_moe=fns["moe_gemm"],
                      moe_align=fns["moe_align"], topk=fns["moe_topk"], modules=dict(mods))


def _flash_varlen(attn_fwd, q, k, v, cu_q, cu_k, max_q: int, max_k: int, scale: float,
                  causal: bool, config: dict):
    """AITER's varlen flash-attention forward (``_attn_fwd``) with the arguments
    ``aiter.ops.triton.mha.flash_attn_varlen_func`` gives it: thd layout, no dropout, no ALiBi,
    no FP8, int64 strides; q/k carry ``v`` dims plus a rope part (MLA's 128 + 64).

    The wrapper module itself is not imported: it pulls in AITER's backward kernels and the
    ``flash_attn_triton_amd`` package, whose import fails with the Triton 3.9 of the CPU tests."""
    import torch
    import triton

    from aiter.ops.triton.utils.device_info import get_num_xcds

    o = torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype, device=q.device)
    batch, hq, hk = len(cu_q) - 1, q.shape[1], k.shape[1]
    vd = v.shape[-1]
    pe = q.shape[-1] - vd
    lse = torch.zeros((q.shape[0], hq), device=q.device, dtype=torch.float32)

    def s4(t):
        return (0, t.stride(1), t.stride(0), t.stride(2))

    grid = (batch * hq * triton.cdiv(int(max_q), config["BLOCK_M"]),)
    attn_fwd[grid](q, k, v, None, None, None, o, None, None, None, lse,
                   *s4(q), *s4(k), *s4(v), 0, 0, 0, *s4(o), 0, 0, 0, 0, 0, 0,
                   0, lse.stride(1), lse.stride(0), scale, cu_q, cu_k, 0.0, 0, 0,
                   SEQLEN_Q=int(max_q), SEQLEN_K=int(max_k), IS_CAUSAL=bool(causal),
                   NUM_Q_HEADS=hq, NUM_K_HEADS=hk, BLOCK_DMODEL=vd,
                   BLOCK_DMODEL_POW2=max(triton.next_power_of_2(vd), 16), BLOCK_DMODEL_PE=pe,
                   RETURN_SCORES=False, ENABLE_DROPOUT=False, IS_FP8=False,
                   FP8_MAX=float(torch.finfo(q.dtype).max), VARLEN=True, BATCH=batch,
                   NUM_XCD=get_num_xcds(), USE_INT64_STRIDES=True, **config)
    return o


# ---- the latent KV cache ----------------------------------------------------------------------
@dataclass(frozen=True)
class LatentPlan:
    """Pages of the one latent cache tensor and the per-layer views (as ``kvpool.PoolPlan``)."""

    pages: int
    view_pages: int
    shift: int
    views: int
    page_bytes: int

    @property
    def bytes(self) -> int:
        return self.pages * self.page_bytes


def plan_latent_pool(budget_bytes: int, *, views: int, page_size: int, dim: int, dtype_bytes: int,
                     max_blocks: int, want_view_pages: int) -> LatentPlan:
    """Pool and view sizes for a byte budget: views ``shift`` pages apart, as the dense pool."""
    page_bytes = page_size * dim * dtype_bytes
    pages = max(int(budget_bytes // page_bytes), 2 * max_blocks)
    view_pages = min(max(int(want_view_pages), 2 * max_blocks), pages)
    views = max(1, int(views))
    shift = (pages - view_pages) // (views - 1) if views > 1 else 0
    return LatentPlan(pages=pages, view_pages=view_pages, shift=shift, views=views,
                      page_bytes=page_bytes)


class LatentPool:
    """One tensor of latent rows ``[pages * page, 1, kv_lora + rope]`` (random values) and a
    token-level view per layer; a request's token ``n`` lives at row
    ``block_table[n // page] * page + n % page`` of its layer's view."""

    def __init__(self, plan: LatentPlan, *, page_size: int, dim: int, max_blocks: int, device: Any,
                 dtype: Any, generator: Any = None) -> None:
        import torch

        self.plan = plan
        self.page_size = int(page_size)
        self.max_blocks = int(max_blocks)
        self.cache = torch.empty((plan.pages * page_size, 1, dim), device=device, dtype=dtype)
        self.cache.normal_(0.0, 1.0, generator=generator)
        p = self.page_size
        self._views = [self.cache[o * p:(o + plan.view_pages) * p]
                       for o in (i * plan.shift for i in range(plan.views))]

    def view(self, layer: int):
        """Layer ``layer``'s latent rows ``[view_pages * page, 1, dim]``."""
        return self._views[layer % len(self._views)]

    @property
    def span(self) -> int:
        return self.plan.view_pages - self.max_blocks + 1


def decode_splits(rows: int, sms: int = 132) -> int:
    """KV splits of the MLA decode launch for ``rows`` query rows: enough programs to cover the
    GPU twice (one head block per row at 16 heads), between 2 and 16.  A graph freezes it."""
    return int(min(16, max(2, -(-2 * sms // max(1, rows)))))


# ---- row metadata (GPU) ----------------------------------------------------------------------
_row_kernels = None


def _get_row_kernels():
    global _row_kernels
    if _row_kernels is None:
        import triton
        import triton.language as tl

        @triton.jit
        def _rows(qo_ptr, sk_ptr, ext_ptr, req_ptr, rows, BLOCK: tl.constexpr):
            # sequence i's query rows t in [qo[i], qo[i+1]) see sk[i] - (qo[i+1] - t) + 1 keys
            i = tl.program_id(0)
            q0 = tl.load(qo_ptr + i)
            q1 = tl.load(qo_ptr + i + 1)
            s = tl.load(sk_ptr + i)
            for c in range(q0, q1, BLOCK):
                t = c + tl.arange(0, BLOCK)
                m = (t < q1) & (t < rows)
                tl.store(ext_ptr + t, s - (q1 - t) + 1, mask=m)
                tl.store(req_ptr + t, i + 0 * t, mask=m)

        @triton.jit
        def _indices(indptr_ptr, ext_ptr, req_ptr, bt_ptr, out_ptr, max_blocks,
                     PAGE: tl.constexpr, BLOCK: tl.constexpr, CHUNKS: tl.constexpr):
            # row t's keys n < ext[t] are token rows bt[req, n // PAGE] * PAGE + n % PAGE
            t = tl.program_id(0)
            c = tl.program_id(1)
            start = tl.load(indptr_ptr + t)
            e = tl.load(ext_ptr + t)
            base = bt_ptr + tl.load(req_ptr + t).to(tl.int64) * max_blocks
            for n0 in range(c * BLOCK, e, CHUNKS * BLOCK):
                n = n0 + tl.arange(0, BLOCK)
                m = n < e
                page = tl.load(base + n // PAGE, mask=m, other=0)
                tl.store(out_ptr + start + n, page * PAGE + n % PAGE, mask=m)

        _row_kernels = (_rows, _indices)
    return _row_kernels


@dataclass
class RowMetadata:
    """One forward's decode-row metadata: ``kv_indptr`` ``[rows+1]``, the token-level
    ``kv_indices`` (a view of the shared buffer), ``splits`` and the stage-1 scratch."""

    kv_indptr: Any
    kv_indices: Any
    ext: Any
    req: Any
    splits: int
    logits: Any


def row_metadata(cu_seqlens_q, seqused_k, block_table, *, rows: int, heads: int, lora: int,
                 page_size: int, index_buf, sms: int = 132) -> RowMetadata:
    """Expand per-sequence metadata (``cu_seqlens_q``, ``seqused_k``, page table) into one decode
    row per query row: row ``t`` of sequence ``i`` sees ``seqused_k[i] - (cu[i+1] - t) + 1`` keys.
    Writes ``index_buf``'s prefix (it must hold the launch's keys: the caller checks)."""
    import torch

    rows_k, idx_k = _get_row_kernels()
    dev = block_table.device
    ext = torch.ones(rows, dtype=torch.int32, device=dev)
    req = torch.zeros(rows, dtype=torch.int32, device=dev)
    nseq = block_table.shape[0]
    rows_k[(nseq,)](cu_seqlens_q, seqused_k, ext, req, rows, BLOCK=16)
    indptr = torch.zeros(rows + 1, dtype=torch.int32, device=dev)
    torch.cumsum(ext, 0, dtype=torch.int32, out=indptr[1:])
    chunks = 8
    idx_k[(rows, chunks)](indptr, ext, req, block_table, index_buf, block_table.shape[1],
                          PAGE=page_size, BLOCK=1024, CHUNKS=chunks)
    splits = decode_splits(rows, sms)
    logits = torch.empty((rows, heads, splits, lora + 1), dtype=torch.float32, device=dev)
    return RowMetadata(kv_indptr=indptr, kv_indices=index_buf, ext=ext, req=req, splits=splits,
                       logits=logits)


def row_index_count(kv_lens, widths) -> int:
    """Keys the decode rows of a launch read (``kv_indices`` entries): ``sum_i w_i * kv_i +
    w_i (w_i + 1) / 2`` (row ``j`` of request ``i`` sees ``kv_i + j + 1`` keys)."""
    import numpy as np

    kv = np.asarray(kv_lens, dtype=np.int64)
    w = np.asarray(widths, dtype=np.int64)
    return int(np.sum(w * kv + w * (w + 1) // 2))


@dataclass
class ExtendPlan:
    """Host-prepared metadata of one prefill (built before the timed region: no host sync inside).

    ``cu_q``/``cu_k``: int32 ``[bs+1]`` query and key offsets (keys = prefix + new tokens);
    ``key_req``/``key_pos``: each key's request and position (to gather prefix latents);
    ``prefix``: whether any request has a cached prefix (else no gather, as SGLang).
    """

    cu_q: Any
    cu_k: Any
    key_req: Any
    key_pos: Any
    max_q: int
    max_k: int
    total_k: int
    prefix: bool

    @staticmethod
    def build(tokens, prefix, device) -> "ExtendPlan":
        import numpy as np
        import torch

        t = np.asarray(tokens, dtype=np.int64)
        p = np.asarray(prefix, dtype=np.int64)
        k = t + p
        cu_q = np.concatenate([[0], np.cumsum(t)])
        cu_k = np.concatenate([[0], np.cumsum(k)])
        req = np.repeat(np.arange(len(k)), k)
        pos = np.arange(int(k.sum())) - cu_k[:-1][req]

        def dev(a, dt):
            return torch.as_tensor(np.ascontiguousarray(a), dtype=dt).to(device)

        return ExtendPlan(cu_q=dev(cu_q, torch.int32), cu_k=dev(cu_k, torch.int32),
                          key_req=dev(req, torch.int64), key_pos=dev(pos, torch.int64),
                          max_q=int(t.max()), max_k=int(k.max()), total_k=int(k.sum()),
                          prefix=bool(np.any(p > 0)))


class MLAAttention:
    """One layer's MLA weights and its two attention paths (see the module docstring).

    Weights are random, scaled ``1/sqrt(fan_in)``; ``w_kc`` ``[H, nope, lora]`` and ``w_vc``
    ``[H, lora, v]`` are ``kv_b``'s halves laid out for the absorbed path, as SGLang keeps them.
    """

    def __init__(self, g: dict, *, kernels: MLAKernels, cache: Any, device: Any, dtype: Any,
                 w, ones, eps: float) -> None:
        import torch

        self.g = g
        self.k = kernels
        self.cache = cache
        self.eps = eps
        h, H = g["hidden"], g["heads"]
        nope, rope, v, lora = g["qk_nope"], g["qk_rope"], g["v_head"], g["kv_lora_rank"]
        qk = nope + rope
        if g["q_lora_rank"]:
            self.q_a = w(g["q_lora_rank"], h)
            self.q_a_norm = ones(g["q_lora_rank"])
            self.q_b = w(H * qk, g["q_lora_rank"])
            self.q = None
        else:
            self.q = w(H * qk, h)
        self.kv_a = w(lora + rope, h)
        self.kv_a_norm = ones(lora)
        self.kv_b = w(H * (nope + v), lora)
        kvb = self.kv_b.view(H, nope + v, lora)
        self.w_kc = kvb[:, :nope, :].contiguous()                   # [H, nope, lora]
        self.w_vc = kvb[:, nope:, :].transpose(1, 2).contiguous()   # [H, lora, v]
        self.o = w(h, H * v)
        self.scale = 1.0 / math.sqrt(qk)
        self.k_scale = torch.ones(1, dtype=torch.float32, device=device)

    def _q_latent(self, x, norm):
        """``q`` ``[rows, H, nope+rope]``, ``c`` (normed latent) and ``k_pe`` of the new rows."""
        import torch.nn.functional as F

        g = self.g
        rows = x.shape[0]
        if self.q is not None:
            q = F.linear(x, self.q)
        else:
            q = F.linear(norm(F.linear(x, self.q_a), self.q_a_norm), self.q_b)
        q = q.view(rows, g["heads"], g["qk_nope"] + g["qk_rope"])
        lat = F.linear(x, self.kv_a)
        c = norm(lat[:, :g["kv_lora_rank"]], self.kv_a_norm)
        k_pe = lat[:, g["kv_lora_rank"]:]
        return q, c, k_pe

    def decode(self, x, a, rm: RowMetadata, rope, norm):
        """Absorbed attention for verify/draft rows (``a``: the launch's ``AttnInputs``)."""
        import torch
        import torch.nn.functional as F

        g = self.g
        rows, H = x.shape[0], g["heads"]
        nope, lora = g["qk_nope"], g["kv_lora_rank"]
        q, c, k_pe = self._q_latent(x, norm)
        q_lat = torch.bmm(q[..., :nope].transpose(0, 1), self.w_kc).transpose(0, 1)
        q_full = torch.empty((rows, H, lora + g["qk_rope"]), device=x.device, dtype=x.dtype)
        self.k.rope_cat_cache(q_lat, q[..., nope:], c.view(rows, 1, lora),
                              k_pe.reshape(rows, 1, g["qk_rope"]), self.cache, a.slots, a.positions,
                              rope.cos, rope.sin, self.k_scale, False, q_out=q_full)
        o_lat = torch.empty((rows, H, lora), device=x.device, dtype=x.dtype)
        cfg = {kk: dict(vv) for kk, vv in DECODE_CONFIG.items()}  # the wrapper writes into it
        self.k.mla_decode(q_full, self.cache, self.cache[..., :lora], o_lat, rm.kv_indptr,
                          rm.kv_indices, None, lora, g["qk_rope"], None, None, rm.logits, rm.splits,
                          self.scale, 0.0, False, False, cfg)
        out = torch.bmm(o_lat.transpose(0, 1), self.w_vc)          # [H, rows, v]
        return F.linear(out.transpose(0, 1).reshape(rows, H * g["v_head"]), self.o)

    def extend(self, x, a, plan: ExtendPlan, rope, norm, block_table, page_size: int):
        """Prefill attention, not absorbed: ``kv_b`` over every key's latent, then AITER's
        varlen flash attention (q/k ``nope + rope``, v ``v_head``), causal, bottom-right."""
        import torch
        import torch.nn.functional as F

        g = self.g
        rows, H = x.shape[0], g["heads"]
        nope, rope_d, lora, vd = g["qk_nope"], g["qk_rope"], g["kv_lora_rank"], g["v_head"]
        q, c, k_pe = self._q_latent(x, norm)
        q_full = torch.empty((rows, H, nope + rope_d), device=x.device, dtype=x.dtype)
        k_pe_out = torch.empty((rows, 1, rope_d), device=x.device, dtype=x.dtype)
        self.k.rope_cat_cache(q[..., :nope], q[..., nope:], c.view(rows, 1, lora),
                              k_pe.reshape(rows, 1, rope_d), self.cache, a.slots, a.positions,
                              rope.cos, rope.sin, self.k_scale, False, q_out=q_full,
                              k_pe_out=k_pe_out)
        if plan.prefix:
            slots = (block_table[plan.key_req, plan.key_pos // page_size].to(torch.int64)
                     * page_size + plan.key_pos % page_size)
            lat = self.cache.index_select(0, slots).view(plan.total_k, lora + rope_d)
            c_all, kpe_all = lat[:, :lora], lat[:, lora:].view(plan.total_k, 1, rope_d)
            cu_k, max_k, nk = plan.cu_k, plan.max_k, plan.total_k
        else:
            c_all, kpe_all = c, k_pe_out
            cu_k, max_k, nk = plan.cu_q, plan.max_q, rows
        kv = F.linear(c_all, self.kv_b).view(nk, H, nope + vd)
        k = torch.cat([kv[..., :nope], kpe_all.expand(nk, H, rope_d)], dim=-1)
        v = kv[..., nope:]
        o = self.k.flash_varlen(q_full, k, v, plan.cu_q, cu_k, plan.max_q, max_k,
                                softmax_scale=self.scale, causal=True)
        return F.linear(o.reshape(rows, H * vd), self.o)
