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
GPU from the launch's per-request metadata by two Triton kernels of ours
(:mod:`backends.aiter.mla_kernels`), once per forward and shared by every layer
(docs/aiter_mla.md says how this differs from SGLang's ROCm kernel).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from backends.aiter import metadata as md
from backends.aiter.fp8 import linear
from backends.aiter.mla_kernels import (DECODE_CONFIG, FLASH_CONFIG, MLAKernels, RowMetadata,
                                        decode_splits, load_mla_kernels, row_index_count,
                                        row_metadata)
from traces.errors import SpecschedError

__all__ = ["MLA_WIDTHS", "mla_kernel_width", "mla_geometry", "MLAKernels", "load_mla_kernels",
           "LatentPool", "plan_latent_pool", "decode_splits", "RowMetadata", "row_metadata",
           "row_index_count", "ExtendPlan", "MLAAttention", "DECODE_CONFIG", "FLASH_CONFIG"]

#: verify widths a request may have on the MLA path (AITER's MLA decode kernels: 1, 2, 4; 3 as 4)
MLA_WIDTHS = tuple(sorted(md.MLA_KERNEL_Q_LEN))


def mla_kernel_width(width: int, what: str = "verify") -> int:
    """Query rows per request an MLA verify (or draft-extend: ``what``) of ``width`` runs (and is
    timed) with: 1, 2, 4 (3 runs as 4).  Other widths are refused as SGLang's AITER MLA path
    refuses them."""
    q = md.MLA_KERNEL_Q_LEN.get(int(width))
    if q is None:
        raise SpecschedError(
            f"MLA {what} width {width}: AITER MLA decode kernels take 1, 2 or 4 query rows per "
            f"request (3 runs as 4); num_draft_tokens={width} runs only on gfx950 with an fp8 KV "
            f"cache (SGLang aiter_backend.py: mla_decode_fwd; AITER asm_mla.cu)")
    return q


def mla_geometry(shape: Any) -> dict[str, int]:
    """One rank's MLA (+ MoE) geometry from a ``ModelShape``.

    At ``tp > 1`` a MoE model runs as rank 0 of tp = ep: attention heads, the dense MLP, the
    shared expert and the vocabulary split by tp; the routed experts by ep (``experts / ep``
    whole experts on this GPU).  ``dtype_bytes == 1`` (an FP8 checkpoint) runs the linear layers
    as FP8 block-scaled GEMMs (:mod:`backends.aiter.fp8`), which need every such GEMM's input
    width divisible by 128.
    """
    tp = int(getattr(shape, "tp", 1))
    experts = int(getattr(shape, "experts", 0))
    if experts and experts % tp:
        raise SpecschedError(
            f"model {shape.name!r} at tp {tp}: {experts} routed experts do not split over ep {tp}")
    if getattr(shape, "attention", "mha") != "mla":
        raise SpecschedError(f"model {shape.name!r} is not MLA: the MLA runner needs MLA attention "
                             f"(a MoE model with MHA/GQA attention is not supported live)")
    heads = int(shape.heads) // tp
    if md.mla_heads(heads)[0] is None:
        raise SpecschedError(f"model {shape.name!r}: {heads} query heads per GPU: "
                             f"{md.mla_heads(heads)[1]}")
    fp8 = int(getattr(shape, "dtype_bytes", 2)) == 1
    if fp8:
        from backends.aiter.fp8 import BLOCK

        widths = {"hidden": int(shape.hidden), "q_lora_rank": int(shape.q_lora_rank),
                  "heads x v_head_dim": heads * int(shape.v_head_dim)}
        if not shape.q_lora_rank:
            widths.pop("q_lora_rank")
        if experts:
            widths["moe_intermediate"] = int(shape.moe_intermediate)
            widths["shared expert width / tp"] = (int(shape.shared_experts)
                                                   * int(shape.moe_intermediate) // tp)
        if shape.dense_layers or not experts:
            widths["intermediate / tp"] = int(shape.intermediate) // tp
        bad = {k: v for k, v in widths.items() if v % BLOCK}
        if bad:
            raise SpecschedError(f"model {shape.name!r}: FP8 block-scaled GEMMs need input widths "
                                 f"divisible by {BLOCK}; not {bad}")
    return {
        "fp8": fp8, "ep": tp if experts else 1,
        "experts_local": experts // tp if experts else 0,
        "layers": int(shape.layers), "hidden": int(shape.hidden), "heads": heads,
        "q_lora_rank": int(shape.q_lora_rank), "kv_lora_rank": int(shape.kv_lora_rank),
        "qk_nope": int(shape.qk_nope_head_dim), "qk_rope": int(shape.qk_rope_head_dim),
        "v_head": int(shape.v_head_dim), "vocab": -(-int(shape.vocab) // tp), "tp": tp,
        "intermediate": int(shape.intermediate) // tp, "experts": int(shape.experts),
        "experts_per_token": int(shape.experts_per_token),
        "shared_intermediate": int(shape.shared_experts) * int(shape.moe_intermediate) // tp,
        "moe_intermediate": int(shape.moe_intermediate),
        "dense_layers": int(shape.dense_layers) if shape.experts else int(shape.layers),
        "fusion_in": int(getattr(shape, "fusion_in", 0) or 0),
        # the draft of an MLA/MoE target: DeepSeek's MTP/NextN layer (eh_proj over 2*hidden)
        "role": "mtp" if getattr(shape, "fusion_in", 0) else "target",
        # what the dense runner's shared code reads: one latent "KV head" of kv_lora + rope
        "kv_heads": 1, "head_dim": int(shape.kv_lora_rank) + int(shape.qk_rope_head_dim),
        "attn_in": int(shape.hidden),
    }


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


#: the most values one layer's latent view may hold (32-bit offsets in AITER's MLA decode)
MAX_VIEW_ELEMENTS = 2**31 - 1


def plan_latent_pool(budget_bytes: int, *, views: int, page_size: int, dim: int, dtype_bytes: int,
                     max_blocks: int, want_view_pages: int) -> LatentPlan:
    """Pool and view sizes for a byte budget: views ``shift`` pages apart, as the dense pool.

    A view holds at most ``MAX_VIEW_ELEMENTS`` values: AITER's MLA decode kernel computes a
    key's offset as a 32-bit ``index * row stride`` from its view's start, which wraps past
    2**31 (an illegal address on the H200: 128 rows x 32,768 keys x 576 values did it)."""
    page_bytes = page_size * dim * dtype_bytes
    pages = max(int(budget_bytes // page_bytes), 2 * max_blocks)
    view_pages = min(max(int(want_view_pages), 2 * max_blocks), pages,
                     MAX_VIEW_ELEMENTS // (page_size * dim))
    if view_pages < 2 * max_blocks:
        raise SpecschedError(f"one layer's latent view needs {2 * max_blocks} pages of "
                             f"{page_size} x {dim} values, past the {MAX_VIEW_ELEMENTS} that "
                             "AITER's MLA decode kernel can address: lower --max-context")
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
                 w, ones, eps: float, lin=None) -> None:
        import torch

        lw = lin or w   # the projections an FP8 checkpoint stores in FP8 (kv_b stays bf16)
        self.g = g
        self.k = kernels
        self.cache = cache
        self.eps = eps
        h, H = g["hidden"], g["heads"]
        nope, rope, v, lora = g["qk_nope"], g["qk_rope"], g["v_head"], g["kv_lora_rank"]
        qk = nope + rope
        if g["q_lora_rank"]:
            self.q_a = lw(g["q_lora_rank"], h)
            self.q_a_norm = ones(g["q_lora_rank"])
            self.q_b = lw(H * qk, g["q_lora_rank"])
            self.q = None
        else:
            self.q = lw(H * qk, h)
        self.kv_a = lw(lora + rope, h)
        self.kv_a_norm = ones(lora)
        self.kv_b = w(H * (nope + v), lora)
        kvb = self.kv_b.view(H, nope + v, lora)
        self.w_kc = kvb[:, :nope, :].contiguous()                   # [H, nope, lora]
        self.w_vc = kvb[:, nope:, :].transpose(1, 2).contiguous()   # [H, lora, v]
        self.o = lw(h, H * v)
        self.scale = 1.0 / math.sqrt(qk)
        self.k_scale = torch.ones(1, dtype=torch.float32, device=device)

    def _q_latent(self, x, norm):
        """``q`` ``[rows, H, nope+rope]``, ``c`` (normed latent) and ``k_pe`` of the new rows."""
        g = self.g
        rows = x.shape[0]
        if self.q is not None:
            q = linear(x, self.q)
        else:
            q = linear(norm(linear(x, self.q_a), self.q_a_norm), self.q_b)
        q = q.view(rows, g["heads"], g["qk_nope"] + g["qk_rope"])
        lat = linear(x, self.kv_a)
        c = norm(lat[:, :g["kv_lora_rank"]], self.kv_a_norm)
        k_pe = lat[:, g["kv_lora_rank"]:]
        return q, c, k_pe

    def decode(self, x, a, rm: RowMetadata, rope, norm):
        """Absorbed attention for verify/draft rows (``a``: the launch's ``AttnInputs``)."""
        import torch

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
        return linear(out.transpose(0, 1).reshape(rows, H * g["v_head"]), self.o)

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
        return linear(o.reshape(rows, H * vd), self.o)
