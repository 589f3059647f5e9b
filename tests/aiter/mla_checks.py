"""Shared by the CPU (Triton interpreter) and GPU MLA/MoE tests: run one layer's MLA attention or
MoE through the runner's real metadata path and compare it with the float32 references of
``backends.aiter.mla_reference``.  Each function returns plain numbers (JSON-able)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

TINY = dict(name="tiny-mla", layers=2, hidden=64, heads=4, kv_heads=4, head_dim=32,
            intermediate=128, vocab=96, attention="mla", kv_lora_rank=64, q_lora_rank=0,
            qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, experts=8,
            experts_per_token=2, shared_experts=1, moe_intermediate=32, dense_layers=1)


#: a tiny DeepSeek-V3-like shard: FP8 block-scaled weights (every GEMM input width a multiple of
#: 128), q LoRA, tp 2 = ep 2 (8 routed experts, 4 on this GPU, 2 per token), one dense layer
TINY_V3 = dict(name="tiny-v3", layers=2, hidden=256, heads=8, kv_heads=8, head_dim=32,
               intermediate=512, vocab=96, attention="mla", kv_lora_rank=64, q_lora_rank=128,
               qk_rope_head_dim=16, qk_nope_head_dim=32, v_head_dim=32, experts=8,
               experts_per_token=2, shared_experts=1, moe_intermediate=256, dense_layers=1, tp=2,
               dtype_bytes=1)


def fp8_gemm_case(m: int, n: int, k: int, device: str = "cpu", seed: int = 3) -> dict:
    """AITER's block-scale GEMM on activations quantised by torch (per row and 128 values) and
    random FP8 block weights, against the dequantised product in float32."""
    import torch

    from backends.aiter import fp8
    from backends.aiter.mla_reference import fp8_roundtrip

    g = torch.Generator(device=device).manual_seed(seed)
    w_q, w_s = fp8.random_block_weight((), n, k, device=device, generator=g)
    x = torch.randn((m, k), generator=g, device=device)
    grp = x.view(m, k // fp8.BLOCK, fp8.BLOCK)
    x_s = grp.abs().amax(-1).clamp_min(1e-10) / fp8.FP8_MAX
    x_q = (grp / x_s[..., None]).to(fp8.fp8_dtype()).view(m, k)
    dtype = torch.float16 if device == "cpu" else torch.bfloat16
    out = torch.empty((m, n), dtype=dtype, device=device)
    fp8.blockscale_gemm(x_q, x_s, w_q, w_s, out)
    ref = fp8.dequant_act(x_q, x_s) @ fp8.dequant_weight(w_q, w_s).t()
    # the kernel's own activation quantisation: scales exact; values as torch's cast
    k_q, k_s = fp8.quant_groups(x.to(dtype))
    want = fp8_roundtrip(x.to(dtype))
    same = (fp8.dequant_act(k_q, k_s) == want)
    return {"max_abs_error": float((out.float() - ref).abs().max()),
            "output_scale": float(ref.abs().max()),
            "scale_error": float((k_s - x.to(dtype).float().view(m, k // 128, 128).abs()
                                  .amax(-1) / fp8.FP8_MAX).abs().max()),
            "quant_same_frac": float(same.float().mean()),
            "w_scale_shape": list(w_s.shape)}


def tiny_runner(device: str = "cpu", dtype: str = "float16", sms: int = 4, **kw: Any):
    """An :class:`MLARunner` of a 2-layer MLA model (by default tiny: one dense layer, one MoE
    layer of 8 experts; ``shape=`` overrides ``ModelShape`` fields)."""
    from backends.aiter.mla_runner import MLARunner
    from backends.models import ModelShape

    m = ModelShape(**{**TINY, **kw.pop("shape", {})})
    opts = {"max_context": 512, "capture_bs": [1, 2, 3, 4], "capture_widths": [1, 2, 4],
            "kv_pool_bytes": 4 << 20, **kw}
    r = MLARunner(m, device=device, dtype=dtype, **opts)
    r.target.sms = sms  # KV splits of the decode (2 at 4 SMs): fewer interpreted programs
    return r


def _inputs(r, rows: int, seed: int):
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn((rows, r.geometry["hidden"]), generator=g)
    return x.to(device=r.device, dtype=r.dtype)


def _err(out, ref) -> tuple[float, float]:
    return float((out.float() - ref.to(out.device)).abs().max()), float(ref.abs().max())


def decode_case(r, widths: Sequence[int], kv_lens: Sequence[int], launch_width: int,
                layer: int = 1, seed: int = 0) -> dict:
    """A uniform verify launch at ``launch_width`` whose requests have ``widths`` real rows."""
    launch, key = r.verify_launch(np.asarray(widths), np.asarray(kv_lens), mode="uniform",
                                  padded_bs=len(widths), launch_width=launch_width)
    return _rows_case(r, launch, key, r.target, widths, kv_lens, layer, seed)


def extend_case(r, kv_lens: Sequence[int], width: int, padded_bs: int | None = None,
                seed: int = 5) -> dict:
    """A draft-extend launch at ``width`` through the draft (MTP) layer's attention: every row of
    the real requests (``kernel width`` rows each) against the reference."""
    bs = len(kv_lens)
    launch, key = r.extend_launch(np.asarray(kv_lens), padded_bs or bs, width)
    return _rows_case(r, launch, key, r.draft, [key[2]] * bs, kv_lens, 0, seed)


def _rows_case(r, launch, key, model, widths, kv_lens, layer: int, seed: int) -> dict:
    """Stage ``launch``, run ``model``'s layer ``layer`` attention on its decode rows and compare
    the real requests' first ``widths[i]`` rows (row ``j`` of request ``i`` sees ``kv_i + j + 1``
    keys) and the latents they wrote with the float32 references."""
    import torch

    from backends.aiter.mla_reference import key_rows, mla_new_latents, mla_reference
    from backends.aiter.runner import expand_metadata

    bs = len(widths)
    st = r._new_static(key)
    r._stage(st, launch)
    expand_metadata(st.starts, st.seq_lens, st.row_req, st.row_off, st.block_table, st.positions,
                    st.slots, page_size=r.page_size)
    a = r._attn_inputs(st)
    kw = key[2]
    x = _inputs(r, st.rows, seed)
    attn = model.layers[layer].attn
    before = attn.cache.clone()
    rm = model._rows(x, a)
    out = attn.decode(x, a, rm, r.rope, model._norm)
    bt = st.block_table
    sel, keys, ext_want, pos_want = [], [], [], []
    for i in range(bs):
        for j in range(int(widths[i])):
            sel.append(i * kw + j)
            keys.append(key_rows(bt, r.page_size, i, int(kv_lens[i]) + j + 1))
            ext_want.append(int(kv_lens[i]) + j + 1)
            pos_want.append(int(kv_lens[i]) + j)
    sel_t = torch.as_tensor(sel, device=x.device)
    pos = st.positions[sel_t]
    slots = st.slots[sel_t]
    ref = mla_reference(attn, x[sel_t], pos, slots, before, keys, r.rope.cos, r.rope.sin,
                        model.eps)
    err, scale = _err(out[sel_t], ref)
    written = attn.cache.view(-1, attn.cache.shape[-1])[slots.long()]
    lat = mla_new_latents(attn, x[sel_t], pos, r.rope.cos, r.rope.sin, model.eps)
    lat_err, lat_scale = _err(written, lat)
    return {"key": list(key), "rows": st.rows, "real_rows": len(sel), "splits": rm.splits,
            "max_abs_error": err, "output_scale": scale, "latent_error": lat_err,
            "latent_scale": lat_scale,
            "extents_ok": rm.ext[sel_t].cpu().tolist() == ext_want,
            "positions_ok": pos.cpu().tolist() == pos_want,
            "indptr_total": int(rm.kv_indptr.cpu()[-1])}


def prefill_case(r, tokens: Sequence[int], prefix: Sequence[int], layer: int = 1,
                 seed: int = 1) -> dict:
    """One prefill forward of layer ``layer``'s attention (prefix latents gathered from the cache)."""
    from backends.aiter.mla import ExtendPlan
    from backends.aiter.mla_reference import key_rows, mla_reference
    from backends.aiter.runner import Launch, _Static, expand_metadata

    t = np.asarray(tokens, dtype=np.int64)
    p = np.asarray(prefix, dtype=np.int64)
    rows = int(t.sum())
    st = _Static(r, len(t), rows, model="target", logits=False)
    st.max_seqlen_q = int(t.max())
    r._stage(st, Launch(t, t, p, rows, len(t), int(t.max())))
    expand_metadata(st.starts, st.seq_lens, st.row_req, st.row_off, st.block_table, st.positions,
                    st.slots, page_size=r.page_size)
    a = r._attn_inputs(st)
    plan = ExtendPlan.build(t, p, r.device)
    x = _inputs(r, rows, seed)
    attn = r.target.layers[layer].attn
    before = attn.cache.clone()
    out = attn.extend(x, a, plan, r.rope, r.target._norm, st.block_table, r.page_size)
    keys = [key_rows(st.block_table, r.page_size, i, int(p[i]) + j + 1)
            for i in range(len(t)) for j in range(int(t[i]))]
    ref = mla_reference(attn, x, st.positions, st.slots, before, keys, r.rope.cos, r.rope.sin,
                        r.target.eps)
    err, scale = _err(out, ref)
    return {"rows": rows, "prefix": bool(plan.prefix), "max_abs_error": err, "output_scale": scale}


def moe_case(r, rows: int, layer: int = 1, seed: int = 2) -> dict:
    """The MoE layer on ``rows`` random rows against the per-expert loop; the routing must be
    the planned one."""
    from backends.aiter.mla_reference import moe_reference
    from backends.aiter.moe import routing_plan

    moe = r.target.layers[layer].moe
    x = _inputs(r, rows, seed)
    weights, ids = moe.route(x)
    plan = routing_plan(rows, moe.E, moe.top_k, routing=moe.routing, skew=moe.skew, seed=moe.seed)
    routed_ok = bool(np.array_equal(np.sort(ids.cpu().numpy(), axis=1), np.sort(plan, axis=1)))
    out = moe.forward(x)
    ref = moe_reference(moe, x, weights, ids)
    err, scale = _err(out, ref)
    return {"rows": rows, "routed_as_planned": routed_ok, "max_abs_error": err,
            "output_scale": scale, "distinct_experts": int(len(np.unique(plan))),
            "weight_sum_max": float(weights.float().sum(dim=1).max())}
