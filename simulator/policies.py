"""Verify policies and the acceptance rule, as the compiled engine applies them.

A policy turns the running requests' proposed widths into verify widths and launches;
:func:`accepted_under_width` is the width rule of docs/traces.md (what a request accepts when it
is verified with more or fewer drafts than it recorded); :func:`misattributed_rows` counts what
the unsafe derived-width metadata gets wrong.
"""

from __future__ import annotations

import numpy as np

from backends.jit import njit
from simulator.layout import M_D, M_LAUNCH, M_R, M_V, MASK32, POL_BUCKET, POL_FIXED, POL_PAD, \
    POL_SPLIT, POL_TRUNCATE


@njit
def _mix32(x):
    x = (((x >> 16) ^ x) * 0x45D9F3B) & MASK32
    x = (((x >> 16) ^ x) * 0x45D9F3B) & MASK32
    return (x >> 16) ^ x


@njit
def uniform_draw(seed, req, step, pos):
    """A uniform draw in [0, 1) fixed by (seed, request, step, position): counter-based, so the
    same request step sees the same draws under every policy and batch composition."""
    h = _mix32((seed & MASK32) ^ 0x9E3779B9)
    h = _mix32(h ^ (req & MASK32))
    h = _mix32(h ^ (step & MASK32))
    h = _mix32(h ^ (pos & MASK32))
    return h / 4294967296.0


@njit
def accepted_under_width(rec_d, rec_a, r, pacc, seed, req, step):
    """Drafts accepted when the step recorded (rec_d proposed, rec_a accepted) is verified with
    r real drafts (docs/simulator.md, Acceptance): fewer -> min(rec_a, r); more, after an earlier rejection -> rec_a;
    more, with every recorded draft accepted -> extra positions drawn from ``pacc`` (the
    conditional acceptance of position j given positions < j accepted)."""
    if r <= rec_d:
        return min(rec_a, r)
    if rec_a < rec_d:
        return rec_a
    a = rec_d
    npos = pacc.shape[0]
    for pos in range(rec_d + 1, r + 1):
        p = pacc[min(pos, npos) - 1]
        if uniform_draw(seed, req, step, pos) < p:
            a += 1
        else:
            break
    return a


@njit
def accepted_at_step(i, k, r, off, draft, acc, pacc, seed):
    """Drafts request i accepts at its step k when verified with r real drafts: the width rule
    (:func:`accepted_under_width`) on its recorded step, its lists reused cyclically (a request
    with no recorded steps proposed nothing)."""
    ns = off[i + 1] - off[i]
    rec_d = np.int64(0)
    rec_a = np.int64(0)
    if ns > 0:
        idx = off[i] + k % ns
        rec_d = np.int64(draft[idx])
        rec_a = np.int64(acc[idx])
    return accepted_under_width(rec_d, rec_a, r, pacc, seed, i, k)


@njit
def misattributed_rows(widths, n, width=0):
    """Query rows whose request under the uniform ``qo_indptr`` of ``width`` (0: derived as
    ``T // bs``, the non-MLA path; the MLA path passes its fixed ``num_draft_tokens``) is not
    their real request; rows past ``bs * width`` belong to no request and count too."""
    w = width
    if w == 0:
        total = 0
        for j in range(n):
            total += widths[j]
        w = total // n
    bad = 0
    row = 0
    for j in range(n):
        for _ in range(widths[j]):
            if w == 0 or row >= n * w or row // w != j:
                bad += 1
            row += 1
    return bad


# ---------------------------------------------------------------- verify policies
# Each policy fills, for members j < n of MB[r]: M_V (verify width), M_R (real drafts),
# M_LAUNCH (launch index), and returns the number of launches; lw[L] is launch L's width.

@njit
def _policy_pad(mb, n, lw, widen):
    """One launch at the widest proposed width: the fixed policy at that width (no request
    proposed more than it, so each keeps its own drafts unless widened)."""
    w = 0
    for j in range(n):
        w = max(w, mb[j, M_D] + 1)
    return _policy_fixed(mb, n, lw, w, widen, w)


@njit
def _distinct_sorted(vals, n, out):
    """Distinct values of vals[:n] into out, ascending; returns how many."""
    k = 0
    for j in range(n):
        v = vals[j]
        pos = k
        for q in range(k):
            if out[q] == v:
                pos = -1
                break
            if out[q] > v:
                pos = q
                break
        if pos == -1:
            continue
        for q in range(k, pos, -1):
            out[q] = out[q - 1]
        out[pos] = v
        k += 1
    return k


@njit
def _policy_grouped(mb, n, lw, widths):
    """One launch per distinct value of widths[:n] (ascending)."""
    nl = _distinct_sorted(widths, n, lw)
    for j in range(n):
        for q in range(nl):
            if lw[q] == widths[j]:
                mb[j, M_LAUNCH] = q
                break
        mb[j, M_V] = widths[j]
    return nl


@njit
def _policy_split(mb, n, lw, tmp):
    for j in range(n):
        tmp[j] = mb[j, M_D] + 1
        mb[j, M_R] = mb[j, M_D]
    return _policy_grouped(mb, n, lw, tmp)


@njit
def _policy_bucket(mb, n, lw, tmp, buckets, widen):
    top = buckets[buckets.shape[0] - 1]
    for j in range(n):
        w = mb[j, M_D] + 1
        b = top
        for q in range(buckets.shape[0]):
            if buckets[q] >= w:
                b = buckets[q]
                break
        tmp[j] = b
        mb[j, M_R] = b - 1 if widen == 1 else min(mb[j, M_D], b - 1)
    return _policy_grouped(mb, n, lw, tmp)


@njit
def _policy_truncate(mb, n, lw):
    w = 1 << 30
    for j in range(n):
        w = min(w, mb[j, M_D] + 1)
    for j in range(n):
        mb[j, M_V] = w
        mb[j, M_R] = w - 1
        mb[j, M_LAUNCH] = 0
    lw[0] = w
    return 1


@njit
def _policy_fixed(mb, n, lw, fixed, widen, launch):
    """Every request at ``fixed`` - 1 drafts, verified in one launch of width ``launch`` (the
    kernel's padded query length: ``fixed`` except 3 -> 4 on AITER's MLA kernels)."""
    for j in range(n):
        mb[j, M_V] = launch
        mb[j, M_R] = fixed - 1 if widen == 1 else min(mb[j, M_D], fixed - 1)
        mb[j, M_LAUNCH] = 0
    lw[0] = launch
    return 1


@njit
def _policy_exact(mb, n, lw):
    """ragged and unsafe-derived: one launch, each request at its own width."""
    total = 0
    for j in range(n):
        mb[j, M_V] = mb[j, M_D] + 1
        mb[j, M_R] = mb[j, M_D]
        mb[j, M_LAUNCH] = 0
        total += mb[j, M_V]
    lw[0] = total // n
    return 1


@njit
def apply_policy(policy, mb, n, lw, tmp, buckets, fixed, widen, mla=0):
    """Turn the members' proposals into verify widths and launches; returns the launch count.
    ``mla`` = 1: a fixed width of 3 launches padded to 4 (AITER's MLA decode kernels)."""
    if policy == POL_PAD:
        return _policy_pad(mb, n, lw, widen)
    if policy == POL_SPLIT:
        return _policy_split(mb, n, lw, tmp)
    if policy == POL_BUCKET:
        return _policy_bucket(mb, n, lw, tmp, buckets, widen)
    if policy == POL_TRUNCATE:
        return _policy_truncate(mb, n, lw)
    if policy == POL_FIXED:
        return _policy_fixed(mb, n, lw, fixed, widen, 4 if (mla == 1 and fixed == 3) else fixed)
    return _policy_exact(mb, n, lw)

