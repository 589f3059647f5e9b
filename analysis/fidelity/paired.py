"""Each request's simulated latency against its own live latency: the profile's bias per request.

A whole-run percentile compares two distributions, and where the live one has a gap at the
quantile (two clusters of requests) a shift of 1% in every pass can move the percentile by tens
of percent while every request agrees within 1-2% (``fragile``, ``jitter``, ``offset``). Paired
by request id, each request's ``simulated / live - 1`` does not change with rank: its median is
the bias a typical request sees, its p10 and p90 how far single requests scatter, and its share
within the whole-run target how many requests the simulation times well. The same figures
between the live run and a repeat of it (the same requests again on a GPU) are the floor under
them. These are figures, not checks: they say which misses are the profile's and which the
quantile's.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa

from analysis.fidelity.fragile import request_figures

__all__ = ["METRICS", "paired", "paired_with_repeats"]

#: the per-request figures compared (``analysis.metrics.table_latencies``' names)
METRICS = ("ttft", "tpot", "e2e")


def _one(ref: dict[Any, float], other: dict[Any, float], target_pct: float) -> dict[str, Any]:
    """Paired differences (%) over the requests finished in both with a positive live figure."""
    ids = [i for i in ref if i in other and math.isfinite(ref[i]) and math.isfinite(other[i])
           and ref[i] > 0]
    if not ids:
        return {"requests": 0, "median_pct": None, "p10_pct": None, "p90_pct": None,
                "within_target_share": None}
    r = np.array([ref[i] for i in ids])
    o = np.array([other[i] for i in ids])
    d = (o / r - 1.0) * 100.0
    return {"requests": len(ids), "median_pct": float(np.median(d)),
            "p10_pct": float(np.percentile(d, 10)), "p90_pct": float(np.percentile(d, 90)),
            "within_target_share": float(np.mean(np.abs(d) <= target_pct))}


def paired(reference: pa.Table, other: pa.Table, target_pct: float) -> dict[str, dict]:
    """Per metric (:data:`METRICS`): ``other``'s requests against ``reference``'s, by request
    id: ``requests`` compared, ``median_pct``, ``p10_pct`` and ``p90_pct`` of ``other / reference
    - 1`` and ``within_target_share``, the share of requests within ``target_pct``. A request
    unfinished in either run, or with no TPOT (one output token), is left out of that metric."""
    ref, oth = request_figures(reference), request_figures(other)
    return {m: _one(ref[m], oth[m], target_pct) for m in METRICS}


def paired_with_repeats(reference: pa.Table, profile: pa.Table, repeats: list[pa.Table],
                        target_pct: float) -> dict[str, dict]:
    """:func:`paired` of the profile run against the reference, each metric with ``repeat``:
    the same figures for every repeat of the reference against it, and ``repeat_median_pct``,
    the largest absolute median of those (the floor under ``median_pct``); no ``repeat`` keys
    without repeats."""
    out = paired(reference, profile, target_pct)
    if repeats:
        reps = [paired(reference, t, target_pct) for t in repeats]
        for m in METRICS:
            out[m]["repeats"] = [r[m] for r in reps]
            meds = [abs(r[m]["median_pct"]) for r in reps if r[m]["median_pct"] is not None]
            out[m]["repeat_median_pct"] = max(meds) if meds else None
    return out
