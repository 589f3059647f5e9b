"""FP8 block-scaled linear layers (DeepSeek-V3's checkpoint format) from AITER's Triton kernels.

DeepSeek-V3 ships its linear weights as FP8 e4m3 with one float32 scale per 128 x 128 block
(``quantization_config``: ``fmt`` e4m3, ``weight_block_size`` [128, 128], activations quantised
dynamically).  SGLang serves them by quantising each activation row per group of 128 values
(``per_token_group_quant_fp8``) and running a block-scaled FP8 GEMM.  Here:

* activations: AITER's ``_fused_flatten_fp8_group_quant_kernel`` (one 128-value group per
  program: the group's max magnitude over the format's maximum is its scale);
* GEMMs: AITER's ``_gemm_a8w8_blockscale_kernel`` (``aiter.ops.triton.gemm_a8w8_blockscale``),
  ``y = sum_k (x_q[:, k] * x_s[:, k//128]) (w_q[n, k] * w_s[n//128, k//128])`` in float32;
* MoE experts: ``aiter.ops.triton.moe_op.fused_moe`` with ``use_fp8_w8a8`` and
  ``block_shape=[128, 128]`` (:mod:`backends.aiter.moe`).

**Which FP8.**  AITER picks ``torch.float8_e4m3fnuz`` (AMD's MI300 format, Triton
``fp8e4b8``) for every architecture but gfx950 (``utils/types.py``); Triton's CUDA backend does
not support ``fp8e4b8`` at all, and supports NVIDIA's ``torch.float8_e4m3fn`` (``fp8e4nv``) from
compute capability 8.9 (an H200 is 9.0).  The kernels above read whatever dtype their pointers
carry, so the weights and activations here are ``float8_e4m3fn`` (largest value 448, the format
DeepSeek-V3's checkpoint is stored in), created by us, never through AITER's dtype table.  The
GEMM is launched directly (its wrapper looks up an MI300X/MI350X config file by device name,
which has no NVIDIA entry, and passes a zero stride its kernel asserts positive under the
interpreter); the launch configuration is AITER's MI300X default for this kernel without the
AMD-only keys.

**One compile per shape, not per batch size.**  The kernel's ``@triton.heuristics`` derives two
compile-time constants: ``EVEN_K`` (``K % BLOCK_SIZE_K == 0``) and ``GRID_MN`` (the number of
output tiles, so a new value for every 128 rows of ``M``).  ``GRID_MN`` reaches only a
``remap_xcd(pid, GRID_MN)`` call whose result the kernel discards, so every value compiles to the
same code; but each is a separate Triton compile (about half a second), and an eager prefill meets
a new ``M`` almost every time (a live DeepSeek-V3 run spent 171 s of its 245 s in 28 prefills, 3.7
s of them on the GPU).  :func:`blockscale_gemm` launches the kernel under the heuristics with
``EVEN_K`` as they compute it and ``GRID_MN`` fixed at :data:`GRID_MN_FIXED`; the GPU test
``test_grid_mn_leaves_the_compiled_gemm_unchanged`` checks that two values give the same PTX.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["BLOCK", "FP8_MAX", "fp8_dtype", "Fp8Linear", "linear", "quant_groups",
           "blockscale_gemm", "dequant_weight", "dequant_act", "GEMM_CONFIG", "load_fp8_kernels"]

#: quantisation block (rows and columns of a weight block; values per activation group)
BLOCK = 128
#: largest finite value of float8_e4m3fn
FP8_MAX = 448.0

#: AITER's MI300X default for the block-scale GEMM (``MI300X-GEMM-A8W8_BLOCKSCALE.json``),
#: without ``waves_per_eu``, ``matrix_instr_nonkdim`` and ``kpack`` (AMD only)
GEMM_CONFIG = {"BLOCK_SIZE_M": 128, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
               "num_warps": 4, "num_stages": 2, "cache_modifier": ".cg"}

#: the value :func:`blockscale_gemm` passes for the kernel's dead ``GRID_MN`` constant
GRID_MN_FIXED = 1

_state: dict[str, Any] = {}


def fp8_dtype():
    """``torch.float8_e4m3fn``: the format the H200 (and DeepSeek-V3's checkpoint) uses."""
    import torch

    return torch.float8_e4m3fn


def load_fp8_kernels() -> dict[str, Any]:
    """AITER's block-scale GEMM and per-group FP8 quantisation kernels (bridged)."""
    if "k" in _state:
        return _state["k"]
    import importlib

    from backends.aiter import bridge

    bridge.load_kernels()
    gemm = importlib.import_module("aiter.ops.triton._triton_kernels.gemm_a8w8_blockscale")
    quant = importlib.import_module("aiter.ops.triton._triton_kernels.fused_fp8_quant")
    # the JIT function under the kernel's @triton.heuristics (see the module docstring)
    _state["k"] = {"gemm": gemm._gemm_a8w8_blockscale_kernel.fn,
                   "quant": quant._fused_flatten_fp8_group_quant_kernel}
    return _state["k"]


def quant_groups(x, out_q=None, out_s=None):
    """``(x_q, x_s)``: ``x`` ``[M, K]`` quantised per row and group of 128 columns to
    float8_e4m3fn, with float32 scales ``[M, K/128]`` (``x ~ x_q * x_s``)."""
    import torch

    m, k = x.shape
    if k % BLOCK:
        raise ValueError(f"FP8 activation groups need K divisible by {BLOCK}, got {k}")
    g = k // BLOCK
    if out_q is None:
        out_q = torch.empty((m, k), dtype=fp8_dtype(), device=x.device)
    if out_s is None:
        out_s = torch.empty((m, g), dtype=torch.float32, device=x.device)
    if m == 0:
        return out_q, out_s
    x3 = x.view(m, g, BLOCK)
    load_fp8_kernels()["quant"][(m, g)](
        x3, out_q, out_s, *x3.stride(), *out_q.stride(), *out_s.stride(), BLOCK,
        BLOCK_SIZE_N2=BLOCK, QUANT_BLOCK_SIZE=BLOCK, DTYPE_MAX=FP8_MAX, DTYPE_MIN=-FP8_MAX)
    return out_q, out_s


def blockscale_gemm(x_q, x_s, w_q, w_s, out, config: dict | None = None):
    """``out[M, N] = dequant(x_q, x_s) @ dequant(w_q, w_s)^T`` by AITER's block-scale kernel
    (``w_q`` ``[N, K]``, ``w_s`` ``[ceil(N/128), K/128]``); returns ``out``."""
    import triton

    m, k = x_q.shape
    n = w_q.shape[0]
    if m == 0:
        return out
    cfg = dict(GEMM_CONFIG if config is None else config)
    cfg.update(NUM_KSPLIT=1, SPLITK_BLOCK_SIZE=k, GROUP_K=BLOCK, GROUP_N=BLOCK,
               EVEN_K=k % cfg["BLOCK_SIZE_K"] == 0, GRID_MN=GRID_MN_FIXED)
    wt, wst = w_q.T, w_s.T
    grid = (triton.cdiv(m, cfg["BLOCK_SIZE_M"]) * triton.cdiv(n, cfg["BLOCK_SIZE_N"]),)
    # stride_ck (the split-K stride) is never multiplied by a non-zero index with one split;
    # the kernel asserts it positive, so any positive value will do
    load_fp8_kernels()["gemm"][grid](
        x_q, wt, out, x_s, wst, m, n, k, x_q.stride(0), x_q.stride(1), wt.stride(0),
        wt.stride(1), 1, out.stride(0), out.stride(1), x_s.stride(0), x_s.stride(1),
        wst.stride(0), wst.stride(1), **cfg)
    return out


def _random_fp8(shape, *, device, generator, chunk: int = 1 << 28):
    """Random float8_e4m3fn values ~ N(0, 1), made on ``device`` in chunks (no host copy)."""
    import torch

    q = torch.empty(shape, dtype=fp8_dtype(), device=device)
    flat = q.view(-1)
    for s in range(0, flat.numel(), chunk):
        e = min(flat.numel(), s + chunk)
        tmp = torch.empty(e - s, dtype=torch.float16, device=device)
        flat[s:e].copy_(tmp.normal_(0.0, 1.0, generator=generator).clamp_(-FP8_MAX, FP8_MAX))
    return q


def random_block_weight(lead: tuple, n: int, k: int, *, device, generator):
    """``(w_q, w_s)``: random FP8 weights ``lead + [n, k]`` and their block scales
    ``lead + [ceil(n/128), k/128]``, so that ``w_q * w_s`` has spread ``~ 1/sqrt(k)`` (as the
    bf16 layers' ``1/sqrt(fan_in)``) and every block its own scale."""
    import torch

    if k % BLOCK:
        raise ValueError(f"FP8 block weights need K divisible by {BLOCK}, got {k}")
    q = _random_fp8(tuple(lead) + (n, k), device=device, generator=generator)
    s = torch.empty(tuple(lead) + (-(-n // BLOCK), k // BLOCK), dtype=torch.float32, device=device)
    s.uniform_(0.5, 1.5, generator=generator).mul_(1.0 / math.sqrt(k))
    return q, s


class Fp8Linear:
    """One FP8 block-scaled linear layer ``y = x W^T`` (``W`` ``[n, k]``): per-group activation
    quantisation, then AITER's block-scale GEMM, output in ``dtype``."""

    __slots__ = ("q", "s", "n", "k", "dtype")

    def __init__(self, n: int, k: int, *, device, generator, dtype) -> None:
        self.n, self.k, self.dtype = int(n), int(k), dtype
        self.q, self.s = random_block_weight((), self.n, self.k, device=device, generator=generator)

    @property
    def nbytes(self) -> int:
        return self.q.numel() * self.q.element_size() + self.s.numel() * self.s.element_size()

    def __call__(self, x):
        import torch

        xq, xs = quant_groups(x.contiguous())
        out = torch.empty((x.shape[0], self.n), dtype=self.dtype, device=x.device)
        return blockscale_gemm(xq, xs, self.q, self.s, out)

    def dequant(self):
        """The weight as float32 (for references)."""
        return dequant_weight(self.q, self.s)

    def float(self):
        """The weight as float32: what the float32 references multiply by."""
        return self.dequant()


def linear(x, w):
    """``x W^T`` for a bf16/fp16 tensor ``w`` (``torch``) or an :class:`Fp8Linear`."""
    if isinstance(w, Fp8Linear):
        return w(x)
    import torch.nn.functional as F

    return F.linear(x, w)


def dequant_weight(q, s):
    """float32 ``q * s`` with ``s`` per 128 x 128 block of the last two dimensions."""
    import torch

    n, k = q.shape[-2], q.shape[-1]
    rows = torch.repeat_interleave(s.float(), BLOCK, dim=-2)[..., :n, :]
    return q.float() * torch.repeat_interleave(rows, BLOCK, dim=-1)[..., :k]


def dequant_act(q, s):
    """float32 ``q * s`` with ``s`` per row and 128-column group."""
    import torch

    return q.float() * torch.repeat_interleave(s.float(), BLOCK, dim=-1)
