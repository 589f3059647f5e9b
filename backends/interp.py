"""Multilinear evaluation of latency grids, compiled: exact on grid points, linear between them.

Beyond the grid each axis extrapolates linearly from its last segment, never downwards (below
the first point it holds the first value); every evaluation says whether it left the grid, so
that a summary can warn.  :func:`interp_prefill` adds the prefill rule below the first prefix
point (``backends.latency_table``'s module docstring).
"""

from __future__ import annotations

from backends.jit import njit

__all__ = ["interp2", "interp3", "interp_prefill"]


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
