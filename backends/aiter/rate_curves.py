"""Launch-size-dependent rates (MLA decode, flash prefill, fused MoE, GEMM) read off measured curves.

One achieved rate per kernel cannot follow a kernel whose efficiency depends on how much of the
GPU its launch fills: AITER's Triton MLA decode launches ``head groups x rows x KV splits``
programs (:func:`backends.aiter.mla_kernels.decode_programs`), 16 of them for one decode row, a
few hundred for 32 rows or more; the prefill's flash attention launches ``requests x heads x
ceil(q / 128)``.  ``benchmarks/bench_aiter_rates.py`` therefore measures each of the two kernels
alone on a small grid of launches and writes the points into the rates file (the ``"rates"``
object) as two optional lists:

* ``mla_decode_curve``: stage 1 of the decode alone, one request per row (width 1); each point
  ``{"programs", "keys_per_row", "bytes", "seconds", ...}`` -- the launch's programs, the mean
  keys a row reads, the bytes it moves (:func:`backends.aiter.estimate.decode_kernels`' count)
  and its median time;
* ``flash_curve``: one request's causal flash attention; each point ``{"q", "prefix", "flops",
  "seconds", ...}`` -- query tokens, cached prefix tokens, the FLOPs (``2 H (qk + v)`` per
  causal pair) and its median time.

The rule (:func:`decode_bandwidth`, :func:`flash_rate`): points at the same coordinates are
merged into one rate, their total bytes (FLOPs) over their total seconds.  For the decode, at
each measured ``keys_per_row`` the bandwidth is interpolated linearly in ``ln(programs)`` between
the measured program counts and held at the end values outside them; between two measured
``keys_per_row`` the two results are interpolated linearly in ``ln(keys_per_row)``, again held
at the ends.  The flash rate is the same with ``ln(q)`` in place of ``ln(programs)`` and the
prefix (linear, not logarithmic: it may be 0) in place of ``ln(keys_per_row)``.  Nothing here is
fitted: every value is a measured point's or lies on a segment between two of them.

Two more curves come from the rates file's ``"points"`` (the benchmark's every timed launch), not
from its ``"rates"`` object, so that files measured before them carry them too
(:func:`point_curves`, called by :func:`backends.aiter.estimate.load_rates`):

* ``moe_bw_curve``: the ``moe_bw`` points that carry ``tokens`` (both ``fused_moe`` calls at 1,
  4, 16, 64 rows); :func:`moe_bandwidth` is linear in ``ln(rows)``, held at the ends;
* ``gemm_bw_curve``: the ``gemm_bw`` points (cuBLAS at M 1 and 16, K 2048) with their weight
  bytes ``2 K N`` (K and N from the point's fields, else from its ``what``, ``linear M m K k N
  n``); :func:`gemm_bandwidth` is linear in ``ln(weight bytes)``, held at the ends.

Imports numpy only.
"""

from __future__ import annotations

import math
import re

import numpy as np

from traces.errors import SpecschedError

__all__ = ["DECODE_CURVE", "FLASH_CURVE", "MOE_CURVE", "GEMM_CURVE", "CURVE_FIELDS",
           "check_curves", "point_curves", "decode_bandwidth", "flash_rate", "moe_bandwidth",
           "gemm_bandwidth"]

DECODE_CURVE = "mla_decode_curve"
FLASH_CURVE = "flash_curve"
MOE_CURVE = "moe_bw_curve"
GEMM_CURVE = "gemm_bw_curve"
#: the fields the estimate reads from each curve's points (others are kept for the reader)
CURVE_FIELDS = {DECODE_CURVE: ("programs", "keys_per_row", "bytes", "seconds"),
                FLASH_CURVE: ("q", "prefix", "flops", "seconds"),
                MOE_CURVE: ("tokens", "bytes", "seconds"),
                GEMM_CURVE: ("weight_bytes", "bytes", "seconds")}
_LINEAR = re.compile(r"linear M (\d+) K (\d+) N (\d+)$")


def check_curves(rates: dict, where: str = "rates") -> None:
    """The optional curves of ``rates`` checked: each a non-empty list of objects whose fields
    (:data:`CURVE_FIELDS`) are positive finite numbers (a flash prefix may be 0).  Raises
    :class:`SpecschedError` naming ``where``, the point and the field."""
    for key, fields in CURVE_FIELDS.items():
        if key not in rates:
            continue
        curve = rates[key]
        if not isinstance(curve, list) or not curve:
            raise SpecschedError(f"{where}: rates.{key} must be a non-empty list of points")
        for i, p in enumerate(curve):
            if not isinstance(p, dict):
                raise SpecschedError(f"{where}: rates.{key}[{i}] must be an object")
            for f in fields:
                v = p.get(f)
                ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                if not ok or v < 0 or (v == 0 and f != "prefix"):
                    need = "a number >= 0" if f == "prefix" else "a positive number"
                    raise SpecschedError(f"{where}: rates.{key}[{i}].{f} must be {need} "
                                         f"(got {v!r})")


def point_curves(points: object, where: str = "rates") -> dict:
    """The ``moe_bw`` and ``gemm_bw`` curves (:data:`MOE_CURVE`, :data:`GEMM_CURVE`) of a rates
    file's ``"points"`` list: ``moe_bw`` points with ``tokens``, ``gemm_bw`` points whose K and N
    are known (fields ``k``, ``n``, else the ``what`` text).  A curve with no such point is left
    out (the single median rate prices that class).  Raises :class:`SpecschedError` naming
    ``where`` and the point when a value it takes is not a positive number."""
    out: dict[str, list] = {MOE_CURVE: [], GEMM_CURVE: []}
    for i, p in enumerate(points if isinstance(points, list) else []):
        if not isinstance(p, dict) or p.get("class") not in ("moe_bw", "gemm_bw"):
            continue
        if p["class"] == "moe_bw":
            if "tokens" not in p:
                continue
            key, q = MOE_CURVE, {f: p.get(f) for f in CURVE_FIELDS[MOE_CURVE]}
        else:
            m = _LINEAR.match(str(p.get("what", "")))
            k, n = p.get("k", m and int(m[2])), p.get("n", m and int(m[3]))
            if not (_positive(k) and _positive(n)):
                continue
            key, q = GEMM_CURVE, {"weight_bytes": 2 * k * n, "bytes": p.get("bytes"),
                                  "seconds": p.get("seconds")}
        for f, v in q.items():
            if not _positive(v):
                raise SpecschedError(f"{where}: points[{i}].{f} must be a positive number "
                                     f"(got {v!r})")
        out[key].append(q)
    return {key: c for key, c in out.items() if c}


def _positive(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _rate(curve: list, xk: str, nk: str, x: float, yk: str = "", y: float = 0.0,
          y_log: bool = False) -> float:
    """The curve's rate (``nk`` per second) at ``(x, y)``: linear in ``ln x`` within each
    measured ``y``, then linear in ``y`` (``ln y`` when ``y_log``) across them, held at the ends;
    without ``yk``, linear in ``ln x`` over all the points."""
    acc: dict[tuple[float, float], list[float]] = {}
    for p in curve:
        a = acc.setdefault((float(p[yk]) if yk else 0.0, float(p[xk])), [0.0, 0.0])
        a[0] += float(p[nk])
        a[1] += float(p["seconds"])
    ys = sorted({yy for yy, _ in acc})
    vals = []
    for yy in ys:
        xs = sorted(xx for y2, xx in acc if y2 == yy)
        r = [acc[(yy, xx)][0] / acc[(yy, xx)][1] for xx in xs]
        vals.append(float(np.interp(math.log(x), np.log(xs), r)))
    if len(ys) == 1:
        return vals[0]
    f = math.log if y_log else float
    return float(np.interp(f(y), [f(v) for v in ys], vals))


def decode_bandwidth(curve: list, programs: float, keys_per_row: float) -> float:
    """Bytes per second of an MLA decode stage-1 launch of ``programs`` programs whose rows read
    ``keys_per_row`` keys on average, from ``mla_decode_curve`` (the module's rule)."""
    return _rate(curve, "programs", "bytes", max(float(programs), 1.0), "keys_per_row",
                 max(float(keys_per_row), 1.0), True)


def flash_rate(curve: list, q: float, prefix: float) -> float:
    """FLOPs per second of a flash prefill launch of ``q`` query tokens per request over
    ``prefix`` cached tokens per request, from ``flash_curve`` (the module's rule)."""
    return _rate(curve, "q", "flops", max(float(q), 1.0), "prefix", max(float(prefix), 0.0))


def moe_bandwidth(curve: list, rows: float) -> float:
    """Bytes per second of the two ``fused_moe`` launches over ``rows`` rows, from
    ``moe_bw_curve``: linear in ``ln(rows)`` between the measured row counts, held at the ends."""
    return _rate(curve, "tokens", "bytes", max(float(rows), 1.0))


def gemm_bandwidth(curve: list, weight_bytes: float) -> float:
    """Bytes per second of a cuBLAS GEMM streaming ``weight_bytes`` of weights, from
    ``gemm_bw_curve``: linear in ``ln(weight bytes)`` between the measured sizes, held at the
    ends."""
    return _rate(curve, "weight_bytes", "bytes", max(float(weight_bytes), 1.0))
