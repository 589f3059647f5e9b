"""Batch sizes between a profile's grid points, interpolated in the attention kernel's waves.

A profile measures graphs at some batch sizes and interpolates linearly between them. AITER's
MLA decode kernel gives ``rows`` query rows ``clamp(ceil(2 SMs / rows), 2, 16)`` KV splits, one
program per (row, head group, split), and the GPU holds a fixed number of them at once
(``backends.aiter.occupancy.mla_occupancy``): rounding the split count up puts many launches
just past one wave, so the time per KV token jumps between neighbouring batch sizes (DeepSeek-V2-
Lite, width 4: 0.258 / 0.552 / 0.368 / 0.744 ms per 1k tokens at 4 / 5 / 6 / 7 requests; docs/
aiter_mla.md). On a profile that carries the MLA occupancy, a batch size between two grid points
takes the latency at the first KV line linearly and its rise above that line in units of the
launch's waves over its splits (:func:`decode_wave_cost`). Under ``backend.bs_interp = waves``
(a what-if), on a profile that carries AITER's unified-attention occupancy (every other
model's) the rise is placed between the two grid points' rises by the launch's wave cost
(``backends.dense_waves``). The attention vector's ``ATT_BSW`` says which
(``backends.attention_kv.bs_waves``). Profiles without attention metadata, ``backend.bs_interp
= line``, and batch sizes on a grid point or beyond the grid are looked up as
``backends.interp`` does.
"""

from __future__ import annotations

import numpy as np

from backends.attention_kv import ATT_BSW, ATT_KVH, ATT_MLA, ATT_ON, ATT_S3D, kv_segments
from backends.dense_waves import wave_position
from backends.interp import _locate, interp2, interp3
from backends.jit import njit

__all__ = ["decode_wave_cost", "kernel_rows", "interp3_waves", "interp2_waves"]


@njit
def decode_wave_cost(rows, att):
    """Time per KV token of an MLA decode launch of ``rows`` query rows, relative: its waves
    over its KV splits.  Each program reads ``kv / splits`` keys of its row and takes as long
    whatever else runs, so a launch takes ``waves`` programs' time, a nearly empty last wave as
    long as a full one (the V2-Lite profile's verify slopes follow this within about 10%:
    docs/aiter_mla.md)."""
    seg = kv_segments(1.0, rows, att)
    n = max(rows, 1.0) * att[ATT_KVH] * seg
    return max(np.ceil(n / att[ATT_S3D]), 1.0) / seg


@njit
def kernel_rows(width):
    """Query rows per request an MLA decode launch of ``width`` has: its kernels take 1, 2 or 4,
    and a width of 3 runs as 4 (``backends.aiter.mla.mla_kernel_width``)."""
    return 4.0 if width == 3.0 else width


@njit
def _between(axis, x):
    """``(i, t)`` with ``x`` strictly between ``axis[i]`` and ``axis[i + 1]`` at weight ``t``, or
    ``(-1, 0)`` when it is on a grid point or outside the axis (:func:`backends.interp._locate`)."""
    i, t, outside = _locate(axis, x)
    if outside or t <= 0.0 or t >= 1.0:
        return -1, 0.0
    return i, t


@njit
def _blend(t, base0, base1, full0, full1, cost0, cost1, cost):
    """The latency between two grid batch sizes: their first-KV-line values ``base`` linearly,
    their rises ``full - base`` per unit of wave cost linearly, times the launch's own cost."""
    rise0 = (full0 - base0) / cost0
    rise1 = (full1 - base1) / cost1
    return base0 + t * (base1 - base0) + cost * (rise0 + t * (rise1 - rise0))


@njit
def _placed(t, s, base0, base1, full0, full1):
    """The latency between two grid batch sizes on unified attention: their first-KV-line
    values ``base`` at ``t`` along the line, their rises ``full - base`` at ``s`` (the launch's
    place between them in wave cost, ``backends.dense_waves``)."""
    rise0 = full0 - base0
    return base0 + t * (base1 - base0) + rise0 + s * ((full1 - base1) - rise0)


@njit
def interp3_waves(a0, a1, a2, v, bs, width, kv, rows_per_seq, att):
    """:func:`backends.interp.interp3` of a (batch, width, KV) grid, but on an MLA profile
    (``att[ATT_MLA]``) a batch size between two grid points is interpolated in the decode
    kernel's waves: the latency at the first KV line linearly, its rise above that line in
    units of :func:`decode_wave_cost` (``rows_per_seq`` query rows per request: the width of a
    verify or draft-extend launch, 3 counted as the 4 the kernels run); on a unified-attention
    profile the rise is placed by ``backends.dense_waves.wave_position``. Only where
    ``att[ATT_BSW]`` is set (``backend.bs_interp``). Exact on grid points; outside the batch
    axis, and on profiles without attention metadata, it is ``interp3``.  Returns (value,
    outside)."""
    value, outside = interp3(a0, a1, a2, v, bs, width, kv)
    if att[ATT_ON] == 0.0 or att[ATT_BSW] == 0.0:
        return value, outside
    i, t = _between(a0, bs)
    if i < 0:
        return value, outside
    b0, b1 = a0[i], a0[i + 1]
    base0 = interp3(a0, a1, a2, v, b0, width, a2[0])[0]
    base1 = interp3(a0, a1, a2, v, b1, width, a2[0])[0]
    full0 = interp3(a0, a1, a2, v, b0, width, kv)[0]
    full1 = interp3(a0, a1, a2, v, b1, width, kv)[0]
    if att[ATT_MLA] == 0.0:
        s = wave_position(b0, b1, bs, t, rows_per_seq, False, att)
        return _placed(t, s, base0, base1, full0, full1), outside
    rps = kernel_rows(rows_per_seq)
    return _blend(t, base0, base1, full0, full1,
                  decode_wave_cost(b0 * rps, att), decode_wave_cost(b1 * rps, att),
                  decode_wave_cost(bs * rps, att)), outside


@njit
def interp2_waves(a0, a1, v, bs, kv, att):
    """:func:`interp3_waves` of a (batch, KV) grid of draft steps (one query row per request)."""
    value, outside = interp2(a0, a1, v, bs, kv)
    if att[ATT_ON] == 0.0 or att[ATT_BSW] == 0.0:
        return value, outside
    i, t = _between(a0, bs)
    if i < 0:
        return value, outside
    b0, b1 = a0[i], a0[i + 1]
    base0, base1 = interp2(a0, a1, v, b0, a1[0])[0], interp2(a0, a1, v, b1, a1[0])[0]
    full0, full1 = interp2(a0, a1, v, b0, kv)[0], interp2(a0, a1, v, b1, kv)[0]
    if att[ATT_MLA] == 0.0:
        return _placed(t, wave_position(b0, b1, bs, t, 1.0, True, att), base0, base1, full0,
                       full1), outside
    return _blend(t, base0, base1, full0, full1,
                  decode_wave_cost(b0, att), decode_wave_cost(b1, att),
                  decode_wave_cost(bs, att)), outside
