"""The KV coordinate of a mixed-KV MLA decode launch from its programs sharing the GPU's bandwidth.

AITER's MLA decode (stage 1) gives each query row ``splits`` programs, each reading
``kv / splits`` of its request's KV, and dispatches them in launch order, a row's splits
adjacent, onto the GPU's resident slots (``att[ATT_S3D]``: 264 on the H200). The straggler rule
(``backends.attention_kv.effective_kv``) sees only a batch's mean and longest KV; where the long
rows sit in the launch moves a batch's time by 12-32% (DeepSeek-V2-Lite, H200,
``benchmarks/results/h200-2026-12-03c/straggler_mla_order.json``). This module times the launch's
programs as a *fluid*: each running program advances at full speed while at most ``nsat`` run,
at ``nsat / n`` when ``n > nsat`` (the memory bandwidth shared), with ``overhead`` tokens of
fixed work each, a program starting when a slot frees, in launch order
(:func:`fluid_makespan`). The launch then takes ``t0 + (t(mean) - t0) x ratio``, where ``t`` is
the profile's uniform latency line at the padded batch size (``t0`` its value at KV 0) and
``ratio`` the fluid makespan of the launch (padding rows empty) over that of the uniform launch
at the real requests' mean KV (padding rows at the mean too, as the profile's uniform batch of
the padded size has them). :func:`fluid_kv` returns the KV at which the uniform line gives that
time, so the lookup itself is unchanged.

The two parameters, :data:`FLUID_NSAT` and :data:`FLUID_OVERHEAD`, were chosen on the 56
benchmark straggler cases of ``bench_aiter_straggler.py`` alone (MAPE 2.61% against the rule's
4.45%; ``python benchmarks/mla_dispatch_replay.py --straggler ...``); replayed on the two live
DeepSeek-V2-Lite runs of 2026-12-03, which chose nothing, the form errs 1.75% and 0.80% over
their verify launches against the rule's 1.98% and 1.47% (docs/aiter_mla.md), and scored per
step from their passes' recorded members (``steps.parquet`` ``member_kv``) its verify steps err
0.75-1.85% against the rule's 1.45-2.49% on three runs; on DeepSeek-V3's 520 journalled verify
launches it errs 1.32% against the rule's 0.67%. On runs that recorded their members
(2026-12-03, ``benchmarks/results/h200-2026-12-03f``) it errs 0.72% against 1.37% over a
DeepSeek-V2-Lite run's verify steps and 0.54% against 0.32% over a DeepSeek-V3 run's. Since
2026-12-04f it is the lookup on MLA profiles (``backend.kv_lookup = auto``; ``straggler`` keeps
the rule): over 11 reports scored both ways it met more whole-run and per-step checks on 7 and
as many on 4 (docs/backends.md, *The MLA fluid lookup*).
"""

from __future__ import annotations

import numpy as np

from backends.attention_kv import ATT_MAXSEG, ATT_MINSEG, ATT_S3D, ATT_TARGET, kv_at_latency, latency_at_kv0
from backends.interp import interp3
from backends.jit import njit

__all__ = ["FLUID_NSAT", "FLUID_OVERHEAD", "fluid_makespan", "uniform_makespan", "fluid_kv",
           "mla_splits", "scratch_size"]

#: running programs beyond which they share the bandwidth (H200, DeepSeek-V2-Lite; see above)
FLUID_NSAT = 200.0
#: fixed work of each program, in KV tokens
FLUID_OVERHEAD = 64.0


@njit
def mla_splits(rows, att):
    """KV splits AITER's MLA decode gives a launch of ``rows`` query rows:
    ``clamp(ceil(target / rows), min, max)`` (``backends.aiter.mla_kernels.decode_splits``)."""
    return min(max(np.ceil(att[ATT_TARGET] / max(rows, 1.0)), att[ATT_MINSEG]), att[ATT_MAXSEG])


def scratch_size(max_rows: int) -> int:
    """The scratch :func:`fluid_makespan` needs for launches of up to ``max_rows`` query rows."""
    return 2 * (int(max_rows) + 2)


@njit
def fluid_makespan(kv, n, padded, width, splits, overhead, slots, nsat, scratch):
    """Time (in KV tokens at full speed) of a launch's programs on ``slots`` slots: rows in
    launch order, ``width`` per request (the ``n`` real requests' ``kv[i]``, then
    ``padded - n`` empty padding requests), each row ``splits`` programs of
    ``kv / splits + overhead``; -1 when ``scratch`` (:func:`scratch_size`) is too small.

    The running programs form groups that started together with equal work (a row's splits,
    or the part of one that found free slots), kept in ``scratch`` as remaining work and count;
    each step advances every group to the next finish at the rate of the running count."""
    cap = scratch.shape[0] // 2
    nrows = padded * width
    ng = 0
    row = 0
    left = splits
    active = 0.0
    t = 0.0
    while True:
        while active < slots and row < nrows:  # fill the free slots in launch order
            if ng >= cap:
                return -1.0
            c = min(left, slots - active)
            req = int(row // width)
            scratch[ng] = (kv[req] if req < n else 0.0) / splits + overhead
            scratch[cap + ng] = c
            ng += 1
            active += c
            left -= c
            if left <= 0:
                row += 1
                left = splits
        if ng == 0:
            return t
        m = scratch[0]
        for g in range(1, ng):
            if scratch[g] < m:
                m = scratch[g]
        rate = 1.0 if active <= nsat else nsat / active
        t += m / rate
        k = 0
        for g in range(ng):
            rem = scratch[g] - m
            if rem > 1e-9:
                scratch[k] = rem
                scratch[cap + k] = scratch[cap + g]
                k += 1
            else:
                active -= scratch[cap + g]
        ng = k


@njit
def uniform_makespan(nrows, splits, work, slots, nsat):
    """:func:`fluid_makespan` of ``nrows x splits`` programs of equal ``work``: full waves of
    ``slots``, then the rest, each wave at the rate of its own count."""
    total = nrows * splits
    waves = np.floor(total / slots)
    rest = total - waves * slots
    t = waves * work / (1.0 if slots <= nsat else nsat / slots)
    if rest > 0:
        t += work / (1.0 if rest <= nsat else nsat / rest)
    return t


@njit
def fluid_kv(kv, n, padded, width, rows_per_seq, att, nsat, overhead, a0, a1, a2, v, scratch):
    """The KV coordinate of a launch of ``n`` requests (``kv[:n]`` in launch order) padded to
    ``padded``, looked up at (``padded``, ``width``) on the grid ``a0, a1, a2, v``, with
    ``rows_per_seq`` query rows per request: where the grid's uniform line reaches ``t0 +
    (t(mean) - t0) x ratio`` (module docstring). -1 when it does not apply (no request, or the
    scratch is too small): the caller then keeps its rule."""
    if n <= 0:
        return -1.0
    s = 0.0
    mx = 0.0
    for i in range(n):
        s += kv[i]
        mx = max(mx, float(kv[i]))
    mean = s / n
    rows = padded * rows_per_seq
    splits = mla_splits(rows, att)
    slots = att[ATT_S3D]
    mix = fluid_makespan(kv, n, padded, rows_per_seq, splits, overhead, slots, nsat, scratch)
    if mix < 0.0:
        return -1.0
    uni = uniform_makespan(rows, splits, mean / splits + overhead, slots, nsat)
    ratio = mix / uni if uni > 0.0 else 1.0
    t0 = latency_at_kv0(a0, a1, a2, v, float(padded), width)
    tm = interp3(a0, a1, a2, v, float(padded), width, mean)[0]
    target = t0 + (tm - t0) * ratio
    return kv_at_latency(a0, a1, a2, v, float(padded), width, 0.0, max(mx, mean), target)
