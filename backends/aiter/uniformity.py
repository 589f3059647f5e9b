"""The uniformity check: what the unsafe-derived metadata really does to a mixed-width batch.

One mixed batch is run through AITER's ``unified_attention`` twice over the same paged KV cache
and the same queries: once with the exact per-request metadata (``qo_indptr = [0,
cumsum(widths)]``, ``seqused_k = kv_lens + widths``) and once with the metadata SGLang's non-MLA
path derives (``width = tokens // bs``, ``qo_indptr = arange(0, (bs+1)*width, width)``,
``seqused_k = kv_lens + width``).  Both are also compared with a per-request float32 reference
computed from the cache, so the report shows that the exact launch is right and the derived one is
not.  Output rows the derived launch never computes (rows past ``bs * width``) are poisoned with
NaN beforehand and reported separately.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from backends.aiter import metadata as md
from backends.aiter.kvpool import layout_starts

__all__ = ["uniformity_check", "attention_error", "reference_attention"]


def reference_attention(q, k_cache, v_cache, block_table, cu_seqlens, seqused_k, scale):
    """Per-request causal attention in float32 from a paged cache (the test oracle).

    Query row ``i`` of a request with ``n`` query rows and ``s`` keys sees keys ``< s - n + i + 1``.
    """
    import torch

    outs = []
    hq = q.shape[1]
    hkv = k_cache.shape[2]
    page = k_cache.shape[1]
    cu = cu_seqlens.tolist()
    sk = seqused_k.tolist()
    bt = block_table.cpu()
    for i in range(len(cu) - 1):
        n = cu[i + 1] - cu[i]
        if n == 0:
            continue
        s = sk[i]
        nb = -(-s // page)
        pages = bt[i, :nb].to(torch.long).to(k_cache.device)
        kk = k_cache.index_select(0, pages).reshape(-1, hkv, k_cache.shape[3])[:s].float()
        vv = v_cache.index_select(0, pages).reshape(-1, hkv, v_cache.shape[3])[:s].float()
        kk = kk.repeat_interleave(hq // hkv, dim=1)
        vv = vv.repeat_interleave(hq // hkv, dim=1)
        qq = q[cu[i]:cu[i + 1]].float()
        scores = torch.einsum("qhd,khd->hqk", qq, kk) * scale
        limit = (s - n) + torch.arange(n, device=q.device) + 1
        mask = torch.arange(s, device=q.device)[None, :] < limit[:, None]
        scores = scores.masked_fill(~mask[None], float("-inf"))
        outs.append(torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), vv))
    return torch.cat(outs, 0) if outs else q.new_zeros((0,) + tuple(q.shape[1:])).float()


def _compare(kernels, q, k_cache, v_cache, widths, kv_lens, width, *, span: int, page_size: int,
             max_seqlen_k: int) -> dict[str, Any]:
    import torch

    dev = q.device
    w = np.asarray(widths, dtype=np.int64)
    kv = np.asarray(kv_lens, dtype=np.int64)
    bs = len(w)
    total = int(w.sum())
    d = q.shape[2]
    scale = 1.0 / math.sqrt(d)
    blocks = (kv + np.maximum(w, width) + page_size - 1) // page_size
    max_blocks = max_seqlen_k // page_size
    starts = torch.as_tensor(layout_starts(blocks, span), dtype=torch.int32, device=dev)
    bt = starts.view(-1, 1) + torch.arange(max_blocks, dtype=torch.int32, device=dev).view(1, -1)

    def i32(a):
        return torch.as_tensor(np.asarray(a), dtype=torch.int32, device=dev)

    cu_ok = i32(np.concatenate([[0], np.cumsum(w)]))
    sk_ok = i32(kv + w)
    out_ok = torch.full_like(q, float("nan"))
    kernels.unified_attention(q, k_cache, v_cache, out_ok, cu_ok, int(w.max()), sk_ok, max_seqlen_k,
                              scale, True, (-1, -1), bt, 0, None, None, None)
    cu_bad = i32(np.arange(0, (bs + 1) * width, width))
    sk_bad = i32(kv + width)
    out_bad = torch.full_like(q, float("nan"))
    kernels.unified_attention(q, k_cache, v_cache, out_bad, cu_bad, int(width), sk_bad, max_seqlen_k,
                              scale, True, (-1, -1), bt, 0, None, None, None)
    ref = reference_attention(q, k_cache, v_cache, bt, cu_ok.cpu(), sk_ok.cpu(), scale)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    ok = out_ok.float()
    bad = out_bad.float()
    computed = torch.isfinite(bad).view(total, -1).all(dim=1)
    err_rows = (bad - ok).abs().view(total, -1).amax(dim=1)
    err_rows = torch.where(computed, err_rows, torch.zeros_like(err_rows))
    v = md.misattribution(w, width, kv)
    req_of_row = np.repeat(np.arange(bs), w)
    per_req = []
    for i in range(bs):
        rows = torch.as_tensor(np.nonzero(req_of_row == i)[0], device=dev)
        per_req.append(float(err_rows.index_select(0, rows).max()) if len(rows) else 0.0)
    ok_vs_ref = float((ok - ref).abs().max()) if total else 0.0
    bad_vs_ref = float(((bad - ref).abs().view(total, -1).amax(dim=1))[computed].max()) if bool(computed.any()) else 0.0
    return {
        "bs": bs,
        "widths": w.tolist(),
        "kv_lens": kv.tolist(),
        "tokens": total,
        "derived_width": int(width),
        "mixed": v is not None,
        "misattributed_rows": 0 if v is None else v.misattributed_rows,
        "misattributed_frac": 0.0 if v is None else v.misattributed_rows / total,
        "misplaced_rows": 0 if v is None else v.misplaced_rows,
        "wrong_rows_frac": 0.0 if v is None else (v.misattributed_rows + v.misplaced_rows) / total,
        "rows_not_computed": int((~computed).sum()),
        "max_abs_error": float(err_rows.max()) if total else 0.0,
        "rows_with_error_over_1e-2": int((err_rows > 1e-2).sum()),
        "per_request_max_error": per_req,
        "max_abs_error_exact_vs_reference": ok_vs_ref,
        "max_abs_error_derived_vs_reference": bad_vs_ref,
        "output_scale": float(ref.abs().max()) if total else 0.0,
    }


def attention_error(runner: Any, widths: Sequence[int], kv_lens: Sequence[int], width: int) -> dict[str, Any]:
    """Compare exact and derived metadata on a live executor's KV pool (layer 0's cache and head shape)."""
    import torch

    g = runner.geometry
    total = int(np.sum(widths))
    gen = torch.Generator(device=runner.device).manual_seed(total)
    q = torch.empty((total, g["heads"], g["head_dim"]), device=runner.device, dtype=runner.dtype)
    q.normal_(0.0, 1.0, generator=gen)
    kc, vc = runner.pool.view(0)
    return _compare(runner.kernels, q, kc, vc, widths, kv_lens, width, span=runner.pool.span,
                    page_size=runner.page_size, max_seqlen_k=runner.max_seqlen_k)


def uniformity_check(model: Any = "llama-3.1-8b", *, widths: Sequence[int], kv_lens: Sequence[int],
                     page_size: int = 16, seed: int = 0, dtype: str | None = None,
                     max_context: int | None = None, device: Any = None) -> dict[str, Any]:
    """Run one mixed batch with unsafe-derived and with exact metadata on the GPU; report the
    maximum output error and the fraction of query rows attributed to the wrong request.

    ``model``: a ``ModelShape`` or preset (its per-GPU query/KV heads and head size are used).
    ``widths``/``kv_lens``: the batch (``kv_lens``: tokens cached before the verify).  Returns a
    dict (keys documented in docs/aiter.md) with ``max_abs_error`` (derived vs exact, over rows
    both computed), ``misattributed_rows``/``misattributed_frac``, ``rows_not_computed`` and the
    two launches' errors against a float32 reference.
    """
    import torch

    from backends.aiter import bridge
    from backends.aiter.model import dense_shape

    rt = bridge.runtime()
    if rt == "none":
        bridge.require_gpu()
    if not hasattr(model, "layers"):
        from backends.models import load_model

        model = load_model(model)
    if getattr(model, "attention", "mha") == "mla":
        from traces.errors import SpecschedError

        raise SpecschedError("the uniformity check runs the non-MLA unified path; MLA fixes the "
                             "width at start-up (see verify-metadata --mla)")
    kernels = bridge.load_kernels()
    dev = torch.device(device) if device is not None else (
        torch.device("cpu") if rt == "interpreter" else torch.device("cuda", torch.cuda.current_device()))
    dt = getattr(torch, dtype or ("float16" if dev.type == "cpu" else "bfloat16"))
    w = md._int_list("widths", list(widths), 1)
    kv = md._int_list("kv_lens", list(kv_lens), 1)
    if len(w) != len(kv) or not w:
        from traces.errors import SpecschedError

        raise SpecschedError("uniformity check: give one KV length per width (and at least one)")
    width = sum(w) // len(w)
    g = dense_shape(model)
    ctx = int(max_context or max(md.DEFAULT_MAX_CONTEXT if dev.type == "cuda" else 0,
                                 max(k + x for k, x in zip(kv, w)) + page_size))
    max_blocks = md.max_blocks_per_seq(ctx, page_size)
    need = int(sum(-(-(k + max(x, width)) // page_size) for k, x in zip(kv, w)))
    pages = max(need, max_blocks) + max_blocks + 1
    gen = torch.Generator(device=dev).manual_seed(int(seed))
    kc = torch.empty((pages, page_size, g["kv_heads"], g["head_dim"]), device=dev, dtype=dt).normal_(0, 1, generator=gen)
    vc = torch.empty_like(kc).normal_(0, 1, generator=gen)
    q = torch.empty((sum(w), g["heads"], g["head_dim"]), device=dev, dtype=dt).normal_(0, 1, generator=gen)
    res = _compare(kernels, q, kc, vc, w, kv, width, span=pages - max_blocks + 1,
                   page_size=page_size, max_seqlen_k=max_blocks * page_size)
    res.update({"model": getattr(model, "name", str(model)), "heads": g["heads"],
                "kv_heads": g["kv_heads"], "head_dim": g["head_dim"], "dtype": str(dt).replace("torch.", ""),
                "device": str(dev), "runtime": rt, "kernel": kernels.modules["attention"]})
    return res
