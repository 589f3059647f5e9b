"""How many requests a missed whole-run check rests on, and which ones.

On a bursty trace a latency percentile can turn on a few requests. A request that finishes just
before a burst of prefills in one run and just after it in the other waits seconds longer there,
and a handful of such requests moves TPOT p90 or E2E p50 by several points while every other
request agrees within 1-2%. For each missed TTFT, TPOT or E2E check, :func:`fragile_checks`
gives simulated requests their live figure, the one whose own figure differs most in the miss's
direction first, until the check is within its target, and reports how many it took (at most
:data:`MAX_SHARE` of the requests), which ones, the check's value then, and how far apart the
live figures either side of the quantile are. Every request stays in both runs, so no quantile
moves by a change of rank alone. Only the requests whose live figure moved the check are named
and counted: one that differs a lot but sits on the near side of the quantile changes nothing.
When all :data:`MAX_SHARE` are not enough, those that moved it are still named, with the check
after them: a few outliers on a queueing edge, and what is left, a shift the requests share.
Found greedily, the count is an upper bound on the fewest such requests. It explains a miss; it
does not change the verdict.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pyarrow as pa

from analysis.metrics import table_latencies

MAX_SHARE = 0.05
QUANTILES = {"p50": 0.5, "p90": 0.9, "p99": 0.99}


def request_figures(requests: pa.Table) -> dict[str, dict[Any, float]]:
    """Per request id: ttft, tpot and e2e (s), as the run summary computes them
    (:func:`analysis.metrics.table_latencies`: unfinished requests +inf; tpot left out for
    one-token requests)."""
    ids = requests.column("request_id").to_pylist()
    lat = table_latencies(requests)
    return {m: {i: float(v) for i, v in zip(ids, lat[m]) if not math.isnan(v)}
            for m in ("ttft", "tpot", "e2e")}


def _diff(ref: np.ndarray, sim: np.ndarray, q: float) -> float:
    """The quantile's relative difference (%), as the run summary computes quantiles."""
    a, b = np.percentile(ref, q * 100), np.percentile(sim, q * 100)
    return float(b / a - 1.0) * 100.0


def _gap(ref: np.ndarray, q: float) -> float:
    """How far apart (%) the two live figures either side of the quantile's position are: where
    they are far apart, the quantile turns on which requests fall on each side."""
    v = np.sort(ref)
    lo = int(math.floor(q * (len(v) - 1)))
    hi = min(lo + 1, len(v) - 1)
    return float(v[hi] / v[lo] - 1.0) * 100.0 if v[lo] > 0 else math.inf


def resting_on(ref: dict[Any, float], sim: dict[Any, float], q: float, target: float,
               cap: int) -> dict[str, Any]:
    """The requests a quantile's difference rests on: ``{"requests": k, "ids": [...],
    "value_pct": the difference with their live figures}``, or ``{"more_than": cap,
    "value_pct": ..., "moved": [...]}`` when ``cap`` requests were not enough. ``ids`` and
    ``moved``: of the requests given their live figure, those whose figure changed the check
    (all of them where those alone would give another value);
    ``per_request_median_pct``: the median of the requests' own differences; ``live_gap_pct``
    (with ``requests``): how far apart the live figures either side of the quantile are. Only
    requests finished in both runs count."""
    ids = [i for i in ref if i in sim and math.isfinite(ref[i]) and math.isfinite(sim[i])]
    r = np.array([ref[i] for i in ids])
    s = np.array([sim[i] for i in ids])
    d = _diff(r, s, q)
    sign = 1.0 if d > 0 else -1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(r > 0, s / r - 1.0, 0.0)
    own = rel * sign
    median = float(np.median(rel)) * 100.0 if len(rel) else None
    gap = _gap(r, q)
    order = np.argsort(-own, kind="stable")
    start, taken, moved = s, [], []
    s = s.copy()
    for j in order[:cap]:
        s[j] = r[j]
        taken.append(j)
        before, d = d, _diff(r, s, q)
        if d != before:
            moved.append(j)
        if abs(d) <= target:
            break
    # the movers alone: a request that moved nothing when it was taken could matter once others
    # are back, so they stand alone only where they alone give the same check
    alone = start.copy()
    alone[moved] = r[moved]
    d_alone = _diff(r, alone, q)
    named = moved if abs(d_alone - d) <= 1e-9 else taken
    out = {"value_pct": d, "per_request_median_pct": median}
    if abs(d) <= target:
        return out | {"requests": len(named), "ids": [ids[j] for j in named], "live_gap_pct": gap}
    return out | {"more_than": cap, "moved": [ids[j] for j in named]}


def fragile_checks(checks: dict[str, dict], reference: pa.Table, profile: pa.Table,
                   target: float) -> dict[str, dict]:
    """For each missed ``ttft_*``, ``tpot_*`` or ``e2e_*`` check: :func:`resting_on` over the two
    runs' requests tables (reference: the live run; profile: the simulated one)."""
    ref, sim = request_figures(reference), request_figures(profile)
    cap = max(1, int(MAX_SHARE * reference.num_rows))
    out = {}
    for name, c in sorted(checks.items()):
        metric, _, q = name.partition("_")
        if metric in ref and q in QUANTILES and c.get("pass") is False:
            out[name] = resting_on(ref[metric], sim[metric], QUANTILES[q], target, cap)
    return out


def fragile_line(fragile: dict[str, dict]) -> str | None:
    """The report's sentence on it, or None when no latency check was missed."""
    if not fragile:
        return None
    parts = []
    for name, f in fragile.items():
        med = f"per request {f['per_request_median_pct']:+.2f}% at the median"
        if "more_than" in f:
            moved = f.get("moved") or []
            n = len(moved)
            lead = (f"{', '.join(str(i) for i in moved)} move{'s' * (n == 1)} it to "
                    f"{f['value_pct']:+.2f}% with {'their' if n != 1 else 'its'} live "
                    f"figure{'s' * (n != 1)}; " if moved else "")
            parts.append(f"{name} on more than {f['more_than']} ({lead}{med})")
        else:
            ids = ", ".join(str(i) for i in f["ids"])
            n = f["requests"]
            parts.append(f"{name} on {n} request{'s' * (n != 1)} ({ids}: {f['value_pct']:+.2f}% "
                         f"with {'their' if n != 1 else 'its'} live figure{'s' * (n != 1)}; {med}; "
                         f"the live figures either side of the quantile {f['live_gap_pct']:.1f}% "
                         f"apart)")
    return ("Requests each missed latency check rests on (simulated requests given their live "
            "figures, the one that differs most first, until the check is within target; at most "
            f"{MAX_SHARE:.0%} of the requests; named: those whose live figure moved it): "
            + "; ".join(parts) + ".")
