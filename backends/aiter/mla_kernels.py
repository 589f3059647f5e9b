"""AITER's Triton kernels for the MLA and MoE layers, and the decode-row metadata kernels.

* :func:`load_mla_kernels` imports, through the bridge: the fused rope + latent-cache write
  (``fused_qk_rope_cat_and_cache_mla``), the MLA decode (``decode_attention_fwd_grouped_rope``),
  the forward kernel of AITER's varlen flash attention (launched by :func:`_flash_varlen` as
  ``aiter.ops.triton.mha.flash_attn_varlen_func`` launches it), the fused MoE GEMM, its block
  alignment and the top-k.
* :func:`row_metadata` expands one launch's per-sequence metadata into one decode row per query
  row (two Triton kernels of ours): row ``t`` of sequence ``i`` attends to
  ``seqused_k[i] - (cu_seqlens_q[i+1] - t) + 1`` keys -- its causal extent.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from traces.errors import SpecschedError

__all__ = ["DECODE_CONFIG", "FLASH_CONFIG", "MLAKernels", "load_mla_kernels", "decode_splits",
           "decode_programs", "flash_programs",
           "RowMetadata", "row_metadata", "row_index_count"]

#: AITER's MI300X defaults for the two MLA decode stages (``configs/MI300X-MLA_DECODE_ROPE-
#: DEFAULT.json``), without the AMD-only launch keys; AITER ships no table for NVIDIA GPUs.
DECODE_CONFIG = {"fwd_grouped_kernel_stage1_rope": {"BLOCK_N": 32, "BLOCK_H": 16, "num_stages": 1},
                 "fwd_kernel_stage2": {"num_stages": 2}}

#: The prefill attention's tile: AITER's MI300X "default" MHA entry (128 x 64, 4 warps), not its
#: 256-row "pe" entry, which is tuned for MI300X's register file; not tuned for the H200.
FLASH_CONFIG = {"BLOCK_M": 128, "BLOCK_N": 64, "PRELOAD_V": False, "num_warps": 4, "num_ctas": 1,
                "num_stages": 1}


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



def decode_splits(rows: int, sms: int = 132) -> int:
    """KV splits of the MLA decode launch for ``rows`` query rows: enough programs to cover the
    GPU twice (one head block per row at 16 heads), between 2 and 16.  A graph freezes it."""
    return int(min(16, max(2, -(-2 * sms // max(1, rows)))))


def decode_programs(rows: int, heads: int, sms: int = 132) -> int:
    """Programs of the MLA decode's stage-1 launch over ``rows`` query rows of ``heads`` heads:
    head groups x rows x KV splits, a head group being ``min(BLOCK_H, heads)`` heads (the latent
    cache has one head, so AITER's ``kv_group_num`` is ``heads``); 16 heads: one group."""
    block_h = DECODE_CONFIG["fwd_grouped_kernel_stage1_rope"]["BLOCK_H"]
    groups = -(-int(heads) // min(block_h, int(heads)))
    return int(groups * int(rows) * decode_splits(rows, sms))


def flash_programs(requests: int, heads: int, max_q: int) -> int:
    """Programs of the prefill's flash launch (:func:`_flash_varlen`'s grid): requests x heads x
    ``ceil(max_q / BLOCK_M)``."""
    return int(requests) * int(heads) * -(-int(max_q) // FLASH_CONFIG["BLOCK_M"])


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


def contiguous_decode_rows(bs: int, width: int, kv: int):
    """Host-side decode rows of ``bs`` requests at ``width`` over one contiguous latent cache
    (request ``r`` owns tokens ``[r (kv + width), (r + 1)(kv + width))``; row ``j`` of a request
    sees its ``kv + j + 1`` first tokens): ``(lens, kv_indptr, kv_indices)`` as int64 arrays,
    what :func:`row_metadata` builds on the GPU from a page table (for benchmarks)."""
    import numpy as np

    lens = np.array([kv + j + 1 for _ in range(bs) for j in range(width)], dtype=np.int64)
    starts = np.repeat(np.arange(bs) * (kv + width), width)
    indptr = np.concatenate([[0], np.cumsum(lens)])
    indices = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lens)])
    return lens, indptr, indices


def row_index_count(kv_lens, widths) -> int:
    """Keys the decode rows of a launch read (``kv_indices`` entries): ``sum_i w_i * kv_i +
    w_i (w_i + 1) / 2`` (row ``j`` of request ``i`` sees ``kv_i + j + 1`` keys)."""
    import numpy as np

    kv = np.asarray(kv_lens, dtype=np.int64)
    w = np.asarray(widths, dtype=np.int64)
    return int(np.sum(w * kv + w * (w + 1) // 2))
