"""A prefill line: one request's prefill time at every token count, read at the exact count.

This module also holds :func:`prefill_lookup`, the prefill lookup the table and the compiled
engine both call: the grid with its MoE and wave terms, and the line where it has the count.

A dense model's prefill time is a staircase in the token count, not a line: the GEMMs' tiles and
the attention launch change shape at particular counts. On Llama-3.1-8B on the H200 a prefill of
448 tokens took 15.25 ms and one of 512 took 12.06 ms, and 512 ran 12.06 ms against 14.05 ms at
544. A prefill grid every 32 or 256 tokens interpolates across those steps; the live prefills
between its points err by several percent either way, and a denser grid was measured to be
worse, not better (docs/backends.md, *The denser grid, measured: worse*). The exact counts
repeat across GPUs and days: at the 233 counts where both a line recorded on one H200 and the
live runs of other H200s hold prefills, live / line has a mean absolute deviation of 0.46%
about its median (benchmarks/results/h200-2026-12-05b/README.md).

So a profile may carry ``split == "line"`` rows (:mod:`backends.profile_file`): one-request
prefills at prefix 0 at consecutive token counts (``specsched profile --prefill-tokens 1,...,N
--prefill-prefix 0``, then ``benchmarks/profile_take_rows.py --add-line`` puts them beside a
profile's grid at its level). Within the line's counts a prefill pass of ``T`` tokens at
attention-equivalent prefix ``p`` is timed as

    line(T) + grid(T, p) - grid(T, 0)

the line giving the cost of ``T`` tokens at no prefix and the prefill grid (with its MoE and
wave terms) the extra cost of attending the prefix, which grows smoothly with ``p``. The line is
first put at the grid's level (:func:`leveled`): at each grid token within it, scaled to the
grid's prefix-0 value there, the scale linear in the count between them. The grid's points are
then reproduced exactly, and a line recorded on another GPU or day brings only its shape (the
2026-12-05 line ran 0.6% above the shipped grid at 1,024 tokens and 1.0% below it at 32). A pass of
several requests has a negative equivalent prefix (less attention than one request of ``T``
tokens) and the grid's rule below its first prefix gives that share. Between two line counts
(a token count is an integer, so only through an average) the line is linear. Outside the
line's counts the grid alone answers. The line is not made monotone: its steps are measured.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.interp import _locate, interp_prefill
from backends.jit import njit
from backends.moe_prefill import prefill_block_term
from backends.prefill_waves import prefill_wave_term

__all__ = ["line_arrays", "line_at", "leveled", "prefill_lookup"]


def line_arrays(tokens: Any, latency_s: Any, where: str = "prefill line"
                ) -> tuple[np.ndarray, np.ndarray]:
    """The line's (token counts, seconds) as the lookup reads them: sorted by count, contiguous
    float64; empty arrays for no line. Refuses a count given twice, or a latency not finite and
    positive."""
    t = np.asarray(tokens, dtype=np.float64).ravel()
    v = np.asarray(latency_s, dtype=np.float64).ravel()
    if t.shape != v.shape:
        raise ValueError(f"{where}: {t.size} token counts but {v.size} latencies")
    if not t.size:
        return np.zeros(0), np.zeros(0)
    order = np.argsort(t, kind="stable")
    t, v = t[order], v[order]
    if np.any(np.diff(t) <= 0):
        dup = t[1:][np.diff(t) <= 0][0]
        raise ValueError(f"{where}: token count {dup:g} given twice")
    if not np.all(np.isfinite(v)) or np.any(v <= 0):
        raise ValueError(f"{where}: latencies must be finite and > 0")
    return np.ascontiguousarray(t), np.ascontiguousarray(v)


@njit
def line_at(lt, lv, tokens):
    """The line's seconds at ``tokens`` (linear between its counts) and whether it holds that
    count; ``(0.0, False)`` outside its counts or with no line."""
    n = lt.shape[0]
    if n == 0 or tokens < lt[0] or tokens > lt[n - 1]:
        return 0.0, False
    if n == 1:
        return lv[0], True
    i, w, _ = _locate(lt, tokens)  # within the counts: 0 <= w <= 1
    if w >= 1.0:  # the last count, exactly as measured
        return lv[i + 1], True
    return lv[i] + w * (lv[i + 1] - lv[i]), True


def leveled(lt: np.ndarray, lv: np.ndarray, grid_tokens: np.ndarray, grid_at0: np.ndarray
            ) -> tuple[np.ndarray, dict[str, Any]]:
    """The line put at the grid's level, and what ``LatencyTable.source["prefill_line"]`` says
    of it. At each grid token within the line's counts the level is the grid's prefix-0 value
    over the line's there; between them it is linear in the count, beyond them held. The
    grid's own points are then reproduced exactly and the line gives only the shape between
    them. With no grid token within the line, the line is kept as it is, and the source says
    so."""
    inside = (grid_tokens >= lt[0]) & (grid_tokens <= lt[-1])
    gt = grid_tokens[inside]
    level = np.array([g / line_at(lt, lv, float(t))[0] for t, g in zip(gt, grid_at0[inside])])
    out = {"counts": int(lt.size), "tokens": [int(lt[0]), int(lt[-1])],
           "rule": "line(T) x level(T) + grid(T, prefix) - grid(T, 0) within the line's counts; "
                   "level(T): the grid's prefix-0 value over the line's at the grid's tokens, "
                   "linear between them"}
    if not gt.size:
        out["level"] = "none: no grid token within the line's counts; the line as recorded"
        return lv, out
    out["level_at_grid_tokens"] = {str(int(t)): round(float(v), 6) for t, v in zip(gt, level)}
    return np.ascontiguousarray(lv * np.interp(lt, gt, level)), out


@njit
def _grid_prefill(a0, a1, v, moe_cost, moe_prm, wave_cost, wave_prm, tokens, prefix):
    """The prefill grid's seconds at (tokens, prefix) with its MoE and wave terms, and whether
    the lookup left the grid."""
    value, outside = interp_prefill(a0, a1, v, tokens, prefix)
    value += prefill_block_term(a0, moe_cost, moe_prm, tokens)
    value += prefill_wave_term(a0, a1, wave_cost, wave_prm, tokens, prefix)
    return value, outside


@njit
def prefill_lookup(a0, a1, v, moe_cost, moe_prm, wave_cost, wave_prm, line_tok, line_val,
                   tokens, prefix):
    """Seconds of a prefill pass at (``tokens``, attention-equivalent ``prefix``) on a prefill
    grid (axes ``a0``, ``a1``, values ``v``): the bilinear value (:func:`backends.interp.
    interp_prefill`) plus the MoE block term and the attention wave term between grid tokens
    (:mod:`backends.moe_prefill`, :mod:`backends.prefill_waves`; each 0 where it does not
    apply), and whether the lookup left the grid.  Within a prefill line's counts (``line_tok``,
    ``line_val``; empty for none) the line's value at ``tokens`` replaces the grid's at prefix 0
    (:mod:`backends.prefill_line`).  The table and the compiled engine both call it."""
    value, outside = _grid_prefill(a0, a1, v, moe_cost, moe_prm, wave_cost, wave_prm, tokens,
                                   prefix)
    line, hit = line_at(line_tok, line_val, tokens)
    if hit:
        at0, _ = _grid_prefill(a0, a1, v, moe_cost, moe_prm, wave_cost, wave_prm, tokens, 0.0)
        value = max(line + value - at0, 0.05 * line)
    return value, outside
