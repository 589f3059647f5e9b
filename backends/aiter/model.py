"""A model-shaped forward pass with random weights, built from AITER's kernels.

Per decoder layer, in SGLang's order for Llama-style models: (residual add +) RMSNorm, the QKV
GEMM, rotary embedding of q and k fused with the paged KV write, AITER's ``unified_attention``
over the paged cache, the O projection, residual add + RMSNorm, the gate/up GEMM, SiLU-and-mul,
the down GEMM.  Then the final norm and the LM head over the rows whose logits are needed.

The draft model is one such layer with the EAGLE front of SGLang's draft models: ``eagle``
(``models/llama_eagle.py``): ``fc`` over the token embedding and the hidden state side by side
(2*hidden -> hidden, with bias), the layer without its input norm, and ``hidden + residual``
without a final norm; ``eagle3`` (``models/llama_eagle3.py``): the QKV GEMM over the normed
embedding and the normed hidden state side by side (2*hidden), and -- when the hidden state is
the target's three captured layers (3*hidden, the draft-extend pass) -- the fusion ``fc``
(3*hidden -> hidden) first.

Which kernel does what (see docs/aiter.md for why):

* attention: ``aiter.ops.triton.unified_attention`` (what SGLang's AITER backend calls for
  non-MLA target verify, decode and ragged extend);
* RMSNorm / add + RMSNorm: ``aiter.ops.triton.rmsnorm``;
* rotary + KV write: ``aiter.ops.triton.fused_kv_cache.fused_qk_rope_reshape_and_cache``;
* GEMMs: ``torch.nn.functional.linear`` (cuBLAS/hipBLASLt -- SGLang's AITER path on ROCm uses
  AITER's tuned hipBLASLt/ASM GEMMs, whose counterpart on an NVIDIA GPU is cuBLAS);
* SiLU-and-mul: a small Triton kernel of ours (one pass; SGLang uses a fused kernel too).

Weights are random (timing does not depend on values), scaled ``1/sqrt(fan_in)`` so activations
stay finite through any number of layers.  Tensor parallelism: the model is one rank's shard
(``ModelShape.heads_per_gpu`` etc.); the all-reduces are modelled by :func:`comm_time_s`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["AttnInputs", "Rope", "Transformer", "silu_and_mul", "comm_time_s", "CommModel",
           "dense_shape"]


@dataclass
class AttnInputs:
    """What one forward's attention and KV write read (all on the model's device).

    ``cu_seqlens_q``: int32 ``[nseq+1]`` query row offsets; ``seqused_k``: int32 ``[nseq]`` keys
    each sequence attends to (cached + new); ``block_table``: int32 ``[nseq, max_blocks]``;
    ``positions``: int32 ``[rows]`` rotary positions; ``slots``: int64 ``[rows]`` KV slots the new
    keys/values go to (page * page_size + offset in the layer's view).
    """

    cu_seqlens_q: Any
    seqused_k: Any
    block_table: Any
    max_seqlen_q: int
    max_seqlen_k: int
    positions: Any
    slots: Any


@dataclass(frozen=True)
class CommModel:
    """A modelled all-reduce (tensor parallelism on one GPU): ``latency + bytes * 2(tp-1)/tp / bus_bw``.

    Assumptions, not measurements: defaults are of the order SGLang's custom all-reduce reaches
    on an 8-GPU NVLink H100/H200 node (a few microseconds per call for small messages).
    """

    latency_s: float = 8e-6
    bus_bw: float = 350e9


def comm_time_s(tp: int, layers: int, rows: int, hidden: int, logits_rows: int, vocab: int,
                model: CommModel = CommModel(), dtype_bytes: int = 2) -> float:
    """Modelled communication of one forward on ``tp`` GPUs: an all-reduce after the embedding,
    after each layer's O projection and after each MLP, plus the logits all-gather."""
    if tp <= 1:
        return 0.0
    frac = 2.0 * (tp - 1) / tp
    ar_bytes = rows * hidden * dtype_bytes
    n_ar = 1 + 2 * layers
    t = n_ar * (model.latency_s + ar_bytes * frac / model.bus_bw)
    if logits_rows:
        t += model.latency_s + logits_rows * vocab * dtype_bytes * (tp - 1) / model.bus_bw
    return t


def dense_shape(shape: Any) -> dict[str, int]:
    """One rank's dense (MHA/GQA) geometry from a ``ModelShape``."""
    tp = int(getattr(shape, "tp", 1))
    hq = int(shape.heads) // tp
    hkv = max(1, int(shape.kv_heads) // tp)
    hidden = int(shape.hidden)
    attn_in = int(getattr(shape, "attn_in", 0) or hidden)
    fusion = int(getattr(shape, "fusion_in", 0) or 0)
    # a draft shape has a fusion GEMM; EAGLE-3's QKV reads 2*hidden, EAGLE's fc feeds the layer
    role = "target" if not fusion else ("eagle3" if attn_in != hidden else "eagle")
    return {
        "layers": int(shape.layers), "hidden": hidden, "heads": hq, "kv_heads": hkv,
        "head_dim": int(shape.head_dim), "intermediate": int(shape.intermediate) // tp,
        "vocab": -(-int(shape.vocab) // tp), "attn_in": attn_in, "fusion_in": fusion, "tp": tp,
        "role": role,
    }


_silu_kernel = None


def _get_silu_kernel():
    global _silu_kernel
    if _silu_kernel is None:
        import triton
        import triton.language as tl

        @triton.jit
        def _silu_and_mul_kernel(x_ptr, out_ptr, n_cols, stride_x, stride_o, BLOCK: tl.constexpr):
            row = tl.program_id(0).to(tl.int64)
            cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
            mask = cols < n_cols
            g = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
            u = tl.load(x_ptr + row * stride_x + n_cols + cols, mask=mask, other=0.0).to(tl.float32)
            y = g / (1.0 + tl.exp(-g)) * u
            tl.store(out_ptr + row * stride_o + cols, y.to(out_ptr.dtype.element_ty), mask=mask)

        _silu_kernel = _silu_and_mul_kernel
    return _silu_kernel


def silu_and_mul(x: Any, out: Any = None) -> Any:
    """``silu(x[:, :n]) * x[:, n:]`` in one Triton pass (``n = x.shape[1] // 2``)."""
    import torch

    rows, two_n = x.shape
    n = two_n // 2
    if out is None:
        out = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    if rows:
        block = 1024
        _get_silu_kernel()[(rows, -(-n // block))](x, out, n, x.stride(0), out.stride(0), BLOCK=block)
    return out


class Rope:
    """cos/sin tables ``[max_positions, head_dim/2]`` (neox style, as Llama uses)."""

    def __init__(self, head_dim: int, max_positions: int, *, device: Any, dtype: Any,
                 base: float = 500000.0) -> None:
        import torch

        inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        freqs = torch.outer(torch.arange(int(max_positions), dtype=torch.float32), inv)
        self.cos = freqs.cos().to(device=device, dtype=dtype)
        self.sin = freqs.sin().to(device=device, dtype=dtype)


class _Layer:
    __slots__ = ("norm1", "qkv", "o", "norm2", "gu", "down", "k_cache", "v_cache")


class RMSNorms:
    """The RMSNorm steps of a decoder stack (AITER's Triton kernels ``self.k``, epsilon
    ``self.eps``), shared by the dense and the MLA transformers."""

    def _norm(self, x, weight):
        return self.k.rms_norm(x, weight, self.eps)

    def _add_norm(self, x, residual, weight):
        import torch

        out = torch.empty_like(x)
        res = torch.empty_like(x)
        self.k.rmsnorm_add(out, x, residual, res, weight, self.eps)
        return out, res


class Transformer(RMSNorms):
    """One rank's shard of a dense (MHA/GQA) decoder stack with random weights.

    ``geometry`` comes from :func:`dense_shape`.  ``views`` are ``(k_cache, v_cache)`` per layer
    (from :class:`backends.aiter.kvpool.KVPool`).  A draft model is the same class with one
    layer and ``geometry["role"]`` ``"eagle"`` or ``"eagle3"`` (the module docstring).
    """

    #: ``after_layer(i, layers)``, called after each layer is queued (None: not called); the
    #: runner sets it while timing an eager pass in segments (backends/aiter/segments.py)
    after_layer = None

    def __init__(self, geometry: dict[str, int], *, kernels: Any, views: list, rope: Rope,
                 device: Any, dtype: Any, generator: Any = None, eps: float = 1e-5) -> None:
        import torch

        g = geometry
        self.g = dict(g)
        self.k = kernels
        self.rope = rope
        self.eps = float(eps)
        self.device = device
        self.dtype = dtype
        self.scale = 1.0 / math.sqrt(g["head_dim"])
        self.role = g.get("role", "target")
        self.draft = self.role != "target"

        def w(rows: int, cols: int):
            t = torch.empty((rows, cols), device=device, dtype=dtype)
            return t.normal_(0.0, 1.0 / math.sqrt(cols), generator=generator)

        def ones(n: int):
            return torch.empty(n, device=device, dtype=dtype).normal_(1.0, 0.05, generator=generator)

        h, hq, hkv, d, inter = g["hidden"], g["heads"], g["kv_heads"], g["head_dim"], g["intermediate"]
        self.layers: list[_Layer] = []
        for i in range(g["layers"]):
            lw = _Layer()
            lw.norm1 = ones(h)
            lw.qkv = w((hq + 2 * hkv) * d, g["attn_in"])
            lw.o = w(h, hq * d)
            lw.norm2 = ones(h)
            lw.gu = w(2 * inter, h)
            lw.down = w(h, inter)
            lw.k_cache, lw.v_cache = views[i]
            self.layers.append(lw)
        self.embed = torch.empty((g["vocab"], h), device=device, dtype=dtype).normal_(
            0.0, 1.0, generator=generator)
        self.hidden_norm = ones(h) if self.role == "eagle3" else None
        # EAGLE: fc over (embedding, hidden) -> hidden; EAGLE-3: fusion over the target's layers
        self.fc = w(h, g["fusion_in"]) if self.draft else None
        self.fc_bias = (torch.empty(h, device=device, dtype=dtype).normal_(0.0, 0.02, generator=generator)
                        if self.role == "eagle" else None)
        self.final_norm = ones(h)
        self.lm_head = w(g["vocab"], h)

    # -- pieces ---------------------------------------------------------------------------------

    def _attention(self, lw: _Layer, x, a: AttnInputs):
        import torch
        import torch.nn.functional as F

        g = self.g
        rows = x.shape[0]
        hq, hkv, d = g["heads"], g["kv_heads"], g["head_dim"]
        qkv = F.linear(x, lw.qkv)
        q = qkv[:, : hq * d].view(rows, hq, d)
        k = qkv[:, hq * d:(hq + hkv) * d].view(rows, hkv, d)
        v = qkv[:, (hq + hkv) * d:].view(rows, hkv, d)
        q_out = torch.empty((rows, hq, d), device=x.device, dtype=x.dtype)
        k_out = torch.empty((rows, hkv, d), device=x.device, dtype=x.dtype)
        self.k.rope_and_cache(q, k, v, lw.k_cache, lw.v_cache, a.slots, a.positions, self.rope.cos,
                              self.rope.sin, None, None, True, True, q_out=q_out, k_out=k_out,
                              output_zeros=False)
        o = torch.empty((rows, hq, d), device=x.device, dtype=x.dtype)
        self.k.unified_attention(q_out, lw.k_cache, lw.v_cache, o, a.cu_seqlens_q, a.max_seqlen_q,
                                 a.seqused_k, a.max_seqlen_k, self.scale, True, (-1, -1),
                                 a.block_table, 0, None, None, None)
        return F.linear(o.view(rows, hq * d), lw.o)

    def _mlp(self, lw: _Layer, x):
        import torch.nn.functional as F

        return F.linear(silu_and_mul(F.linear(x, lw.gu)), lw.down)

    # -- whole passes ---------------------------------------------------------------------------
    def forward(self, ids, a: AttnInputs, *, hidden_in=None, logits_index=None, logits_out=None):
        """Logits of one forward over ``ids`` (``[rows]`` int64).

        ``hidden_in`` (draft only): the hidden states the draft reads, ``[rows, hidden]`` (the
        previous step's, or for EAGLE the target's) or, for EAGLE-3's draft-extend pass, the
        target's three captured layers ``[rows, 3*hidden]``, fused by ``fc`` first.
        ``logits_index``: rows whose logits are computed (``None``: every row).
        ``logits_out``: a ``[len(rows), vocab]`` buffer to write the logits into (graphs share one).
        """
        import torch
        import torch.nn.functional as F

        x = self.embed.index_select(0, ids)
        residual = None
        for i, lw in enumerate(self.layers):
            if i == 0 and self.role == "eagle3":
                # normed embedding and normed hidden state, side by side (QKV reads 2*hidden)
                hid = hidden_in if hidden_in is not None else x
                if hid.shape[1] != self.g["hidden"]:
                    hid = F.linear(hid, self.fc)  # the target's layers, fused (draft-extend)
                h_in = torch.cat([self._norm(x, lw.norm1), self._norm(hid, self.hidden_norm)], dim=1)
                residual = hid
            elif i == 0 and self.role == "eagle":
                # fc over (embedding, hidden); EAGLE's first layer has no input norm
                hid = hidden_in if hidden_in is not None else x
                x = F.linear(torch.cat([x, hid], dim=1), self.fc, self.fc_bias)
                residual = x
                h_in = x
            elif residual is None:
                residual = x
                h_in = self._norm(x, lw.norm1)
            else:
                h_in, residual = self._add_norm(x, residual, lw.norm1)
            attn = self._attention(lw, h_in, a)
            h2, residual = self._add_norm(attn, residual, lw.norm2)
            x = self._mlp(lw, h2)
            if self.after_layer is not None:   # timed eager passes: backends/aiter/segments.py
                self.after_layer(i, len(self.layers))
        if self.role == "eagle":
            out = x + residual  # LlamaForCausalLMEagle: no final norm
        else:
            out, _ = self._add_norm(x, residual, self.final_norm)
        if logits_index is not None:
            out = out.index_select(0, logits_index)
        if logits_out is not None:
            return torch.mm(out, self.lm_head.t(), out=logits_out)
        import torch.nn.functional as F

        return F.linear(out, self.lm_head)
