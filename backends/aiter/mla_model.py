"""A DeepSeek-shaped decoder (MLA attention; dense or MoE MLP) with random weights, from AITER's
kernels.

Per layer, in SGLang's ``DeepseekV2DecoderLayer`` order: (residual add +) RMSNorm, MLA attention
(:mod:`backends.aiter.mla`), residual add + RMSNorm, then the MLP: dense (gate/up GEMM,
SiLU-and-mul, down GEMM) for the first ``dense_layers`` layers, MoE (:mod:`backends.aiter.moe`)
after.  Then the final norm and the LM head.  The forward has the signature of the dense
:class:`backends.aiter.model.Transformer`, so the runner's graphs, metadata and timing serve both.

The draft model (``ModelShape.draft`` of an MLA/MoE target: DeepSeek's MTP/NextN layer) starts
with RMSNorm of the token's embedding and of the previous hidden state, their concatenation
through ``eh_proj`` (2*hidden -> hidden), then one decoder layer of the target's kind.
"""

from __future__ import annotations

import math
from typing import Any

from backends.aiter.fp8 import linear
from backends.aiter.mla import ExtendPlan, MLAAttention, row_metadata
from backends.aiter.model import AttnInputs, RMSNorms, silu_and_mul
from backends.aiter.moe import MoE

__all__ = ["MLATransformer"]


class _Layer:
    __slots__ = ("norm1", "attn", "norm2", "gu", "down", "moe")


class MLATransformer(RMSNorms):
    """One GPU's DeepSeek-shaped decoder stack (``geometry`` from
    :func:`backends.aiter.mla.mla_geometry`); ``caches`` are the layers' latent views.

    ``index_buf``: the shared token-level ``kv_indices`` buffer of the decode path.
    ``extend_plan``: set (by the runner) for a prefill forward; ``None`` for verify/draft rows.
    """

    #: ``after_layer(i, layers)``, called after each layer is queued (None: not called); the
    #: runner sets it while timing an eager pass in segments (backends/aiter/segments.py)
    after_layer = None

    def __init__(self, geometry: dict, *, kernels: Any, mla_kernels: Any, caches: list, rope: Any,
                 index_buf: Any, page_size: int, device: Any, dtype: Any, generator: Any = None,
                 eps: float = 1e-6, routing: str = "uniform", skew: float = 1.0,
                 seed: int = 0, sms: int = 132) -> None:
        import torch

        g = dict(geometry)
        self.g = g
        self.k = kernels
        self.mk = mla_kernels
        self.rope = rope
        self.index_buf = index_buf
        self.page_size = int(page_size)
        self.eps = float(eps)
        self.sms = int(sms)
        self.device, self.dtype = device, dtype
        self.draft = bool(g["fusion_in"])
        self.extend_plan: ExtendPlan | None = None

        def w(rows: int, cols: int):
            t = torch.empty((rows, cols), device=device, dtype=dtype)
            return t.normal_(0.0, 1.0 / math.sqrt(cols), generator=generator)

        def ones(n: int):
            return torch.empty(n, device=device, dtype=dtype).normal_(1.0, 0.05, generator=generator)

        def fp8_lin(rows: int, cols: int):
            from backends.aiter.fp8 import Fp8Linear

            return Fp8Linear(rows, cols, device=device, generator=generator, dtype=dtype)

        # an FP8 checkpoint's projections, dense MLP and experts are FP8 block-scaled GEMMs
        lin = fp8_lin if g.get("fp8") else w

        h = g["hidden"]
        self.layers: list[_Layer] = []
        for i in range(g["layers"]):
            lw = _Layer()
            lw.norm1 = ones(h)
            lw.attn = MLAAttention(g, kernels=mla_kernels, cache=caches[i], device=device,
                                   dtype=dtype, w=w, ones=ones, eps=self.eps, lin=lin)
            lw.norm2 = ones(h)
            lw.gu = lw.down = lw.moe = None
            if i < g["dense_layers"]:
                lw.gu = lin(2 * g["intermediate"], h)
                lw.down = lin(h, g["intermediate"])
            else:
                lw.moe = MoE(g, kernels=mla_kernels, silu_and_mul=silu_and_mul, w=w,
                             routing=routing, skew=skew, seed=seed * 1000 + i, device=device,
                             dtype=dtype, generator=generator, lin=lin)
            self.layers.append(lw)
        self.embed = torch.empty((g["vocab"], h), device=device, dtype=dtype).normal_(
            0.0, 1.0, generator=generator)
        if self.draft:
            self.enorm, self.hnorm = ones(h), ones(h)
            self.eh_proj = w(h, g["fusion_in"])
        self.final_norm = ones(h)
        self.lm_head = w(g["vocab"], h)

    # -- pieces ---------------------------------------------------------------------------------

    def _mlp(self, lw: _Layer, x):
        if lw.moe is not None:
            return lw.moe.forward(x)
        return linear(silu_and_mul(linear(x, lw.gu)), lw.down)

    def _rows(self, x, a: AttnInputs):
        """The decode-row metadata of this forward (shared by all layers), or ``None`` (prefill)."""
        if self.extend_plan is not None:
            return None
        return row_metadata(a.cu_seqlens_q, a.seqused_k, a.block_table, rows=x.shape[0],
                            heads=self.g["heads"], lora=self.g["kv_lora_rank"],
                            page_size=self.page_size, index_buf=self.index_buf, sms=self.sms)

    def _attention(self, lw: _Layer, x, a: AttnInputs, rm):
        if rm is None:
            return lw.attn.extend(x, a, self.extend_plan, self.rope, self._norm, a.block_table,
                                  self.page_size)
        return lw.attn.decode(x, a, rm, self.rope, self._norm)

    # -- whole passes ---------------------------------------------------------------------------
    def forward(self, ids, a: AttnInputs, *, hidden_in=None, logits_index=None, logits_out=None):
        """Logits of one forward over ``ids`` (as :meth:`backends.aiter.model.Transformer.forward`)."""
        import torch
        import torch.nn.functional as F

        x = self.embed.index_select(0, ids)
        if self.draft:
            hid = hidden_in if hidden_in is not None else x
            x = F.linear(torch.cat([self._norm(x, self.enorm), self._norm(hid, self.hnorm)], dim=1),
                         self.eh_proj)
        rm = self._rows(x, a)
        residual = None
        for i, lw in enumerate(self.layers):
            if residual is None:
                residual = x
                h_in = self._norm(x, lw.norm1)
            else:
                h_in, residual = self._add_norm(x, residual, lw.norm1)
            attn = self._attention(lw, h_in, a, rm)
            h2, residual = self._add_norm(attn, residual, lw.norm2)
            x = self._mlp(lw, h2)
            if self.after_layer is not None:   # timed eager passes: backends/aiter/segments.py
                self.after_layer(i, len(self.layers))
        out, _ = self._add_norm(x, residual, self.final_norm)
        if logits_index is not None:
            out = out.index_select(0, logits_index)
        if logits_out is not None:
            return torch.mm(out, self.lm_head.t(), out=logits_out)
        return F.linear(out, self.lm_head)

    def attention_only(self, layer: int, x, a: AttnInputs):
        """Layer ``layer``'s attention block alone (norm, MLA attention incl. the latent write)."""
        lw = self.layers[layer]
        return self._attention(lw, self._norm(x, lw.norm1), a, self._rows(x, a))
