"""How AITER's unified attention lays out its grid, and how many of its programs an SM holds.

A decode batch's attention time is set by its longest sequence when the kernel's grid fits in
the programs the GPU holds at once, and by the mean when it runs in many waves
(``backends.attention_kv.effective_kv``).  Which case a batch is in depends on the kernel's grid
(AITER's ``unified_attention``: one program per (query block, KV head) -- the 2D kernel -- or,
when that is at most ``4 x SMs`` programs, each sequence's KV split into 16-128 segments -- the
3D kernel) and on how many programs are resident per SM, which depends on the compiled kernel's
registers, shared memory and warps.  :func:`attention_occupancy` compiles the three variants
the executor launches (2D for verify, 2D all-decode for draft steps, 3D) on this GPU and asks
the driver (``cuOccupancyMaxActiveBlocksPerMultiprocessor``) how many blocks of each fit on an
SM; ``specsched profile`` stores the result in the profile's metadata (``attention``).  An MLA
model's decode rows run AITER's MLA decode kernel instead, a split-KV grid of its own
(:func:`mla_occupancy`).
"""

from __future__ import annotations

import contextlib
import ctypes
from typing import Any

import numpy as np

__all__ = ["attention_grid", "attention_occupancy", "mla_occupancy", "prefill_occupancy"]

#: AITER's unified_attention: at most this many programs per SM before it stops splitting KV
TARGET_PROGRAMS_PER_SM = 4
MAX_SEGMENTS = 128


def attention_grid(heads: int, kv_heads: int, page_size: int, sms: int) -> dict[str, int]:
    """The grid constants of AITER's ``unified_attention`` for a head layout (its own rules:
    ``BLOCK_M = 16`` up to 16 query heads per KV head, else the next power of two;
    ``target_num_prgms = 4 x SMs``; at least 16 KV segments for 16-token tiles, else 8)."""
    qpk = heads // kv_heads
    block_m = 16 if qpk <= 16 else 1 << (qpk - 1).bit_length()
    return {"sms": int(sms), "kv_heads": int(kv_heads), "block_q": block_m // qpk,
            "target_programs": TARGET_PROGRAMS_PER_SM * int(sms),
            "min_segments": 16 if page_size <= 16 else 8, "max_segments": MAX_SEGMENTS}


@contextlib.contextmanager
def _record_launches():
    """Every Triton kernel launched inside: (function name, kwargs, compiled kernel)."""
    from triton.runtime.jit import JITFunction

    seen: list[tuple[str, dict, Any]] = []
    orig = JITFunction.run

    def run(self, *args, **kwargs):
        kern = orig(self, *args, **kwargs)
        seen.append((getattr(self, "__name__", str(self)), dict(kwargs), kern))
        return kern

    JITFunction.run = run
    try:
        yield seen
    finally:
        JITFunction.run = orig


def _blocks_per_sm(kern) -> tuple[int, dict[str, int]]:
    """Resident blocks per SM of a compiled Triton kernel (CUDA driver occupancy API)."""
    if hasattr(kern, "_init_handles"):
        kern._init_handles()
    md = kern.metadata
    warps = int(getattr(md, "num_warps", 4))
    shared = int(getattr(md, "shared", 0))
    info = {"n_regs": int(getattr(kern, "n_regs", -1)), "shared_bytes": shared, "num_warps": warps}
    libcuda = ctypes.CDLL("libcuda.so.1")
    n = ctypes.c_int(0)
    rc = libcuda.cuOccupancyMaxActiveBlocksPerMultiprocessor(
        ctypes.byref(n), ctypes.c_void_p(int(kern.function)), ctypes.c_int(32 * warps),
        ctypes.c_size_t(shared))
    if rc != 0:
        raise RuntimeError(f"cuOccupancyMaxActiveBlocksPerMultiprocessor failed ({rc})")
    return int(n.value), info


def attention_occupancy(runner: Any) -> dict[str, Any]:
    """The attention grid constants and resident programs per SM of each kernel variant, on the
    runner's GPU with its head layout (what ``backends.attention_kv.attention_params`` reads)."""
    import torch

    from backends.aiter.kvpool import layout_starts

    if not runner.on_gpu or torch.version.hip:
        raise RuntimeError("attention occupancy is measured on a CUDA GPU")
    if getattr(runner, "mla", False):
        return mla_occupancy(runner)
    g = runner.geometry
    props = torch.cuda.get_device_properties(runner.device)
    grid = attention_grid(g["heads"], g["kv_heads"], runner.page_size, props.multi_processor_count)
    kc, vc = runner.pool.view(0)
    dev = runner.device
    kv = 64
    # (variant, sequences, query rows per sequence): the 2D grid needs more than
    # target_programs programs, the 3D one at most that
    n2d = grid["target_programs"] // g["kv_heads"] + 1
    cases = {"2d": (n2d, 4), "2d_decode": (n2d, 1), "3d": (1, 4)}
    slots: dict[str, int] = {}
    kernels: dict[str, Any] = {}
    for name, (nseq, width) in cases.items():
        rows = nseq * width
        q = torch.randn((rows, g["heads"], g["head_dim"]), device=dev, dtype=runner.dtype)
        out = torch.empty_like(q)
        cu = torch.arange(0, rows + 1, width, dtype=torch.int32, device=dev)
        sk = torch.full((nseq,), kv + width, dtype=torch.int32, device=dev)
        blocks = np.full(nseq, -(-(kv + width) // runner.page_size))
        starts = torch.as_tensor(layout_starts(blocks, runner.pool.span), dtype=torch.int32, device=dev)
        bt = starts.view(-1, 1) + torch.arange(runner.max_blocks, dtype=torch.int32, device=dev).view(1, -1)
        with _record_launches() as seen:
            runner.kernels.unified_attention(q, kc, vc, out, cu, width, sk, runner.max_seqlen_k,
                                             1.0 / g["head_dim"] ** 0.5, True, (-1, -1), bt, 0,
                                             None, None, None)
        torch.cuda.synchronize(dev)
        want = "kernel_unified_attention_3d" if name == "3d" else "kernel_unified_attention_2d"
        hits = [k for (fn, kw, k) in seen if fn == want]
        if not hits:
            raise RuntimeError(f"attention case {name}: {want} was not launched "
                               f"(launched: {[fn for fn, _, _ in seen]})")
        slots[name], kernels[name] = _blocks_per_sm(hits[-1])
    return {**grid, "slots_per_sm": slots, "kernels": kernels,
            "source": "cuOccupancyMaxActiveBlocksPerMultiprocessor on the compiled AITER kernels"}


def mla_occupancy(runner: Any) -> dict[str, Any]:
    """The MLA decode kernel's grid constants and resident programs per SM, on the runner's GPU.

    AITER's ``decode_attention_fwd_grouped_rope`` (the MLA path's verify, draft and draft-extend
    attention) launches one program per (query row, head group, KV split), rows first, and each
    program reads ``ceil(kv / splits)`` of its row's keys; the executor gives a launch of ``rows``
    query rows ``clamp(ceil(2 x SMs / rows), 2, 16)`` splits (``backends.aiter.mla_kernels``).
    The stage-1 kernel is compiled by one eager draft step of two requests, and the driver is
    asked how many of its blocks an SM holds (what ``backends.attention_kv`` reads as
    ``kernel: mla_decode``)."""
    import torch

    from backends.aiter.mla_kernels import DECODE_CONFIG, decode_splits

    g = runner.geometry
    sms = int(torch.cuda.get_device_properties(runner.device).multi_processor_count)
    block_h = DECODE_CONFIG["fwd_grouped_kernel_stage1_rope"]["BLOCK_H"]
    heads = int(g["heads"])
    launch, key = runner.draft_launch(np.full(2, 64, dtype=np.int64), 2)
    with _record_launches() as seen:
        runner.run(key, launch, graph=False, reps=1, warmup=0)
    torch.cuda.synchronize(runner.device)
    want = "_fwd_grouped_kernel_stage1_rope"
    hits = [k for (fn, _, k) in seen if fn == want]
    if not hits:
        raise RuntimeError(f"MLA decode: {want} was not launched "
                           f"(launched: {sorted({fn for fn, _, _ in seen})})")
    slots, info = _blocks_per_sm(hits[-1])
    return {"kernel": "mla_decode", "sms": sms, "head_groups": -(-heads // min(block_h, heads)),
            "target_programs": 2 * sms, "min_splits": decode_splits(10 ** 9, sms),
            "max_splits": decode_splits(1, sms), "slots_per_sm": {"mla_decode": slots},
            "kernels": {"mla_decode": info},
            "source": "cuOccupancyMaxActiveBlocksPerMultiprocessor on AITER's compiled MLA "
                      "decode kernel (stage 1)"}


def prefill_occupancy(runner: Any, tokens: int = 2048) -> dict[str, Any]:
    """Resident programs per SM of the prefill's attention kernel on the runner's GPU.

    A prefill of ``tokens`` tokens (enough query rows that the dense path runs AITER's 2D kernel
    with its 128-row tile: at most 1,056 on the shipped models, ``backends.prefill_waves``) is
    run once; the attention kernel it launched -- the varlen flash
    forward ``_attn_fwd`` on the MLA path, ``kernel_unified_attention_2d`` otherwise -- is asked
    how many of its blocks an SM holds (what ``backends.prefill_waves`` counts waves on)."""
    import torch

    if not runner.on_gpu or torch.version.hip:
        raise RuntimeError("prefill occupancy is measured on a CUDA GPU")
    mla = bool(getattr(runner, "mla", False))
    want = "_attn_fwd" if mla else "kernel_unified_attention_2d"
    with _record_launches() as seen:
        runner.prefill(np.array([int(tokens)]), np.array([0]), reps=1, warmup=0)
    torch.cuda.synchronize(runner.device)
    hits = [(kw, k) for (fn, kw, k) in seen if fn == want]
    if not hits:
        raise RuntimeError(f"prefill: {want} was not launched "
                           f"(launched: {sorted({fn for fn, _, _ in seen})})")
    kw, kern = hits[-1]
    slots, info = _blocks_per_sm(kern)
    sms = int(torch.cuda.get_device_properties(runner.device).multi_processor_count)
    return {"kernel": want, "sms": sms, "slots_per_sm": slots, "kernel_info": info,
            "block_m": int(kw.get("BLOCK_M", -1)), "tokens": int(tokens),
            "source": "cuOccupancyMaxActiveBlocksPerMultiprocessor on the compiled prefill "
                      "attention kernel"}
