"""Latency tables: forward-pass latency as a function of shape, on grids, evaluated fast.

A :class:`LatencyTable` holds one grid per kind of forward pass:

========================  ======================================================  ============
grid                      axes (in this order)                                    value
========================  ======================================================  ============
``verify_graph``          padded batch size, width (query rows per request),      seconds
                          KV length per request
``verify_eager``          batch size, width, KV length per request                seconds
``draft_graph``           padded batch size, KV length per request                seconds/pass
``draft_eager``           batch size, KV length per request                       seconds/pass
``extend_graph``          padded batch size, width (query rows per request),      seconds
                          KV length per request before the pass
``extend_eager``          batch size, width, KV length per request                seconds
``prefill``               tokens in the pass, attention-equivalent prefix         seconds
========================  ======================================================  ============

The draft-extend grids (the draft model over each request's accepted tokens after a verify,
:class:`~backends.protocol.DraftExtendBatch`) are optional: a table built without them (a
profile recorded before the pass was profiled, a hand-made table) times a draft-extend launch as
one draft-decode pass at the same batch size and KV length -- an underestimate, since the pass
computes ``width`` rows per request -- and says so in ``source["draft_extend"]`` and in
:data:`EXTEND_FALLBACK_CAVEAT`, which :meth:`TableExecutor.describe` lists among its caveats.

Evaluation is multilinear between grid points, exact on them, and beyond the grid it
extrapolates linearly from the last segment of each axis, never downwards (below the first point
it holds the first value); any evaluation outside the grid is flagged so the summary can warn.
A table may declare axes along which latency must not decrease (a profile: KV length and prefill
tokens): values along those are made monotone when the table is built, by isotonic regression
(pool-adjacent-violators, which averages a noisy pair instead of raising one to the other), so
interpolation along them is monotone.  Other axes keep what was measured: a real kernel can be
faster at width 4 than at width 3.

How a batch maps onto the axes (the same rule for every table executor, and for the engine's
compiled fast path, which calls the same functions):

- verify: width = the launch width for uniform launches, ``sum(widths) / bs`` (fractional)
  for ragged and unsafe-derived ones; KV = ``sum(kv_lens) / bs_padded`` -- padded rows carry
  SGLang's fill length, which is negligible, so this keeps the total KV read equal -- or, when
  the table carries the attention kernel's occupancy (``LatencyTable.attention``), the
  straggler-aware KV between that mean and the longest request: on AITER's 2D kernel the KV at
  which the launch's uniform latency line equals the lone-straggler form ``max(T_u(mean),
  T_0 + a x kv_max)`` (:func:`lone_straggler_kv`, when the table's model is known), otherwise
  the waves and tail rule (:func:`effective_kv`).
- draft: KV by the waves and tail rule (its 2D decode kernel included); the phase costs ``passes`` times the per-pass value.
- draft-extend: the batch's ``width`` (uniform: every request, padded ones too, holds ``width``
  rows); KV as for verify, with ``width`` query rows per request in the attention launch.
- prefill: tokens T = the pass's total; prefix = the *attention-equivalent prefix*
  ``A / T - T / 2`` with ``A = sum_i t_i (p_i + t_i / 2)`` the query-key pairs the pass attends
  (request i computes t_i tokens after p_i cached ones).  A profile measures one request per
  pass, whose pairs are ``T (p + T / 2)``; a pass of several requests attends far fewer pairs
  than one request of the same total length, and this maps it onto the single-request prefill
  with the same tokens and the same attention work.  Below the grid's first prefix (a negative
  equivalent prefix: less attention than one causal request of T tokens), latency follows the
  first segment's slope down to the no-attention cost at ``-T / 2`` (prefill attention is linear
  in the keys attended); this is a rule, not an extrapolation, and is not flagged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from backends.jit import njit
from backends.protocol import DraftBatch, DraftExtendBatch, PrefillBatch, VerifyBatch, VerifyTiming

__all__ = ["Grid", "LatencyTable", "TableExecutor", "interp2", "interp3", "interp_prefill",
           "verify_axes", "draft_axes", "extend_axes", "prefill_axes", "attention_params",
           "attention_rows", "attention_kernel", "effective_kv", "verify_kv", "lone_straggler_kv",
           "latency_at_kv0", "kv_at_latency", "table_attention", "extend_arrays",
           "EXTEND_FALLBACK_CAVEAT", "EXTEND_FALLBACK_WIDTHS", "TAIL_EXPONENT",
           "LONE_STRAGGLER_2D_S"]

#: What a table without measured draft-extend latencies says about the pass (``source`` and caveats).
EXTEND_FALLBACK_CAVEAT = ("draft-extend not measured: each draft-extend pass is timed as one "
                          "draft-decode pass at the same batch size and KV length (an "
                          "underestimate: the pass computes `width` rows per request)")
#: The width axis of a fallback draft-extend grid: both points hold the draft-decode value, so
#: every width up to the last maps to it without being flagged as outside the grid.
EXTEND_FALLBACK_WIDTHS = (1.0, 1024.0)


@dataclass(frozen=True)
class Grid:
    """Values on a rectilinear grid.  ``axes[i]`` strictly increasing float64; ``values.shape``
    equals ``tuple(len(a) for a in axes)``."""

    axes: tuple[np.ndarray, ...]
    values: np.ndarray

    @staticmethod
    def build(axes, values, *, name: str = "grid",
              monotone: tuple[int, ...] | None = None) -> "Grid":
        """Validate and store a grid; ``monotone`` lists the axes along which latency may not
        decrease (default: every axis)."""
        ax = tuple(np.ascontiguousarray(np.asarray(a, dtype=np.float64)) for a in axes)
        v = np.array(values, dtype=np.float64)
        shape = tuple(len(a) for a in ax)
        if v.shape != shape:
            raise ValueError(f"{name}: values have shape {v.shape}, axes give {shape}")
        for i, a in enumerate(ax):
            if len(a) == 0 or (len(a) > 1 and np.any(np.diff(a) <= 0)):
                raise ValueError(f"{name}: axis {i} must be non-empty and strictly increasing")
        if not np.all(np.isfinite(v)) or np.any(v <= 0):
            raise ValueError(f"{name}: latencies must be finite and > 0")
        axes_m = tuple(range(v.ndim)) if monotone is None else tuple(monotone)
        for i in axes_m:
            v = _isotonic_along(v, i)
        for i in axes_m:  # isotonic along one axis can dent another by rounding: settle it
            v = np.maximum.accumulate(v, axis=i)
        return Grid(ax, np.ascontiguousarray(v))


def _isotonic_along(v: np.ndarray, axis: int) -> np.ndarray:
    """:func:`isotonic` applied to every line along ``axis`` that is not already monotone."""
    moved = np.moveaxis(v, axis, -1).copy()
    flat = moved.reshape(-1, moved.shape[-1])
    for row in np.flatnonzero(np.any(np.diff(flat, axis=1) < 0, axis=1)):
        flat[row] = isotonic(flat[row])
    return np.moveaxis(flat.reshape(moved.shape), -1, axis)


def isotonic(y: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence closest to ``y`` in least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight]
    for x in np.asarray(y, dtype=np.float64):
        blocks.append([float(x), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2 = blocks.pop()
            m1, w1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2])
    return np.concatenate([np.full(int(w), m) for m, w in blocks])


@njit
def _locate(axis, x):
    """Segment index i and weight t with x = axis[i] + t*(axis[i+1]-axis[i]); t < 0 is held at 0,
    t > 1 extrapolates.  Returns (i, t, outside)."""
    n = axis.shape[0]
    if n == 1:
        return 0, 0.0, x != axis[0]
    if x <= axis[0]:
        return 0, 0.0, x < axis[0]
    if x >= axis[n - 1]:
        i = n - 2
        t = (x - axis[i]) / (axis[i + 1] - axis[i])
        return i, t, x > axis[n - 1]
    lo = 0
    hi = n - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if axis[mid] <= x:
            lo = mid
        else:
            hi = mid
    return lo, (x - axis[lo]) / (axis[lo + 1] - axis[lo]), False


@njit
def _lerp(a, b, t):
    """a + t (b - a); beyond the segment (t > 1) it never decreases."""
    if t <= 1.0:
        return a + t * (b - a)
    return b + (t - 1.0) * max(b - a, 0.0)


@njit
def interp2(a0, a1, v, x0, x1):
    """Bilinear interpolation (non-decreasing linear extrapolation above the grid).
    Returns (value, outside)."""
    i, t, o0 = _locate(a0, x0)
    j, u, o1 = _locate(a1, x1)
    i1 = min(i + 1, a0.shape[0] - 1)
    j1 = min(j + 1, a1.shape[0] - 1)
    r0 = _lerp(v[i, j], v[i, j1], u)
    r1 = _lerp(v[i1, j], v[i1, j1], u)
    return _lerp(r0, r1, t), (o0 or o1)


@njit
def interp3(a0, a1, a2, v, x0, x1, x2):
    """Trilinear interpolation (non-decreasing linear extrapolation above the grid).
    Returns (value, outside)."""
    i, t, o0 = _locate(a0, x0)
    j, u, o1 = _locate(a1, x1)
    k, s, o2 = _locate(a2, x2)
    i1 = min(i + 1, a0.shape[0] - 1)
    j1 = min(j + 1, a1.shape[0] - 1)
    k1 = min(k + 1, a2.shape[0] - 1)
    c00 = _lerp(v[i, j, k], v[i, j, k1], s)
    c01 = _lerp(v[i, j1, k], v[i, j1, k1], s)
    c10 = _lerp(v[i1, j, k], v[i1, j, k1], s)
    c11 = _lerp(v[i1, j1, k], v[i1, j1, k1], s)
    c0 = _lerp(c00, c01, u)
    c1 = _lerp(c10, c11, u)
    return _lerp(c0, c1, t), (o0 or o1 or o2)


# the attention vector (attention_params): AITER's unified-attention grid and residency
(ATT_ON, ATT_KVH, ATT_BQ, ATT_TARGET, ATT_MINSEG, ATT_MAXSEG, ATT_S2D, ATT_S2DD, ATT_S3D,
 ATT_SMS, ATT_G2D, ATT_G2DD, ATT_G3D, ATT_LONE, ATT_LAYERS, ATT_DLAYERS) = range(16)
NATT = 16
_ATT_KEYS = ("sms", "kv_heads", "block_q", "target_programs", "min_segments", "max_segments",
             "slots_per_sm")
#: The kernel variants :func:`attention_kernel` tells apart.
KERNEL_3D, KERNEL_2D, KERNEL_2D_DECODE = 0, 1, 2
#: How much faster a straggler's programs run once they are nearly alone on their SMs: their
#: time per KV tile is ``(n_tail / n_ref) ** exponent`` of the uniform batch's, with ``n_tail``
#: and ``n_ref`` the programs per SM in the tail and in the uniform batch (0: latency-bound, the
#: tail runs no faster; 1: an SM's throughput is shared).  Fitted per kernel variant to
#: ``benchmarks/bench_aiter_straggler.py`` on an H200 with the Llama-3.1-8B head layout (25
#: mixed batches against uniform ones; docs/backends.md); a profile may carry its own
#: (``attention.tail_exponent``).  On the 2D verify kernel, :data:`LONE_STRAGGLER_2D_S` replaces
#: it when the model's layer count is known.
TAIL_EXPONENT = {"2d": 1.0, "2d_decode": 0.25, "3d": 0.4}
#: Seconds per KV token per layer that the longest request's programs take on AITER's 2D
#: (non-decode) unified-attention kernel, whatever else runs: the lone-straggler form
#: ``T = max(T_u(mean KV), T_0 + a x kv_max)`` with ``a`` this times the layers of the model that
#: runs the pass (:func:`lone_straggler_kv`).  The median over the 14 2D-kernel cases of
#: ``benchmarks/results/h200-2026-12-02b/straggler2d.json`` (H200, Llama-3.1-8B: 32 layers, 8 KV
#: heads, tp 1, widths 4-6, bs 30-128) of each case's ``(T_mixed - T_0) / kv_max``, 1.371 us per
#: token over 32 layers; ``python benchmarks/straggler_2d_tail.py`` fits and scores it
#: (docs/backends.md).  Not scaled by KV heads per GPU: the straggler's (query block, KV head)
#: programs run side by side, one per SM, so their wall time is one program's.  A profile may
#: carry its own (``attention.lone_straggler_2d_s``; 0 turns the form off).
LONE_STRAGGLER_2D_S = 1.371e-6 / 32
#: Decoder layers of the draft model a draft-extend pass runs: every draft the engine times is
#: one layer (EAGLE, EAGLE-3 and MTP: ``backends.models.ModelShape.eagle_draft``).
DRAFT_LAYERS = 1


def attention_params(att: dict[str, Any] | None, model: Any = None) -> np.ndarray:
    """A profile's ``attention`` metadata (``backends.aiter.occupancy``) as the vector the lookups read.

    It holds KV heads per GPU, query rows per program, the programs the kernel aims for, the
    split kernel's segment bounds, the programs resident at once on the GPU for the 2D kernel,
    the 2D kernel compiled for all-decode batches and the 3D split-KV kernel, the SM count,
    :data:`TAIL_EXPONENT`, :data:`LONE_STRAGGLER_2D_S` and the layers of the target and draft
    models (from ``model``: the profile's model metadata or a ModelShape; without it the 2D
    verify kernel keeps the tail-exponent rule).  All zeros (mean lookups) without ``att`` or
    when it is incomplete (an older profile)."""
    a = np.zeros(NATT)
    if not att or any(k not in att for k in _ATT_KEYS):
        return a
    slots, sms = att["slots_per_sm"], float(att["sms"])
    a[ATT_ON] = 1.0
    a[ATT_KVH] = att["kv_heads"]
    a[ATT_BQ] = att["block_q"]
    a[ATT_TARGET] = att["target_programs"]
    a[ATT_MINSEG] = att["min_segments"]
    a[ATT_MAXSEG] = att["max_segments"]
    a[ATT_S2D] = sms * float(slots["2d"])
    a[ATT_S2DD] = sms * float(slots["2d_decode"])
    a[ATT_S3D] = sms * float(slots["3d"])
    a[ATT_SMS] = sms
    tail = {**TAIL_EXPONENT, **(att.get("tail_exponent") or {})}
    a[ATT_G2D], a[ATT_G2DD], a[ATT_G3D] = tail["2d"], tail["2d_decode"], tail["3d"]
    lone = att.get("lone_straggler_2d_s")
    a[ATT_LONE] = LONE_STRAGGLER_2D_S if lone is None else float(lone)
    layers = model.get("layers") if isinstance(model, dict) else getattr(model, "layers", None)
    if layers:
        a[ATT_LAYERS] = float(layers)
        a[ATT_DLAYERS] = float(DRAFT_LAYERS)
    return a


def table_attention(table: "LatencyTable | None") -> np.ndarray:
    """The attention vector of a table: :func:`attention_params` of its ``attention`` and of the
    model its ``source`` records (all zeros without a table)."""
    if table is None:
        return np.zeros(NATT)
    source = table.source if isinstance(table.source, dict) else {}
    return attention_params(table.attention, source.get("model"))


@njit
def attention_kernel(nseq, rows, decode, att):
    """Which unified-attention kernel AITER launches for ``nseq`` sequences of ``rows`` query
    rows in all: the 2D kernel (:data:`KERNEL_2D`, or :data:`KERNEL_2D_DECODE` for an
    all-decode batch) when (query blocks + sequences) x KV heads exceeds the programs it aims
    for, else the 3D split-KV kernel (:data:`KERNEL_3D`)."""
    p2d = (rows // att[ATT_BQ] + nseq) * att[ATT_KVH]
    if p2d > att[ATT_TARGET]:
        return KERNEL_2D_DECODE if decode else KERNEL_2D
    return KERNEL_3D


@njit
def effective_kv(kvsum, kvmax, nseq, nreal, rows, decode, att):
    """The uniform KV length at which a batch's attention takes as long as the batch's own.

    AITER's ``unified_attention`` gives every (query block, KV head[, KV segment]) its own
    program, and a program's time is proportional to the KV it reads. A uniform batch of ``N``
    programs on ``S`` resident slots takes ``ceil(N / S)`` waves of ``K / g``, with ``g``
    segments per sequence; the profile's verify slopes step exactly at these wave counts. In a
    batch with a straggler, the other sequences' programs drain the queue in about
    ``max(N / S, 1)`` waves of the mean. The straggler's last programs then run on nearly alone
    on their SMs, faster: ``phi = (n_tail / n_ref) ** exponent`` of the uniform batch's time per
    tile (:data:`TAIL_EXPONENT`). So the makespan is ``max(W mean, max(N / S, 1) mean + phi
    (kv_max - mean))`` over ``g``.

    The uniform batch of the launch (``nseq`` sequences, padding included, ``W_u`` waves) takes
    as long at ``K = makespan g / W_u``, kept between the mean over ``nseq`` and ``kv_max``.
    ``N`` counts the ``nreal`` real sequences' programs, since padded rows read almost no KV.
    The kernel and segment count follow AITER's rules from the padded launch's rows. ``att`` is
    :func:`attention_params`; with ``att[ATT_ON] == 0``, the result is the mean.  (Verify and
    draft-extend launches on the 2D kernel use :func:`verify_kv` instead, when the table is at
    hand.)"""
    mean = kvsum / nseq if nseq > 0 else 0.0
    if att[ATT_ON] == 0.0 or nseq <= 0 or nreal <= 0:
        return mean
    bq = att[ATT_BQ]
    kernel = attention_kernel(nseq, rows, decode, att)
    if kernel == KERNEL_2D_DECODE:
        seg, slots, gamma = 1.0, att[ATT_S2DD], att[ATT_G2DD]
    elif kernel == KERNEL_2D:
        seg, slots, gamma = 1.0, att[ATT_S2D], att[ATT_G2D]
    else:
        p2d = (rows // bq + nseq) * att[ATT_KVH]
        want = np.ceil(att[ATT_TARGET] / p2d)
        seg = 1.0
        while seg < want:
            seg *= 2.0
        seg = min(max(seg, att[ATT_MINSEG]), att[ATT_MAXSEG])
        slots, gamma = att[ATT_S3D], att[ATT_G3D]
    sms = att[ATT_SMS]
    per_seq = np.ceil(rows / nseq / bq) * att[ATT_KVH] * seg  # programs per sequence
    n_real = nreal * per_seq
    waves = max(np.ceil(n_real / slots), 1.0)
    waves_u = max(np.ceil(nseq * per_seq / slots), 1.0)
    n_ref = min(nseq * per_seq, slots) / sms   # programs per SM: the uniform batch's first wave
    n_tail = max(per_seq / sms, 1.0)            # the straggler's own, alone
    phi = min((n_tail / n_ref) ** gamma, 1.0)
    mreal = kvsum / nreal
    span = max(waves * mreal, max(n_real / slots, 1.0) * mreal + phi * (kvmax - mreal))
    return min(max(span / waves_u, mean), max(kvmax, mean))


@njit
def latency_at_kv0(a0, a1, a2, v, bs, width):
    """A (batch, width, KV) grid's latency line over KV at (``bs``, ``width``), taken to KV 0.

    The line's value at KV 0 is its first KV segment extended down (never sloping down), or the
    value at the first KV point when that is 0 or the only one."""
    first = interp3(a0, a1, a2, v, bs, width, a2[0])[0]
    if a2.shape[0] < 2 or a2[0] <= 0.0:
        return first
    nxt = interp3(a0, a1, a2, v, bs, width, a2[1])[0]
    slope = max(nxt - first, 0.0) / (a2[1] - a2[0])
    return max(first - slope * a2[0], 0.0)


@njit
def kv_at_latency(a0, a1, a2, v, bs, width, lo, hi, target):
    """The least KV in ``[lo, hi]`` at which a grid's latency at (``bs``, ``width``) reaches ``target``.

    ``lo`` when the latency there already does, ``hi`` when it never does within the interval.
    Between the grid's KV lines the interpolated latency is linear in KV, so the KV is solved
    for on the segment that crosses ``target``; where the batch or width lies beyond the grid
    (the extrapolation bends inside a segment) it is bisected there to rounding."""
    f0 = interp3(a0, a1, a2, v, bs, width, lo)[0]
    if f0 >= target or hi <= lo:
        return lo
    x0 = lo
    n = a2.shape[0]
    k = 0
    while True:
        while k < n and a2[k] <= x0:
            k += 1
        x1 = a2[k] if k < n and a2[k] < hi else hi
        f1 = interp3(a0, a1, a2, v, bs, width, x1)[0]
        if f1 >= target:
            break
        if x1 >= hi:
            return hi
        x0, f0 = x1, f1
    x = x0 + (target - f0) / (f1 - f0) * (x1 - x0)
    fx = interp3(a0, a1, a2, v, bs, width, x)[0]
    if abs(fx - target) <= 1e-12 * target:
        return x
    for _ in range(200):  # not linear on this segment: bisect (f(x0) < target <= f(x1))
        x = 0.5 * (x0 + x1)
        if x <= x0 or x >= x1:
            break
        if interp3(a0, a1, a2, v, bs, width, x)[0] >= target:
            x1 = x
        else:
            x0 = x
    return x1


@njit
def lone_straggler_kv(a0, a1, a2, v, bs, width, mean, kvmax, a):
    """The KV at which a launch's uniform latency line equals ``max(T_u(mean), T_0 + a kv_max)``.

    On AITER's 2D unified-attention kernel the longest requests' programs are dispatched first
    and read their KV at a rate that does not depend on what else runs, so their attention costs
    about ``a x kv_max`` of wall time (``a``: seconds per KV token over the model's layers,
    :data:`LONE_STRAGGLER_2D_S`). The batch takes the longer of its uniform latency at the mean
    KV and ``T_0 + a x kv_max``, where ``T_u`` is the grid's latency line over KV at (``bs``,
    ``width``) and ``T_0`` its value at KV 0 (:func:`latency_at_kv0`). Looking the launch up at
    the returned KV gives that latency exactly; it is kept between ``mean`` and ``kv_max``
    (a uniform batch at ``kv_max`` takes at least as long as its longest request alone)."""
    target = max(interp3(a0, a1, a2, v, bs, width, mean)[0],
                 latency_at_kv0(a0, a1, a2, v, bs, width) + a * kvmax)
    return kv_at_latency(a0, a1, a2, v, bs, width, mean, max(kvmax, mean), target)


@njit
def verify_kv(kvsum, kvmax, nseq, nreal, rows, layers, att, a0, a1, a2, v, bs, width):
    """The KV coordinate of a verify or draft-extend launch (``width`` query rows per request).

    On the 2D kernel, with the model's ``layers`` known (``att[ATT_LAYERS]`` for a verify,
    ``att[ATT_DLAYERS]`` for a draft-extend) and :data:`LONE_STRAGGLER_2D_S` on, it is
    :func:`lone_straggler_kv` on the grid the launch is looked up on (``a0, a1, a2, v`` at
    ``bs``, ``width``); otherwise :func:`effective_kv`."""
    if (att[ATT_ON] != 0.0 and att[ATT_LONE] > 0.0 and layers > 0.0 and nseq > 0 and nreal > 0
            and attention_kernel(nseq, rows, False, att) == KERNEL_2D):
        return lone_straggler_kv(a0, a1, a2, v, bs, width, kvsum / nseq, kvmax,
                                 att[ATT_LONE] * layers)
    return effective_kv(kvsum, kvmax, nseq, nreal, rows, False, att)


@njit
def attention_rows(decode, graph, nseq, width, tokens):
    """The query rows a pass's attention launch has (what AITER sizes its grid by): one per
    sequence for a draft step, the padded batch x the launch width for a replayed graph, the
    real tokens for an eager launch."""
    if decode:
        return nseq
    if graph:
        return nseq * width
    return tokens


def _batch_kv(kv_lens, nseq: int, rows: float, decode: bool, att: np.ndarray | None,
              lone: tuple | None = None) -> float:
    """The KV coordinate of a batch; ``lone``: ``(layers, grid, bs, width)`` of a verify or
    draft-extend launch, for :func:`verify_kv` (:func:`effective_kv` without)."""
    kv = np.asarray(kv_lens, dtype=np.float64)
    if att is None or not len(kv):
        return float(kv.sum()) / nseq
    args = (float(kv.sum()), float(kv.max()), float(nseq), float(len(kv)), float(rows))
    if lone is None or lone[1] is None:
        return float(effective_kv(*args, decode, att))
    layers, grid, bs, width = lone
    a0, a1, a2 = grid.axes
    return float(verify_kv(*args, float(layers), att, a0, a1, a2, grid.values, float(bs),
                           float(width)))


def verify_axes(batch: VerifyBatch, att: np.ndarray | None = None, grid: Grid | None = None
                ) -> tuple[float, float, float]:
    """(batch size, width, KV length) at which a verify launch is looked up.

    ``att``: :func:`attention_params` for the straggler-aware KV (the mean without); ``grid``:
    the verify grid the launch is looked up on (graph or eager), which a launch on the 2D kernel
    needs for the lone-straggler form (:func:`verify_kv`; without it, :func:`effective_kv`)."""
    bs = batch.bs_padded if batch.graph else batch.bs_real
    if batch.mode == "uniform":
        width = float(batch.launch_width)
    else:
        width = float(np.sum(batch.widths)) / batch.bs_real
    rows = attention_rows(False, batch.graph, float(bs), float(batch.launch_width),
                          float(np.sum(batch.widths)))
    lone = None if att is None else (att[ATT_LAYERS], grid, bs, width)
    return float(bs), width, _batch_kv(batch.kv_lens, bs, rows, False, att, lone)


def draft_axes(batch: DraftBatch, att: np.ndarray | None = None) -> tuple[float, float]:
    """(batch size, KV length) at which one draft pass is looked up (``att`` as for
    :func:`verify_axes`)."""
    bs = batch.bs_padded if batch.graph else batch.bs_real
    rows = attention_rows(True, batch.graph, float(bs), 1.0, float(batch.bs_real))
    return float(bs), _batch_kv(batch.kv_lens, bs, rows, True, att)


def extend_axes(batch: DraftExtendBatch, att: np.ndarray | None = None,
                grid: Grid | None = None) -> tuple[float, float, float]:
    """(batch size, width, KV length) at which a draft-extend launch is looked up: the padded
    batch for a graph, ``batch.width`` rows per request, and the KV rule of :func:`verify_axes`
    (the attention launch has ``width`` query rows per request; ``att`` as there, ``grid`` the
    draft-extend grid, the draft model's layers for the lone-straggler form)."""
    bs = batch.bs_padded if batch.graph else batch.bs_real
    width = float(batch.width)
    rows = attention_rows(False, batch.graph, float(bs), width, float(batch.bs_real) * width)
    lone = None if att is None else (att[ATT_DLAYERS], grid, bs, width)
    return float(bs), width, _batch_kv(batch.kv_lens, bs, rows, False, att, lone)


def prefill_axes(batch: PrefillBatch) -> tuple[float, float]:
    """(tokens, attention-equivalent prefix) at which a prefill pass is looked up."""
    t = np.asarray(batch.tokens, dtype=np.float64)
    p = np.asarray(batch.prefix, dtype=np.float64)
    tokens = float(t.sum())
    if not tokens:
        return 0.0, 0.0
    pairs = float(np.sum(t * (p + t / 2.0)))
    return tokens, pairs / tokens - tokens / 2.0


@njit
def interp_prefill(a0, a1, v, tokens, prefix):
    """Prefill latency at (tokens, attention-equivalent prefix): bilinear on the grid; below the
    first prefix point, linear along the first prefix segment (not flagged as outside)."""
    if prefix >= a1[0] or a1.shape[0] < 2:
        return interp2(a0, a1, v, tokens, max(prefix, a1[0]))
    base, outside = interp2(a0, a1, v, tokens, a1[0])
    nxt, _ = interp2(a0, a1, v, tokens, a1[1])
    slope = max(nxt - base, 0.0) / (a1[1] - a1[0])
    floor = max(base - slope * (a1[0] + tokens / 2.0), 0.05 * base)
    return max(base + slope * (prefix - a1[0]), floor), outside


@dataclass(frozen=True)
class LatencyTable:
    """Every kind of forward pass's latency on grids (see the module docstring)."""

    verify_graph: Grid
    verify_eager: Grid
    draft_graph: Grid
    draft_eager: Grid
    prefill: Grid
    source: dict[str, Any] = field(default_factory=dict)
    #: the attention kernel's grid and residency as profiled (``backends.aiter.occupancy``):
    #: lets lookups use a batch's straggler-aware KV (:func:`effective_kv`)
    attention: dict[str, Any] | None = None
    #: draft-extend passes (both or neither); without them, fallback grids are built from the
    #: draft-decode grids (see the module docstring) and ``extend_measured`` is false
    extend_graph: Grid | None = None
    extend_eager: Grid | None = None

    def __post_init__(self) -> None:
        if (self.extend_graph is None) != (self.extend_eager is None):
            raise ValueError("LatencyTable: give both extend_graph and extend_eager, or neither")
        if self.extend_graph is None:
            for name, draft in (("extend_graph", self.draft_graph), ("extend_eager", self.draft_eager)):
                object.__setattr__(self, name, _fallback_extend(draft, name))
            object.__setattr__(self, "source", {**self.source, "draft_extend": EXTEND_FALLBACK_CAVEAT})
        for name, ndim in (("verify_graph", 3), ("verify_eager", 3), ("draft_graph", 2),
                           ("draft_eager", 2), ("prefill", 2), ("extend_graph", 3),
                           ("extend_eager", 3)):
            g = getattr(self, name)
            if len(g.axes) != ndim:
                raise ValueError(f"LatencyTable.{name} needs {ndim} axes, got {len(g.axes)}")

    def verify_s(self, bs: float, width: float, kv: float, graph: bool) -> tuple[float, bool]:
        g = self.verify_graph if graph else self.verify_eager
        value, outside = interp3(g.axes[0], g.axes[1], g.axes[2], g.values, bs, width, kv)
        return float(value), bool(outside)

    def draft_pass_s(self, bs: float, kv: float, graph: bool) -> tuple[float, bool]:
        g = self.draft_graph if graph else self.draft_eager
        value, outside = interp2(g.axes[0], g.axes[1], g.values, bs, kv)
        return float(value), bool(outside)

    @property
    def extend_measured(self) -> bool:
        """False when the draft-extend grids are the draft-decode fallback (``source`` says so)."""
        return self.source.get("draft_extend") != EXTEND_FALLBACK_CAVEAT

    def extend_s(self, bs: float, width: float, kv: float, graph: bool) -> tuple[float, bool]:
        """Seconds of one draft-extend launch at (batch size, width, KV), and whether the lookup
        left the grid."""
        g = self.extend_graph if graph else self.extend_eager
        value, outside = interp3(g.axes[0], g.axes[1], g.axes[2], g.values, bs, width, kv)
        return float(value), bool(outside)

    def prefill_s(self, tokens: float, prefix: float) -> tuple[float, bool]:
        g = self.prefill
        value, outside = interp_prefill(g.axes[0], g.axes[1], g.values, tokens, prefix)
        return float(value), bool(outside)


def _fallback_extend(draft: Grid, name: str) -> Grid:
    """A draft-extend grid that is the draft-decode grid at every width (the fallback)."""
    if len(draft.axes) != 2:
        raise ValueError(f"LatencyTable.draft grids need 2 axes to derive {name}")
    widths = np.asarray(EXTEND_FALLBACK_WIDTHS, dtype=np.float64)
    values = np.repeat(draft.values[:, None, :], len(widths), axis=1)
    return Grid((draft.axes[0], widths, draft.axes[1]), np.ascontiguousarray(values))


def extend_arrays(table: LatencyTable) -> tuple[np.ndarray, ...]:
    """The draft-extend grids as the compiled engine reads them: ``(graph bs, graph width,
    graph KV, graph values, eager bs, eager width, eager KV, eager values)``, contiguous float64
    (the fallback grids when the table has no measured draft-extend latencies), for
    :func:`interp3`."""
    out = []
    for g in (table.extend_graph, table.extend_eager):
        out.extend(np.ascontiguousarray(a, dtype=np.float64) for a in g.axes)
        out.append(np.ascontiguousarray(g.values, dtype=np.float64))
    return tuple(out)


class TableExecutor:
    """An :class:`~backends.protocol.Executor` whose every latency comes from a LatencyTable."""

    def __init__(self, name: str, table: LatencyTable, description: dict[str, Any] | None = None):
        self.name = name
        self._table = table
        self._description = dict(description or {})
        att = table_attention(table)
        self._att = att if att[ATT_ON] else None  # the same lookups as the engine's fast path

    def latency_table(self) -> LatencyTable:
        return self._table

    def prefill(self, batch: PrefillBatch) -> float:
        return self._table.prefill_s(*prefill_axes(batch))[0]

    def draft(self, batch: DraftBatch) -> float:
        bs, kv = draft_axes(batch, self._att)
        return batch.passes * self._table.draft_pass_s(bs, kv, batch.graph)[0]

    def verify(self, batch: VerifyBatch) -> VerifyTiming:
        grid = self._table.verify_graph if batch.graph else self._table.verify_eager
        value, outside = self._table.verify_s(*verify_axes(batch, self._att, grid), batch.graph)
        return VerifyTiming(latency_s=value, out_of_grid=outside)

    def draft_extend(self, batch: DraftExtendBatch) -> float:
        grid = self._table.extend_graph if batch.graph else self._table.extend_eager
        return self._table.extend_s(*extend_axes(batch, self._att, grid), batch.graph)[0]

    def describe(self) -> dict[str, Any]:
        out = {"backend": self.name, **self._description, "table": dict(self._table.source)}
        if not self._table.extend_measured:
            out["caveats"] = list(out.get("caveats", [])) + [EXTEND_FALLBACK_CAVEAT]
        return out
