"""Where a batch with mixed KV lengths is looked up: AITER's attention grids and stragglers.

A profile measures uniform batches, every request at one KV length.  A live batch mixes them,
and AITER's unified attention does not take as long as its mean KV: a long request's programs
can outlast the rest.  :func:`attention_params` turns a profile's ``attention`` metadata (the
kernel's grid and residency, ``backends.aiter.occupancy``) into the vector the compiled lookups
read; :func:`effective_kv` (waves and tail rule) and :func:`verify_kv` (the lone-straggler form
on the 2D kernel) give the uniform KV length a launch is looked up at (docs/backends.md,
"Straggler-aware KV").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from backends.interp import interp3
from backends.jit import njit

if TYPE_CHECKING:
    from backends.latency_table import LatencyTable

__all__ = ["attention_params", "table_attention", "table_model", "attention_kernel",
           "kv_segments", "effective_kv", "verify_kv", "lone_straggler_kv", "latency_at_kv0", "kv_at_latency",
           "attention_rows", "TAIL_EXPONENT", "WAVE_FILL_3D", "LONE_STRAGGLER_2D_S", "DRAFT_LAYERS",
           "NATT", "resolve_kv_lookup", "BS_INTERPS", "bs_waves",
           "KERNEL_3D", "KERNEL_2D", "KERNEL_2D_DECODE", "KERNEL_MLA"]

# the attention vector (attention_params): AITER's unified-attention grid and residency
(ATT_ON, ATT_KVH, ATT_BQ, ATT_TARGET, ATT_MINSEG, ATT_MAXSEG, ATT_S2D, ATT_S2DD, ATT_S3D,
 ATT_SMS, ATT_G2D, ATT_G2DD, ATT_G3D, ATT_LONE, ATT_LAYERS, ATT_DLAYERS, ATT_MLA,
 ATT_FNSAT, ATT_FOVH, ATT_BSW) = range(20)
#: ATT_FNSAT / ATT_FOVH: the MLA fluid lookup's parameters (``backends.mla_fluid``; 0: off), set
#: by the engine under ``backend.kv_lookup = fluid``
#: ATT_BSW: 1 where batch sizes between grid points are placed by the attention kernel's waves
#: (``backends.mla_waves``), 0 where they take the line; ``backend.bs_interp`` (:func:`bs_waves`)
NATT = 20
#: ``backend.bs_interp``: ``auto`` (waves on an MLA profile, the line on unified attention),
#: ``waves`` (both), ``line`` (neither)
BS_INTERPS = ("auto", "waves", "line")
_ATT_KEYS = ("sms", "kv_heads", "block_q", "target_programs", "min_segments", "max_segments",
             "slots_per_sm")
_MLA_KEYS = ("sms", "head_groups", "target_programs", "min_splits", "max_splits", "slots_per_sm")
#: The kernel variants :func:`attention_kernel` tells apart (:data:`KERNEL_MLA`: the MLA path's
#: decode kernel, whatever the batch).
KERNEL_3D, KERNEL_2D, KERNEL_2D_DECODE, KERNEL_MLA = 0, 1, 2, 3
#: How much faster a straggler's programs run once they are nearly alone on their SMs: their
#: time per KV tile is ``(n_tail / n_ref) ** exponent`` of the uniform batch's, with ``n_tail``
#: and ``n_ref`` the programs per SM in the tail and in the uniform batch (0: latency-bound, the
#: tail runs no faster; 1: an SM's throughput is shared).  Fitted per kernel variant to
#: ``benchmarks/bench_aiter_straggler.py`` on an H200 with the Llama-3.1-8B head layout (25
#: mixed batches against uniform ones; docs/backends.md); a profile may carry its own
#: (``attention.tail_exponent``).  The 3D kernel's, 0.3, was fitted together with
#: :data:`WAVE_FILL_3D` over the 74 3D-kernel cases of five recorded runs (three on the 8B, two
#: on the Llama-3.1-70B tp-8 shard: 2.20% against 3.33% at 0.4 and the full occupancy) and
#: then scored on 13 cases recorded after the fit (2026-12-04d): 3.33% against 4.88%
#: (``python benchmarks/straggler_tail_fit.py``; docs/backends.md, *A 3D wave holds 1,023
#: programs*).
#: On the 2D verify kernel, :data:`LONE_STRAGGLER_2D_S` replaces it when the model's layer count
#: is known.
TAIL_EXPONENT = {"2d": 1.0, "2d_decode": 0.25, "3d": 0.3, "mla": 0.4}
#: The share of the 3D split-KV kernel's resident slots (``slots_per_sm["3d"]`` x SMs, from the
#: occupancy query) that one wave of its programs fills: 31/32, 1,023 of the H200's 1,056.  The
#: 8B's uniform verify graphs say why: their KV slope steps up at 1,024, 2,048 and 3,072 working
#: programs (widths 4, 6 and 8), one wave more each time, where 1,056 slots would put the steps
#: at 1,057, 2,113 and 3,169; the slope stays flat from 640 to 896 programs and from 1,280 to
#: 1,792, so a wave holds between 897 and 1,023.  Within that range the straggler cases fit
#: 1,023 best (with :data:`TAIL_EXPONENT` ``3d`` 0.3).  A profile may carry its own
#: (``attention.wave_fill_3d``).
WAVE_FILL_3D = 31 / 32
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
    if att and att.get("kernel") == "mla_decode":
        return _mla_params(att, a)
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
    a[ATT_S3D] = sms * float(slots["3d"]) * float(att.get("wave_fill_3d", WAVE_FILL_3D))
    a[ATT_SMS] = sms
    tail = _tail_exponents(att)
    a[ATT_G2D], a[ATT_G2DD], a[ATT_G3D] = tail["2d"], tail["2d_decode"], tail["3d"]
    lone = att.get("lone_straggler_2d_s")
    a[ATT_LONE] = LONE_STRAGGLER_2D_S if lone is None else float(lone)
    a[ATT_BSW] = bs_waves("auto", False)
    layers = model.get("layers") if isinstance(model, dict) else getattr(model, "layers", None)
    if layers:
        a[ATT_LAYERS] = float(layers)
        a[ATT_DLAYERS] = float(DRAFT_LAYERS)
    return a


def _mla_params(att: dict[str, Any], a: np.ndarray) -> np.ndarray:
    """:func:`attention_params` of an MLA profile (``kernel: mla_decode``,
    ``backends.aiter.occupancy.mla_occupancy``): its decode kernel read as a split-KV kernel of
    one query row per program, ``head_groups`` programs per row and split, splits
    ``clamp(ceil(target_programs / rows), min_splits, max_splits)``; all zeros when incomplete."""
    if any(k not in att for k in _MLA_KEYS) or "mla_decode" not in att["slots_per_sm"]:
        return a
    sms = float(att["sms"])
    a[ATT_ON] = a[ATT_MLA] = 1.0
    a[ATT_KVH] = att["head_groups"]
    a[ATT_BQ] = 1.0
    a[ATT_TARGET] = att["target_programs"]
    a[ATT_MINSEG] = att["min_splits"]
    a[ATT_MAXSEG] = att["max_splits"]
    a[ATT_S3D] = sms * float(att["slots_per_sm"]["mla_decode"])
    a[ATT_SMS] = sms
    a[ATT_G3D] = _tail_exponents(att)["mla"]
    a[ATT_BSW] = bs_waves("auto", True)
    return a


def _tail_exponents(att: dict[str, Any]) -> dict[str, float]:
    """:data:`TAIL_EXPONENT`, with the ones a profile carries (``attention.tail_exponent``)."""
    return {**TAIL_EXPONENT, **(att.get("tail_exponent") or {})}


def table_model(table: "LatencyTable | None") -> Any:
    """The model metadata a table's ``source`` records (a profile's), or None."""
    source = getattr(table, "source", None)
    return source.get("model") if isinstance(source, dict) else None


def table_attention(table: "LatencyTable | None") -> np.ndarray:
    """The attention vector of a table: :func:`attention_params` of its ``attention`` and of the
    model its ``source`` records (all zeros without a table)."""
    if table is None:
        return np.zeros(NATT)
    return attention_params(table.attention, table_model(table))


def resolve_kv_lookup(kv_lookup: str, mla: bool) -> str:
    """The lookup ``backend.kv_lookup`` names on a table: ``auto`` is ``fluid`` where the table
    carries the MLA decode's occupancy (``mla``; it met as many or more checks than the
    straggler rule on every DeepSeek live run compared, docs/backends.md, *The MLA fluid
    lookup*) and ``straggler`` elsewhere; any other value is itself."""
    if kv_lookup == "auto":
        return "fluid" if mla else "straggler"
    return kv_lookup


def bs_waves(bs_interp: str, mla: bool) -> float:
    """``att[ATT_BSW]`` for ``backend.bs_interp`` on a table: ``auto`` places batch sizes between
    grid points by the kernel's waves on an MLA profile (its decode's split rounding: docs/
    backends.md, *Batch sizes between grid points on the MLA path*) and takes the line on
    unified attention, where placing them by the 3D kernel's waves is a what-if (docs/
    backends.md, *Batch sizes between grid points on unified attention*); ``waves`` and
    ``line`` are themselves."""
    if bs_interp not in BS_INTERPS:
        raise ValueError(f"bs_interp: {bs_interp!r} is not one of {', '.join(BS_INTERPS)}")
    return 1.0 if bs_interp == "waves" or (bs_interp == "auto" and mla) else 0.0


@njit
def attention_kernel(nseq, rows, decode, att):
    """Which unified-attention kernel AITER launches for ``nseq`` sequences of ``rows`` query
    rows in all: the 2D kernel (:data:`KERNEL_2D`, or :data:`KERNEL_2D_DECODE` for an
    all-decode batch) when (query blocks + sequences) x KV heads exceeds the programs it aims
    for, else the 3D split-KV kernel (:data:`KERNEL_3D`). An MLA profile's launches all run
    the MLA decode kernel (:data:`KERNEL_MLA`)."""
    if att[ATT_MLA] != 0.0:
        return KERNEL_MLA
    p2d = (rows // att[ATT_BQ] + nseq) * att[ATT_KVH]
    if p2d > att[ATT_TARGET]:
        return KERNEL_2D_DECODE if decode else KERNEL_2D
    return KERNEL_3D


@njit
def kv_segments(nseq, rows, att):
    """The KV segments per sequence AITER's 3D split-KV kernel gives a launch of ``nseq``
    sequences and ``rows`` query rows: the power of two that brings (query blocks + sequences)
    x KV heads x segments to the programs it aims for, kept within its segment bounds."""
    if att[ATT_MLA] != 0.0:  # the MLA decode: splits bring the rows to the programs it aims for
        return min(max(np.ceil(att[ATT_TARGET] / max(rows, 1.0)), att[ATT_MINSEG]),
                   att[ATT_MAXSEG])
    p2d = (rows // att[ATT_BQ] + nseq) * att[ATT_KVH]
    want = np.ceil(att[ATT_TARGET] / p2d)
    seg = 1.0
    while seg < want:
        seg *= 2.0
    return min(max(seg, att[ATT_MINSEG]), att[ATT_MAXSEG])


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
    else:  # the 3D split-KV kernel, or the MLA decode (its splits, slots and exponent)
        seg, slots, gamma = kv_segments(nseq, rows, att), att[ATT_S3D], att[ATT_G3D]
    sms = att[ATT_SMS]
    per_seq = np.ceil(rows / nseq / bq) * att[ATT_KVH] * seg  # programs per sequence
    n_real = nreal * per_seq
    waves = max(np.ceil(n_real / slots), 1.0)
    waves_u = max(np.ceil(nseq * per_seq / slots), 1.0)
    n_ref = min(nseq * per_seq, slots) / sms   # programs per SM: the uniform batch's first wave
    n_tail = max(per_seq / sms, 1.0)            # the straggler's own, alone
    phi = min((n_tail / n_ref) ** gamma, 1.0)
    # the MLA decode keeps the tail form in every wave count: it dispatches rows first, so a
    # straggler's programs are not spread through the waves (docs/backends.md, *Straggler-aware
    # KV on the MLA path*)
    if kernel == KERNEL_3D and waves_u > 1.0:
        return _split_kv(kvsum, kvmax, nreal, n_real, waves, nseq * per_seq, waves_u, slots, phi,
                         gamma, mean)
    mreal = kvsum / nreal
    span = max(waves * mreal, max(n_real / slots, 1.0) * mreal + phi * (kvmax - mreal))
    return min(max(span / waves_u, mean), max(kvmax, mean))


@njit
def _split_kv(kvsum, kvmax, nreal, n_real, waves, n_all, waves_u, slots, phi, gamma, mean):
    """:func:`effective_kv` on AITER's 3D split-KV kernel when the launch takes more than one
    wave of the resident slots: the partial-wave form.

    The kernel gives every sequence the same number of KV segments and dispatches its programs
    query block first, so one straggler's programs are spread through every wave, and the last
    wave, partly filled, runs faster than a full one (fewer programs per SM). A wave filled to a
    fraction ``f`` of the slots takes ``f ** gamma`` of a full wave's time. A uniform batch at
    ``K`` then takes ``K ((W_u - 1) + f_u ** gamma)``; the mixed batch, its other requests at
    their mean ``m`` and one straggler at ``kv_max``, takes ``m ((W - 1) + f ** gamma) + phi
    (kv_max - m)``: only the last wave's straggler programs outlast the rest, running nearly
    alone (``phi``, against a full wave's programs per SM). ``W``/``f`` count the real requests'
    programs (``n_real``), ``W_u``/``f_u`` the launch's (``n_all``); ``W`` and ``W_u`` are the
    waves :func:`effective_kv` counted. In one wave the tail rule of
    :func:`effective_kv` is this form's own limit and stays. The rule it replaces took the
    straggler to hide in a partly filled last wave; ``python benchmarks/straggler_3d_waves.py`` scores both on the recorded
    3D-kernel cases (docs/backends.md)."""
    m = (kvsum - kvmax) / (nreal - 1.0) if nreal > 1.0 else kvmax
    f = (n_real - (waves - 1.0) * slots) / slots
    f_u = (n_all - (waves_u - 1.0) * slots) / slots
    t_mix = m * ((waves - 1.0) + f ** gamma) + phi * (kvmax - m)
    k = t_mix / ((waves_u - 1.0) + f_u ** gamma)
    return min(max(k, mean), max(kvmax, mean))


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

