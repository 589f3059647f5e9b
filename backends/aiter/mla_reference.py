"""Plain-PyTorch (float32) references for the MLA attention and MoE layers, for the tests.

They follow the models' math directly and share no code path with the kernels:

* MLA is computed *without* the absorption trick: keys and values are up-projected from the cached
  latents with ``kv_b`` per head, and every query row attends to the keys its request has cached
  plus the new tokens up to its own position;
* the MoE output is a loop over experts: each expert's rows through its gate/up and down
  projections, weighted by their routing weights, plus the shared experts.
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["rope_interleaved", "rms_norm", "mla_reference", "mla_new_latents", "moe_reference",
           "key_rows", "fp8_roundtrip"]


def rms_norm(x, w, eps: float):
    import torch

    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def rope_interleaved(x, positions, cos, sin):
    """GPT-J style rotary on the last dim of ``x`` ``[rows, ..., d]``: pairs ``(2i, 2i+1)``
    rotated by ``cos/sin[pos, i]`` (``cos``/``sin`` ``[max_pos, d/2]``)."""
    c = cos.float()[positions.long().to(cos.device)].to(x.device)
    s = sin.float()[positions.long().to(sin.device)].to(x.device)
    while c.dim() < x.dim():
        c, s = c.unsqueeze(1), s.unsqueeze(1)
    x = x.float()
    even, odd = x[..., 0::2], x[..., 1::2]
    out = x.clone()
    out[..., 0::2] = even * c - odd * s
    out[..., 1::2] = odd * c + even * s
    return out


def _q_and_latent(attn: Any, x, positions, cos, sin, eps: float):
    g = attn.g
    xf = x.float()
    if attn.q is not None:
        q = xf @ attn.q.float().t()
    else:
        q = rms_norm(xf @ attn.q_a.float().t(), attn.q_a_norm, eps) @ attn.q_b.float().t()
    q = q.view(x.shape[0], g["heads"], g["qk_nope"] + g["qk_rope"])
    q_nope = q[..., :g["qk_nope"]]
    q_pe = rope_interleaved(q[..., g["qk_nope"]:], positions, cos, sin)
    lat = xf @ attn.kv_a.float().t()
    c = rms_norm(lat[:, :g["kv_lora_rank"]], attn.kv_a_norm, eps)
    k_pe = rope_interleaved(lat[:, g["kv_lora_rank"]:], positions, cos, sin)
    return q_nope, q_pe, c, k_pe


def mla_new_latents(attn: Any, x, positions, cos, sin, eps: float):
    """The ``[rows, kv_lora + rope]`` latent rows a forward writes into the cache."""
    import torch

    _, _, c, k_pe = _q_and_latent(attn, x, positions, cos, sin, eps)
    return torch.cat([c, k_pe], dim=-1)


def key_rows(block_table, page: int, request: int, n_keys: int):
    """Cache rows of a request's first ``n_keys`` tokens (token ``n`` at
    ``block_table[request, n // page] * page + n % page``)."""
    import torch

    n = torch.arange(int(n_keys), device=block_table.device)
    return block_table[int(request)].long()[n // page] * page + n % page


def mla_reference(attn: Any, x, positions, slots, cache_before, keys: Sequence[Any], cos, sin,
                  eps: float):
    """Attention output ``[rows, hidden]`` of one MLA layer, in float32, not absorbed.

    ``cache_before``: the latent cache ``[tokens, 1, lora + rope]`` before the forward (the new
    rows are written at ``slots`` first); ``keys[r]``: the cache rows query row ``r`` attends to.
    """
    import torch

    g = attn.g
    H, nope, lora, vd = g["heads"], g["qk_nope"], g["kv_lora_rank"], g["v_head"]
    q_nope, q_pe, c, k_pe = _q_and_latent(attn, x, positions, cos, sin, eps)
    cache = cache_before.float().clone().view(-1, lora + g["qk_rope"])
    cache[slots.long()] = torch.cat([c, k_pe], dim=-1)
    kvb = attn.kv_b.float().view(H, nope + vd, lora)
    out = torch.empty((x.shape[0], H * vd), dtype=torch.float32, device=x.device)
    for r in range(x.shape[0]):
        lat = cache[keys[r].long()]                                    # [n, lora + rope]
        kv = torch.einsum("nl,hdl->hnd", lat[:, :lora], kvb)           # [H, n, nope + v]
        s = torch.einsum("hd,hnd->hn", q_nope[r], kv[..., :nope])
        s = s + torch.einsum("hd,nd->hn", q_pe[r], lat[:, lora:])
        p = torch.softmax(s * attn.scale, dim=-1)
        out[r] = torch.einsum("hn,hnv->hv", p, kv[..., nope:]).reshape(-1)
    return out @ attn.o.float().t()


def fp8_roundtrip(x):
    """``x`` quantised per row and group of 128 values to float8_e4m3fn (scale = the group's
    largest magnitude / 448) and back, in float32: what an FP8 GEMM's activation input holds."""
    import torch

    m, k = x.shape
    g = x.float().reshape(m, k // 128, 128)
    scale = g.abs().amax(dim=-1, keepdim=True).clamp_min(1e-10) / 448.0
    return ((g / scale).to(torch.float8_e4m3fn).float() * scale).reshape(m, k)


def moe_reference(moe: Any, x, weights, ids):
    """The MoE layer's output ``[rows, hidden]`` by a loop over this GPU's experts (float32);
    with FP8 weights (``moe.fp8``) every GEMM input is rounded to FP8 first
    (:func:`fp8_roundtrip`), as the kernels' inputs are, and each GEMM's output is rounded to the
    model dtype before the activation, as the kernels write it."""
    import torch

    q = fp8_roundtrip if getattr(moe, "fp8", False) else (lambda t: t.float())
    xf = q(x)
    out = torch.zeros((x.shape[0], moe.hidden), dtype=torch.float32, device=x.device)
    for e in range(getattr(moe, "E_local", moe.E)):   # this GPU's experts (all of them at ep 1)
        rows, slot = torch.nonzero(ids == getattr(moe, "first_expert", 0) + e, as_tuple=True)
        if len(rows) == 0:
            continue
        h = (xf[rows] @ moe.w13[e].float().t()).to(x.dtype).float()
        a = torch.nn.functional.silu(h[:, :moe.I]) * h[:, moe.I:]
        y = q(a.to(x.dtype)) @ moe.w2[e].float().t()
        out.index_add_(0, rows, y * weights.float()[rows, slot].unsqueeze(1))
    if moe.shared_gu is not None:
        h = (xf @ moe.shared_gu.float().t()).to(x.dtype).float()
        si = h.shape[1] // 2
        a = (torch.nn.functional.silu(h[:, :si]) * h[:, si:]).to(x.dtype)
        out += q(a) @ moe.shared_down.float().t()
    return out
