"""The launch-size-dependent rates of the MLA decode and the flash prefill, read off measured curves.

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

Imports numpy only.
"""

from __future__ import annotations

import math

import numpy as np

from traces.errors import SpecschedError

__all__ = ["DECODE_CURVE", "FLASH_CURVE", "DECODE_FIELDS", "FLASH_FIELDS", "check_curves",
           "decode_bandwidth", "flash_rate"]

DECODE_CURVE = "mla_decode_curve"
FLASH_CURVE = "flash_curve"
#: the fields the estimate reads from each point (others are kept for the reader)
DECODE_FIELDS = ("programs", "keys_per_row", "bytes", "seconds")
FLASH_FIELDS = ("q", "prefix", "flops", "seconds")


def check_curves(rates: dict, where: str = "rates") -> None:
    """The optional curves of ``rates`` checked: each a non-empty list of objects whose fields
    (:data:`DECODE_FIELDS`, :data:`FLASH_FIELDS`) are positive finite numbers (a flash prefix
    may be 0).  Raises :class:`SpecschedError` naming ``where``, the point and the field."""
    for key, fields in ((DECODE_CURVE, DECODE_FIELDS), (FLASH_CURVE, FLASH_FIELDS)):
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


def _rate(curve: list, xk: str, yk: str, nk: str, x: float, y: float, y_log: bool) -> float:
    """The curve's rate (``nk`` per second) at ``(x, y)``: linear in ``ln x`` within each
    measured ``y``, then linear in ``y`` (``ln y`` when ``y_log``) across them, held at the ends."""
    acc: dict[tuple[float, float], list[float]] = {}
    for p in curve:
        a = acc.setdefault((float(p[yk]), float(p[xk])), [0.0, 0.0])
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
    return _rate(curve, "programs", "keys_per_row", "bytes", max(float(programs), 1.0),
                 max(float(keys_per_row), 1.0), True)


def flash_rate(curve: list, q: float, prefix: float) -> float:
    """FLOPs per second of a flash prefill launch of ``q`` query tokens per request over
    ``prefix`` cached tokens per request, from ``flash_curve`` (the module's rule)."""
    return _rate(curve, "q", "prefix", "flops", max(float(q), 1.0), max(float(prefix), 0.0),
                 False)
