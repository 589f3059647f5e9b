"""The unsafe-derived diagnostic on the MLA path: the output error when a batch's real widths
differ from the fixed width.

SGLang's AITER MLA path gives every request of a verify ``num_draft_tokens`` query rows in its
metadata (``qo_indptr = arange(0, (bs+1) * W, W)``, KV extent ``kv + W``), whatever the requests
proposed.  When the requests' real query rows are packed at their own widths (no padding), the
kernel attributes row ``r`` to request ``r // W`` at position ``r % W``: a row lands in another
request's KV, or in its own at another causal position.

:func:`mla_attention_error` runs one layer's MLA attention (the live model's weights and kernels:
q/latent projections, the fused rope + latent write, AITER's Triton MLA decode, ``W_UV``, the o
projection) twice over the same latent cache and the same input rows:

* **exact**: ``cu_seqlens_q = [0, cumsum(widths)]``, ``seqused_k = kv + widths`` (each row with
  its own request's KV and causal extent);
* **as the kernel sees it**: the fixed-width metadata over the packed rows (``bs * W`` rows; rows
  the real requests do not fill are phantom rows, rows past ``bs * W`` are not computed).

Both launches write the real rows' latents at their real slots (phantom rows write into a scratch
page), use the same KV splits, and so give bit-identical outputs on every row whose request and
position the fixed metadata gets right; the report's ``max_abs_error`` is the largest difference
on the others.  The cache is the check's own (random latents), so the live pool is untouched.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

import numpy as np

from backends.aiter import metadata as md

__all__ = ["mla_attention_error"]


def _layout(w: np.ndarray, kv: np.ndarray, W: int, page: int):
    """Pages per request (room for ``kv + max(w, W)`` tokens), the block table, the real rows'
    request, position and slot, and the first scratch page."""
    need = kv + np.maximum(w, W)
    blocks = -(-need // page)
    starts = np.cumsum(blocks) - blocks
    maxb = int(blocks.max())
    scratch = int(blocks.sum())
    bt = np.minimum(starts[:, None] + np.arange(maxb)[None, :], scratch - 1)
    ends = np.cumsum(w)
    req = np.repeat(np.arange(len(w)), w)
    pos = kv[req] + np.arange(int(ends[-1])) - (ends - w)[req]
    slots = bt[req, pos // page] * page + pos % page
    return bt, req, pos, slots, scratch


def mla_attention_error(runner: Any, widths: Sequence[int], kv_lens: Sequence[int], width: int, *,
                        layer: int = 0, seed: int | None = None,
                        reference: bool = False) -> dict[str, Any]:
    """Compare the fixed-width (``width``) launch of a batch whose requests have ``widths`` real
    query rows with the exact one, on layer ``layer`` of ``runner``'s target model (an
    :class:`backends.aiter.mla_runner.MLARunner`).  ``reference``: also compare the exact launch
    with the float32 non-absorbed reference (``backends.aiter.mla_reference``).

    Returns ``max_abs_error`` (over rows both launches compute), ``row_error`` (per real row, 0
    where not computed), ``rows_not_computed``, the misattribution counts of
    :func:`backends.aiter.metadata.misattribution`, and ``output_scale``.
    """
    import torch

    from backends.aiter.mla_kernels import row_metadata
    from backends.aiter.model import AttnInputs

    w = np.asarray(widths, dtype=np.int64)
    kv = np.asarray(kv_lens, dtype=np.int64)
    W = int(width)
    bs, total = len(w), int(w.sum())
    layout = bs * W
    rows = max(total, layout)
    page = runner.page_size
    model = runner.target
    g = model.g
    lora, rope, H = g["kv_lora_rank"], g["qk_rope"], g["heads"]
    dev, dt = runner.device, runner.dtype
    bt_np, req, pos, slots_np, scratch = _layout(w, kv, W, page)
    phantom = rows - total
    scratch_pages = max(1, -(-phantom // page))
    pages = scratch + scratch_pages
    gen = torch.Generator(device=dev).manual_seed(int(total if seed is None else seed))
    cache = torch.empty((pages * page, 1, lora + rope), device=dev, dtype=dt).normal_(0, 1, generator=gen)
    x = torch.zeros((rows, g["hidden"]), device=dev, dtype=dt)
    x[:total].normal_(0, 1, generator=gen)

    def i32(a):
        return torch.as_tensor(np.ascontiguousarray(a), dtype=torch.int32, device=dev)

    bt = i32(bt_np)
    positions = np.concatenate([pos, np.zeros(phantom, dtype=np.int64)])
    slots = np.concatenate([slots_np, scratch * page + np.arange(phantom, dtype=np.int64)])
    max_ext = int(kv.max()) + max(W, int(w.max())) + 1
    base = copy.copy(model.layers[layer].attn)

    def launch(cu, sk, n: int, splits: int | None):
        attn = copy.copy(base)
        attn.cache = cache.clone()
        a = AttnInputs(cu_seqlens_q=i32(cu), seqused_k=i32(sk), block_table=bt,
                       max_seqlen_q=int(max(np.diff(cu))) if len(cu) > 1 else 1,
                       max_seqlen_k=max_ext, positions=i32(positions[:n]),
                       slots=torch.as_tensor(slots[:n], dtype=torch.int64, device=dev))
        buf = torch.zeros(n * max_ext, dtype=torch.int32, device=dev)
        rm = row_metadata(a.cu_seqlens_q, a.seqused_k, bt, rows=n, heads=H, lora=lora,
                          page_size=page, index_buf=buf, sms=model.sms)
        if splits is not None and rm.splits != splits:   # the same KV splits in both launches
            rm.splits = splits
            rm.logits = torch.empty((n, H, splits, lora + 1), dtype=torch.float32, device=dev)
        return attn.decode(x[:n], a, rm, runner.rope, model._norm), rm.splits, attn

    cu_bad = np.arange(0, (bs + 1) * W, W)
    out_bad, splits, _ = launch(cu_bad, kv + W, rows, None)
    out_ok, _, attn_ok = launch(np.concatenate([[0], np.cumsum(w)]), kv + w, total, splits)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    ok = out_ok.float()
    bad = out_bad[:total].float()
    computed = torch.arange(total, device=dev) < layout
    err_rows = (bad - ok).abs().amax(dim=1)
    err_rows = torch.where(computed, err_rows, torch.zeros_like(err_rows))
    v = md.misattribution(w, W, kv)
    res: dict[str, Any] = {
        "bs": bs, "widths": w.tolist(), "kv_lens": kv.tolist(), "tokens": total,
        "fixed_width": W, "layer": int(layer), "mixed": v is not None,
        "misattributed_rows": 0 if v is None else v.misattributed_rows,
        "misplaced_rows": 0 if v is None else v.misplaced_rows,
        "phantom_rows": int(max(0, layout - total)),
        "rows_not_computed": int(max(0, total - layout)),
        "max_abs_error": float(err_rows.max()) if total else 0.0,
        "row_error": [float(e) for e in err_rows.cpu()],
        "output_scale": float(ok.abs().max()) if total else 0.0,
        "kv_splits": int(splits),
    }
    if reference:
        from backends.aiter.mla_reference import key_rows, mla_reference

        keys = [key_rows(bt, page, int(req[r]), int(pos[r]) + 1) for r in range(total)]
        ref = mla_reference(attn_ok, x[:total], i32(pos), torch.as_tensor(slots_np, device=dev),
                            cache, keys, runner.rope.cos, runner.rope.sin, model.eps)
        res["max_abs_error_exact_vs_reference"] = float((ok - ref.to(ok.device)).abs().max())
        res["reference_scale"] = float(ref.abs().max())
    return res
