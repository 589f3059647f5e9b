"""An independent estimate of the live MLA executor's step time from its kernels' measured rates.

The executor's forward pass (:mod:`backends.aiter.mla_model`) is written out here as the list of
kernels it launches, each with the bytes it moves and the FLOPs it computes, from the model's
shapes alone (``backends.models``, :func:`backends.aiter.mla.mla_geometry`).  A step's time is

    sum over kernels of  floor + max(bytes / bandwidth[class], flops / flop_rate[class])

with the rates of each kernel class measured in isolation by ``benchmarks/bench_aiter_rates.py``
(a JSON file, :func:`load_rates`).  Nothing is fitted to a profile: the profile is only what the
estimate is compared with (:func:`compare_rows`, ``benchmarks/aiter_estimate_vs_profile.py``).

Kernel classes and their rates (keys of the rates file's ``"rates"`` object):

* ``gemm``: cuBLAS through ``torch`` (linear layers, the absorbed ``W_UK``/``W_UV`` batched
  GEMMs, the LM head): ``gemm_bw`` (weight streaming at small M) and ``gemm_flops`` (large M).
  Bytes: weights + input + output; FLOPs ``2 M K N``.
* ``moe``: AITER's Triton ``fused_moe`` (gate/up, then down): ``moe_bw`` and
  ``moe_flops[tile]`` (the tile AITER's table picks for the token count: ``small_M`` below 256
  rows, ``medium_M`` below 1024, ``large_M`` from 1024).  Bytes: the weights of the experts the
  batch touches -- ``E (1 - (1 - k/E)^T)`` of them under the executor's uniform routing -- plus
  activations; FLOPs ``2 T k K N``.
* ``mla_decode``: stage 1 of AITER's Triton MLA decode: ``mla_decode_bw``, ``mla_decode_flops``.
  Bytes: each decode row's keys (``kv + j + 1`` latent rows of ``kv_lora + rope`` values for
  row ``j`` of a request: the latent cache is read once per row, docs/aiter_mla.md), their
  int32 indices, the queries and the split partials; FLOPs ``2 H (2 kv_lora + rope)`` per key.
* ``flash``: the prefill's varlen flash attention: ``flash_flops``; FLOPs
  ``2 H (qk + v)`` per causal (query, key) pair.
* ``elementwise``: norms, rope + latent write, SiLU-and-mul, copies, fills, the metadata and
  routing kernels: ``elementwise_bw``.

``floor`` is ``launch_floor_graph_s`` for a graph replay and ``launch_floor_eager_s`` for an
eager (queued) pass: the time one kernel takes in a chain of tiny kernels.

Launch-size-dependent rates (:mod:`backends.aiter.rate_curves`): with ``mla_decode_curve``
(``flash_curve``) in the file, the MLA decode's time is its bytes over the curve's bandwidth at
the launch's programs and mean keys per row (the flash's, its FLOPs over the curve's rate at its
query tokens and prefix per request), with no second bound: a point is the kernel's whole time.
From the file's ``moe_bw`` and ``gemm_bw`` points, the fused MoE's bandwidth follows its rows
and a GEMM's its weight bytes, the FLOP bound kept.  Without curves: the single rates above.

Imports neither torch nor triton (numpy only): it runs anywhere.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from backends.aiter.mla import decode_splits, mla_geometry, mla_kernel_width
from backends.aiter.mla_kernels import decode_programs
from backends.aiter.moe import MOE_TILES, moe_config, moe_tile
from backends.aiter.rate_curves import (DECODE_CURVE, FLASH_CURVE, GEMM_CURVE, MOE_CURVE,
                                        check_curves, decode_bandwidth, flash_rate,
                                        gemm_bandwidth, moe_bandwidth, point_curves)
from traces.errors import SpecschedError

__all__ = ["Kernel", "RATE_KEYS", "MOE_TILES", "load_rates", "check_rates", "decode_kernels",
           "prefill_kernels", "step_kernels", "kernel_time", "step_time", "expected_experts",
           "compare_rows", "WITHIN", "moe_tile", "breakdown", "summarize"]

#: the agreement the issue asks for: |measured / estimate - 1| <= 15%
WITHIN = 0.15

#: scalar rates a rates file must hold (``moe_flops`` is an object by tile)
RATE_KEYS = ("gemm_flops", "gemm_bw", "moe_bw", "mla_decode_bw", "mla_decode_flops",
             "elementwise_bw", "flash_flops", "launch_floor_graph_s", "launch_floor_eager_s")

BF16 = 2  # bytes per activation, weight and latent value


@dataclass(frozen=True)
class Kernel:
    """One kernel launch (``count`` identical ones) of a forward pass; ``programs`` and
    ``keys_per_row`` describe an MLA decode launch, ``q`` and ``prefix`` (per request, means) a
    flash launch, ``rows`` a fused MoE's, ``weights`` a GEMM's weight bytes (the coordinates of
    :mod:`backends.aiter.rate_curves`)."""

    name: str
    cls: str
    bytes: float
    flops: float = 0.0
    count: int = 1
    tile: str = ""
    programs: int = 0
    keys_per_row: float = 0.0
    q: float = 0.0
    prefix: float = 0.0
    rows: int = 0
    weights: float = 0.0


def check_rates(rates: dict, where: str = "rates") -> dict:
    """``rates`` (the ``"rates"`` object of a rates file) checked: every key present, positive and
    finite, and the optional curves well formed.  Raises :class:`SpecschedError` naming ``where``
    and the key."""
    if not isinstance(rates, dict):
        raise SpecschedError(f"{where}: 'rates' must be an object")
    for k in RATE_KEYS:
        v = rates.get(k)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise SpecschedError(f"{where}: rates.{k} must be a positive number (got {v!r})")
    mf = rates.get("moe_flops")
    if not isinstance(mf, dict):
        raise SpecschedError(f"{where}: rates.moe_flops must be an object by tile "
                             f"({', '.join(MOE_TILES)})")
    for t in MOE_TILES:
        v = mf.get(t)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise SpecschedError(f"{where}: rates.moe_flops.{t} must be a positive number "
                                 f"(got {v!r})")
    check_curves(rates, where)
    return rates


def load_rates(path: str | Path) -> dict:
    """The ``"rates"`` object of a rates JSON written by ``benchmarks/bench_aiter_rates.py``."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        raise SpecschedError(f"{p}: no such rates file") from None
    except (OSError, ValueError) as exc:
        raise SpecschedError(f"{p}: not a rates JSON file ({exc})") from None
    if not isinstance(doc, dict) or "rates" not in doc:
        raise SpecschedError(f"{p}: no 'rates' object (write it with "
                             f"benchmarks/bench_aiter_rates.py --json)")
    rates = doc["rates"]
    if isinstance(rates, dict):  # the moe_bw / gemm_bw curves from the points, unless given
        rates = {**point_curves(doc.get("points"), str(p)), **rates}
    return check_rates(rates, str(p))


# ---- the model's arithmetic ----------------------------------------------------------------------
def expected_experts(tokens: float, experts: int, top_k: int) -> float:
    """Distinct experts ``tokens`` rows touch when each row draws ``top_k`` of ``experts``
    uniformly without replacement (the executor's default routing): ``E (1 - (1 - k/E)^T)``."""
    if tokens <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - top_k / experts) ** tokens)


def _gemm(name: str, m: int, k: int, n: int, count: int = 1) -> Kernel:
    w = k * n * BF16
    return Kernel(name, "gemm", w + m * (k + n) * BF16, 2.0 * m * k * n, count, weights=w)


def _ew(name: str, nbytes: float, count: int = 1) -> Kernel:
    return Kernel(name, "elementwise", float(nbytes), 0.0, count)


def _bmm(name: str, rows: int, heads: int, k: int, n: int) -> Kernel:
    """Per-head ``[rows, k] @ [k, n]`` (``torch.bmm``): weights ``H k n``."""
    return Kernel(name, "gemm", (heads * k * n + rows * heads * (k + n)) * BF16,
                  2.0 * rows * heads * k * n, weights=heads * k * n * BF16)


def _mlp(g: dict, T: int, *, moe: bool) -> list[Kernel]:
    h = g["hidden"]
    if not moe:
        i = g["intermediate"]
        return [_gemm("mlp gate/up", T, h, 2 * i), _ew("silu-and-mul", T * 3 * i * BF16),
                _gemm("mlp down", T, i, h)]
    E, k, I, si = g["experts"], g["experts_per_token"], g["moe_intermediate"], g["shared_intermediate"]
    D = expected_experts(T, E, k)
    tile = moe_tile(T)
    pairs = T * k
    out = [
        _gemm("router", T, h, E),
        _ew("router steering bias add", 3 * T * E * BF16),
        _ew("router logits to float32", T * E * (BF16 + 4)),
        _ew("softmax", 2 * T * E * 4),
        _ew("top-k", T * E * 4 + pairs * 12),
        # moe_align_block_size: two zero fills and four stages; the sorted-id fill
        _ew("moe align (fills, 4 stages)", (E + 1) * E * 4 * 3 + pairs * 12, count=6),
        _ew("moe sorted ids fill", (pairs + E * (moe_config(T)["BLOCK_SIZE_M"] - 1)) * 4),
        Kernel("fused moe gate/up", "moe", D * 2 * I * h * BF16 + (T * h + pairs * 2 * I) * BF16,
               2.0 * pairs * h * 2 * I, 1, tile, rows=T),
        _ew("silu-and-mul (routed)", pairs * 3 * I * BF16),
        Kernel("fused moe down", "moe", D * h * I * BF16 + (pairs * I + pairs * h) * BF16,
               2.0 * pairs * I * h, 1, tile, rows=T),
        _ew("sum over top-k", (pairs + T) * h * BF16),
    ]
    if si:
        out += [_gemm("shared gate/up", T, h, 2 * si), _ew("silu-and-mul (shared)", T * 3 * si * BF16),
                _gemm("shared down", T, si, h), _ew("routed + shared", 3 * T * h * BF16)]
    return out


def _front(g: dict, T: int) -> list[Kernel]:
    """The pass's first kernels: metadata expansion, embedding gather (and the MTP front)."""
    h = g["hidden"]
    out = [_ew("metadata expansion", T * 24), _ew("embedding gather", 2 * T * h * BF16)]
    if g["fusion_in"]:
        out += [_ew("MTP norms", 2 * T * h * BF16, count=2),
                _ew("MTP concat", 4 * T * h * BF16), _gemm("eh_proj", T, g["fusion_in"], h)]
    return out


def _layer_head(g: dict, T: int, first: bool) -> list[Kernel]:
    h, H = g["hidden"], g["heads"]
    lora, rope, nope = g["kv_lora_rank"], g["qk_rope"], g["qk_nope"]
    return [_ew("rmsnorm" if first else "add + rmsnorm", (2 if first else 4) * T * h * BF16),
            _gemm("q proj", T, h, H * (nope + rope)), _gemm("kv_a proj", T, h, lora + rope),
            _ew("kv_a rmsnorm", 2 * T * lora * BF16)]


def _tail(g: dict, T: int, logits_rows: int) -> list[Kernel]:
    h = g["hidden"]
    out = [_ew("final add + rmsnorm", 4 * T * h * BF16)]
    if logits_rows != T:
        out.append(_ew("logits rows gather", 2 * logits_rows * h * BF16))
    out.append(_gemm("LM head", logits_rows, h, g["vocab"]))
    return out


def decode_kernels(g: dict, kv_lens: Sequence[int], width: int, *, logits_rows: int) -> list[Kernel]:
    """The kernels of one verify / draft / draft-extend forward: ``width`` decode rows per request
    (already the MLA kernel's width), request ``i`` with ``kv_lens[i]`` cached tokens; row ``j``
    reads ``kv + j + 1`` latent rows.  ``g``: :func:`mla_geometry`."""
    kv = np.asarray(kv_lens, dtype=np.int64)
    bs, w = len(kv), int(width)
    T = bs * w
    keys = int(np.sum(w * kv + w * (w + 1) // 2))
    h, H = g["hidden"], g["heads"]
    lora, rope, nope, v = g["kv_lora_rank"], g["qk_rope"], g["qk_nope"], g["v_head"]
    lat = lora + rope
    splits = decode_splits(T)
    out = _front(g, T)
    # decode-row metadata (mla_kernels.row_metadata): 3 fills, extents, cumsum, kv_indices
    out += [_ew("row metadata fills", T * 4, count=3), _ew("row extents", T * 8 + bs * 12),
            _ew("kv_indptr cumsum", T * 8), _ew("kv_indices", keys * 4 + keys / 4)]
    for i in range(g["layers"]):
        out += _layer_head(g, T, i == 0)
        out += [
            _bmm("q_nope @ W_UK", T, H, nope, lora),
            _ew("rope + latent write", 2 * (T * H * lat + T * lat) * BF16),
            Kernel("MLA decode stage 1", "mla_decode",
                   keys * (lat * BF16 + 4) + T * H * lat * BF16 + T * H * splits * (lora + 1) * 4,
                   2.0 * H * (lat + lora) * keys, programs=decode_programs(T, H),
                   keys_per_row=keys / T),
            _ew("MLA decode stage 2", T * H * splits * (lora + 1) * 4 + T * H * lora * BF16),
            _bmm("o_lat @ W_UV", T, H, lora, v),
            _ew("head-major copy", 2 * T * H * v * BF16),
            _gemm("o proj", T, H * v, h),
            _ew("add + rmsnorm", 4 * T * h * BF16),
        ]
        out += _mlp(g, T, moe=i >= g["dense_layers"])
    return out + _tail(g, T, logits_rows)


def prefill_kernels(g: dict, tokens: Sequence[int], prefix: Sequence[int]) -> list[Kernel]:
    """The kernels of one prefill forward (not absorbed: ``kv_b`` over every key, varlen flash
    attention, logits of each request's last token)."""
    t = np.asarray(tokens, dtype=np.int64)
    p = np.asarray(prefix, dtype=np.int64)
    T, bs = int(t.sum()), len(t)
    has_prefix = bool(np.any(p > 0))
    nk = int((t + p).sum()) if has_prefix else T
    pairs = float(np.sum(t * p + t * (t + 1) // 2))
    h, H = g["hidden"], g["heads"]
    lora, rope, nope, v = g["kv_lora_rank"], g["qk_rope"], g["qk_nope"], g["v_head"]
    qk = nope + rope
    out = _front(g, T)
    for i in range(g["layers"]):
        out += _layer_head(g, T, i == 0)
        out.append(_ew("rope + latent write", (2 * T * H * qk + 2 * T * (lora + rope) + T * rope) * BF16))
        if has_prefix:
            # slot arithmetic over every key (6 int64 ops), then the latent gather
            out += [_ew("prefix slot arithmetic", nk * 8 * 3, count=6),
                    _ew("prefix latent gather", 2 * nk * (lora + rope) * BF16)]
        out += [
            _gemm("kv_b proj", nk, lora, H * (nope + v)),
            _ew("k concat", nk * (H * (qk + nope) + rope) * BF16),
            _ew("flash output fills", T * H * (v * BF16 + 4), count=2),
            Kernel("flash attention", "flash",
                   (T * H * qk + nk * H * (qk + v) + T * H * v) * BF16, 2.0 * H * (qk + v) * pairs,
                   q=T / bs, prefix=float(p.sum()) / bs),
            _gemm("o proj", T, H * v, h),
            _ew("add + rmsnorm", 4 * T * h * BF16),
        ]
        out += _mlp(g, T, moe=i >= g["dense_layers"])
    return out + _tail(g, T, bs)


def step_kernels(model: Any, kind: str, *, bs: int, width: int, kv_len: int,
                 tokens: int) -> list[Kernel]:
    """The kernels of one profile row's pass (``kind`` ``verify``, ``draft``, ``draft_extend``,
    ``prefill``; the row's columns as in docs/ARCHITECTURE.md: ``bs`` launched, ``kv_len`` per
    request, ``tokens`` prompt tokens for a prefill).  A verify or draft-extend width runs at the
    MLA kernels' width (3 as 4)."""
    if kind == "prefill":
        per, rest = divmod(int(tokens), int(bs))
        t = [per + (1 if i < rest else 0) for i in range(int(bs))]
        return prefill_kernels(mla_geometry(model), t, [int(kv_len)] * int(bs))
    kv = [int(kv_len)] * int(bs)
    if kind == "verify":
        w = mla_kernel_width(int(width))
        return decode_kernels(mla_geometry(model), kv, w, logits_rows=int(bs) * w)
    draft = mla_geometry(model.draft)
    if kind == "draft":
        return decode_kernels(draft, kv, 1, logits_rows=int(bs))
    if kind == "draft_extend":
        w = mla_kernel_width(int(width), "draft-extend")
        return decode_kernels(draft, kv, w, logits_rows=int(bs))
    raise SpecschedError(f"unknown pass kind {kind!r} (verify, draft, draft_extend, prefill)")


def kernel_time(k: Kernel, rates: dict, *, graph: bool) -> float:
    """``count x (floor + max(bytes / bandwidth, flops / flop rate))`` for ``k``'s class, the
    bandwidth of a GEMM (fused MoE) read off its curve at its weight bytes (rows) when ``rates``
    has one; an MLA decode (flash) kernel with a curve: ``count x (floor + bytes / curve
    bandwidth)`` (``flops / curve FLOP rate``) at its launch (:mod:`backends.aiter.rate_curves`)."""
    floor = rates["launch_floor_graph_s" if graph else "launch_floor_eager_s"]
    if k.cls == "gemm":
        bw = gemm_bandwidth(rates[GEMM_CURVE], k.weights) if GEMM_CURVE in rates else \
            rates["gemm_bw"]
        t = max(k.bytes / bw, k.flops / rates["gemm_flops"])
    elif k.cls == "moe":
        bw = moe_bandwidth(rates[MOE_CURVE], k.rows) if MOE_CURVE in rates else rates["moe_bw"]
        t = max(k.bytes / bw, k.flops / rates["moe_flops"][k.tile])
    elif k.cls == "mla_decode" and DECODE_CURVE in rates:
        t = k.bytes / decode_bandwidth(rates[DECODE_CURVE], k.programs, k.keys_per_row)
    elif k.cls == "mla_decode":
        t = max(k.bytes / rates["mla_decode_bw"], k.flops / rates["mla_decode_flops"])
    elif k.cls == "flash" and FLASH_CURVE in rates:
        t = k.flops / flash_rate(rates[FLASH_CURVE], k.q, k.prefix)
    elif k.cls == "flash":
        t = max(k.bytes / rates["elementwise_bw"], k.flops / rates["flash_flops"])
    elif k.cls == "elementwise":
        t = k.bytes / rates["elementwise_bw"]
    else:
        raise ValueError(f"unknown kernel class {k.cls!r}")
    return k.count * (floor + t)


def step_time(kernels: Iterable[Kernel], rates: dict, *, graph: bool) -> float:
    """The estimated GPU time of a pass: the sum of :func:`kernel_time` over its kernels."""
    return float(sum(kernel_time(k, rates, graph=graph) for k in kernels))


def breakdown(kernels: Iterable[Kernel], rates: dict, *, graph: bool) -> dict[str, float]:
    """Seconds by kernel class, and ``floor`` (the launches' share)."""
    out: dict[str, float] = {"floor": 0.0}
    floor = rates["launch_floor_graph_s" if graph else "launch_floor_eager_s"]
    for k in kernels:
        t = kernel_time(k, rates, graph=graph)
        out["floor"] += k.count * floor
        out[k.cls] = out.get(k.cls, 0.0) + t - k.count * floor
    return out


def compare_rows(model: Any, rows: Sequence[dict], rates: dict) -> list[dict]:
    """Each profile row (dicts with the profile's columns) with its estimate and
    ``ratio = latency_s / estimate_s``.  The rows' ``latency_s`` includes the modelled
    all-reduces for tp > 1; MLA models run at tp 1, where there are none."""
    out = []
    cache: dict[tuple, list[Kernel]] = {}
    for r in rows:
        key = (r["kind"], int(r["bs"]), int(r["width"]), int(r["kv_len"]), int(r["tokens"]))
        ks = cache.get(key)
        if ks is None:
            ks = cache[key] = step_kernels(model, r["kind"], bs=key[1], width=key[2],
                                           kv_len=key[3], tokens=key[4])
        est = step_time(ks, rates, graph=bool(r["graph"]))
        out.append({**{c: r[c] for c in ("kind", "graph", "bs", "width", "kv_len", "tokens",
                                           "latency_s")},
                    "split": r.get("split") or "grid", "estimate_s": est,
                    "ratio": float(r["latency_s"]) / est,
                    "kernels": int(sum(k.count for k in ks))})
    return out


def summarize(compared: Sequence[dict], within: float = WITHIN) -> dict:
    """Per pass group (kind, graph) and overall: rows, the median / min / max of
    ``measured / estimate`` and the share of rows within ``within`` of the estimate."""
    def stats(rs: list[dict]) -> dict:
        r = np.array([x["ratio"] for x in rs], dtype=np.float64)
        return {"rows": int(len(r)), "median_ratio": float(np.median(r)),
                "min_ratio": float(r.min()), "max_ratio": float(r.max()),
                "share_within": float(np.mean(np.abs(r - 1.0) <= within))}

    groups: dict[str, list[dict]] = {}
    for x in compared:
        groups.setdefault(f"{x['kind']} {'graph' if x['graph'] else 'eager'}", []).append(x)
    return {"within": within, "all": stats(list(compared)) if compared else None,
            "groups": {k: stats(v) for k, v in sorted(groups.items())}}
