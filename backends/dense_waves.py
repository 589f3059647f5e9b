"""Batch sizes between a profile's grid points on AITER's unified attention, placed by its waves.

A profile measures a (batch, width, KV) grid and a lookup between two grid batch sizes used to
draw a line. AITER's unified attention (every model but an MLA one) gives each (query block,
KV head, KV segment) its own program and runs them in waves of the GPU's resident slots, so the
attention's share of a launch rises in steps with the batch: on the Llama-3.1-70B tp-8 shard at
width 8, 12 requests are 768 programs of the 3D split-KV kernel (one wave of 1,023), 15 are 960
(still one) and 16 are 1,024 (two), and the eager grid measures 29.8 ms at 12 requests and
41.1 ms at 16 (KV 32,768). The line put 14 requests at 35.4 ms; measured uniform, they take
about 26 ms at KV 25,000 where the line says 29.6 (``h200-2026-12-02f/straggler70b.json``).

So between two grid batch sizes ``b0 < bs < b1`` on the same kernel, the value at the grid's
first KV line stays the line between them, and the rise above that line (the attention's KV
work) is placed along the kernel's *wave cost* rather than the batch size: ``rise(b0) + s
(rise(b1) - rise(b0))`` with ``s = (c(bs) - c(b0)) / (c(b1) - c(b0))``. The cost
(:func:`dense_wave_cost`) is the launch's time per KV token relative to one program's: ``((W -
1) + f ** gamma) / g`` for ``W`` waves whose last one is filled to ``f`` of the slots, ``g``
KV segments per sequence, ``gamma`` the kernel's tail exponent (the partial-wave form of
``backends.attention_kv``). Where the cost is proportional to the batch (many waves) this is
the line again; where a wave boundary falls between the grid points the batches on its near side
keep the near point's rise. Only the 3D split-KV kernel is placed so: its waves are where its
occupancy says (a wave holds 1,023 programs, ``backends.attention_kv.WAVE_FILL_3D``, from the
8B's own verify slopes and 74 straggler batches). The 2D kernels' are not: on the 8B's draft
graphs (the 2D decode kernel from 64 requests) the occupancy's 792 slots put the step between
96 and 128 requests, but the grid steps before 96 (placed by those waves, 96 requests came out
-26% against the line's -14%, leave-one-out). So where ``b0``, ``bs`` or ``b1`` runs a 2D kernel
(or the three would not run the same one), or the two costs are equal, it is the line.

Scored leave-one-out on the shipped profiles' measured grids (each interior batch size predicted
from its two neighbours, ``python benchmarks/bs_waves_loo.py``; no parameter fitted to them):
see docs/backends.md, *Batch sizes between grid points*.
"""

from __future__ import annotations

import numpy as np

from backends.attention_kv import (ATT_BQ, ATT_G2D, ATT_G2DD, ATT_G3D, ATT_KVH, ATT_S2D,
                                   ATT_S2DD, ATT_S3D, KERNEL_2D, KERNEL_3D, attention_kernel,
                                   kv_segments)
from backends.jit import njit

__all__ = ["dense_wave_cost", "wave_position"]


@njit
def dense_wave_cost(nseq, width, decode, att):
    """Time per KV token of a uniform unified-attention launch of ``nseq`` sequences of
    ``width`` query rows each (``decode``: an all-decode draft step), relative to one
    program's: ``((W - 1) + f ** gamma) / g`` (module docstring). Returns ``(cost, kernel)``."""
    rows = nseq * width
    kernel = attention_kernel(nseq, rows, decode, att)
    if kernel == KERNEL_3D:
        seg, slots, gamma = kv_segments(nseq, rows, att), att[ATT_S3D], att[ATT_G3D]
    elif kernel == KERNEL_2D:
        seg, slots, gamma = 1.0, att[ATT_S2D], att[ATT_G2D]
    else:
        seg, slots, gamma = 1.0, att[ATT_S2DD], att[ATT_G2DD]
    n = nseq * np.ceil(width / att[ATT_BQ]) * att[ATT_KVH] * seg
    waves = max(np.ceil(n / slots), 1.0)
    fill = (n - (waves - 1.0) * slots) / slots
    return ((waves - 1.0) + fill ** gamma) / seg, kernel


@njit
def wave_position(b0, b1, bs, t, width, decode, att):
    """Where ``bs`` (at weight ``t`` on the line from ``b0`` to ``b1``) sits between them in
    wave cost, from 0 to 1: ``t`` itself when the three would not run the same kernel or the two
    grid points cost the same, or the launch runs a 2D kernel (module docstring)."""
    c0, k0 = dense_wave_cost(b0, width, decode, att)
    c1, k1 = dense_wave_cost(b1, width, decode, att)
    c, k = dense_wave_cost(bs, width, decode, att)
    if k != KERNEL_3D or k0 != k or k1 != k or c1 == c0:
        return t
    return min(max((c - c0) / (c1 - c0), 0.0), 1.0)
