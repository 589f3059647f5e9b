"""Prefill grid points timed over several token counts around each, not at one.

A dense model's prefill GEMMs pick their kernels by the exact row count, and a few counts run far
off their neighbours: on an H200 the Llama-3.1-8B took 15.25 ms for 448 tokens between 11.75 ms
at 416 and 12.12 ms at 480, while live prefills of 445 and 458 tokens took 11.25 and 11.71 ms
(``benchmarks/results/h200-2026-12-05/README.md``). A grid point that lands on such a count
spreads it over every length the lookup interpolates from it. ``specsched profile
--prefill-spread N`` therefore times each prefill grid point at ``N`` token counts spaced evenly
around it (:func:`spread_counts`) and keeps their median (:func:`combine`): on a curve that is
monotone over that span, the median of an odd number of counts placed symmetrically is the
centre count's own time, so the row changes only where single counts stand out.

The span is a quarter of the distance to the nearer neighbouring grid token on either side, so
the counts of two grid points never overlap and a step the grid marks with two adjacent counts
(a fused-MoE tile threshold, ``backends.aiter.profiling.prefill_grid``) is timed exactly. The
profile records ``N`` in its notes (:func:`spread_note`); ``specsched calibrate`` reads it back
(:func:`spread_of`) and times its prefill anchors the same way. Held-out points stay single
counts: they stand for one live prefill. Nothing here imports torch.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

__all__ = ["spread_counts", "combine", "measure", "spread_note", "spread_of", "NOTE_KEY"]

#: the key of the notes entry that records the spread (a dict among ``specsched.notes``)
NOTE_KEY = "prefill_spread"


def spread_counts(tokens: int, grid: Iterable[int], n: int) -> list[int]:
    """The token counts at which grid point ``tokens`` is timed: ``n`` (odd) counts spaced
    evenly over ``tokens +- w``, ``w`` a quarter of the distance to the nearer neighbour in
    ``grid`` (the distance to 0 below the smallest point; the lower gap alone above the
    largest), rounded to whole tokens, duplicates dropped, ``tokens`` always among them."""
    if n < 1 or n % 2 == 0:
        raise ValueError(f"the spread must be an odd count >= 1, got {n}")
    t = int(tokens)
    pts = sorted({int(g) for g in grid} | {t})
    i = pts.index(t)
    lo = pts[i - 1] if i > 0 else 0
    gaps = [t - lo] + ([pts[i + 1] - t] if i + 1 < len(pts) else [])
    w = min(gaps) // 4
    if n == 1 or w == 0:
        return [t]
    counts = np.rint(np.linspace(t - w, t + w, n)).astype(int)
    return sorted({max(1, int(c)) for c in counts} | {t})


def combine(per_count: Sequence[Sequence[float]]) -> tuple[float, float, float, int]:
    """(latency, p10, p90, samples) of a grid point from each count's timed samples: the median
    of the counts' medians, and the medians of their 10th and 90th percentiles (bounded by the
    latency), so p10..p90 stays the repeat noise of one count, not the spread between counts."""
    if not per_count or any(len(s) == 0 for s in per_count):
        raise ValueError("every count needs at least one timed sample")
    arrs = [np.asarray(s, dtype=np.float64) for s in per_count]
    med = float(np.median([np.median(a) for a in arrs]))
    p10 = float(np.median([np.percentile(a, 10) for a in arrs]))
    p90 = float(np.median([np.percentile(a, 90) for a in arrs]))
    return med, min(p10, med), max(p90, med), sum(len(a) for a in arrs)


def spread_note(n: int) -> dict[str, Any]:
    """The notes entry of a profile whose prefill rows were timed with spread ``n``."""
    return {NOTE_KEY: {"counts": int(n), "rule": (
        "each prefill grid row is the median over `counts` token counts spaced evenly within "
        "+- a quarter of the distance to the nearer neighbouring grid token (backends/"
        "prefill_spread.py); its p10/p90 are the medians of the counts' own")}}


def spread_of(meta: dict[str, Any]) -> int:
    """The spread a profile's prefill rows were timed with (1 when its notes do not say)."""
    for note in meta.get("notes") or []:
        if isinstance(note, dict) and NOTE_KEY in note:
            return int(note[NOTE_KEY]["counts"])
    return 1


def measure(runner: Any, tokens: int, prefix: int, reps: int, grid: Iterable[int],
            n: int) -> tuple[float, float, float, int]:
    """Time grid point (``tokens``, ``prefix``) on ``runner`` (one request's prefill, one untimed
    and ``reps`` timed launches per count) at :func:`spread_counts` and :func:`combine` them."""
    per_count = []
    for c in spread_counts(tokens, grid, n):
        ts = runner.prefill(np.array([c]), np.array([prefix]), reps=reps, warmup=1)
        per_count.append([t.latency_s for t in ts])
    return combine(per_count)
