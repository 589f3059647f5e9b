"""Serving metrics computed from a run's result tables only (pure functions, numpy).

Definitions (docs/analysis.md explains each for users):

- **TTFT** = ``first_token_s - arrival_s``; **E2E** = ``finish_s - arrival_s``; **queueing
  delay** = ``admit_s - arrival_s`` (first admission).
- **TPOT** = ``(finish_s - first_token_s) / (output_tokens - 1)``; undefined (left out of the
  distribution, and counted as meeting any TPOT SLO) for one-token requests.
- A request that never finished (null times) has infinite latencies: it counts against every
  percentile and SLO instead of silently vanishing.
- **Inter-token gaps** come from ``request_steps.parquet``.  A request's deliveries are its first
  token (``first_token_s``) and then one per verify step (``time_s``, ``tokens`` committed).
  *Per-step view*: the gap between consecutive deliveries, one value per verify step.
  *Per-token view*: a step's gap is spread evenly over the tokens it delivered (a burst of k
  tokens after a gap g gives k values g/k), the convention of SGLang's ``bench_serving`` ITL;
  so one request's per-token gaps add up to ``finish_s - first_token_s`` and their mean is its
  TPOT.
- **Duration** = latest ``finish_s`` minus earliest ``arrival_s``; throughput and goodput are per
  second of it.
- **Goodput**: requests that finished and met both their TTFT and TPOT thresholds (the
  per-request ``ttft_slo_s`` / ``tpot_slo_s`` where present, else the global threshold given;
  no threshold at all = met), per second and as a fraction of all requests.
- Verify-side figures come from the ``verify`` rows of ``steps.parquet``: **verify slots** =
  ``tokens + graph_pad_slots`` (every query row the kernel ran: ``tokens`` holds the requests'
  rows, width padding included); **verify efficiency** = ``committed_tokens / slots``;
  **padding waste** = ``(padded_slots + graph_pad_slots) / slots``, the sum of **width padding**
  (``padded_slots / slots``) and **graph padding** (``graph_pad_slots / slots``);
  **acceptance length** = ``committed_tokens / bs`` (tokens committed per request per verify
  step, bonus token included); **launches per iteration** = verify launches / decode
  iterations; an iteration **mixes widths** when its ``iter_distinct_widths`` > 1.

Percentiles use linear interpolation between order statistics (numpy's default) and are taken
over all requests, unfinished ones as +inf.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from analysis.results import RunResults

__all__ = ["Dist", "quantile", "dist", "col", "kind_mask", "kind_names", "duration_s",
           "request_latencies", "table_latencies", "inter_token_gaps", "goodput", "verify_stats",
           "iteration_stats", "breakdown", "summarize", "LATENCY_METRICS"]

#: Per-request latency metrics (name -> description), the ones an SLO can name.
LATENCY_METRICS = {
    "ttft": "time to first token",
    "tpot": "time per output token after the first",
    "e2e": "end-to-end latency",
    "queue": "queueing delay before the first admission",
    "itl": "inter-token gap, per-token view",
    "step_gap": "inter-token gap, per-step view (gap between deliveries)",
}


def col(table: pa.Table, name: str, dtype=np.float64, fill: float = math.nan) -> np.ndarray:
    """A column as a numpy array of ``dtype``; nulls become ``fill``."""
    c = table[name]
    if c.null_count:
        c = pc.fill_null(c, fill)
    return np.asarray(c.to_numpy(zero_copy_only=False), dtype=dtype)


def quantile(sorted_values: np.ndarray, q: float) -> float:
    """Linear-interpolation quantile (q in [0, 1]) of already sorted values; +inf values allowed."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    h = (n - 1) * q
    lo = int(math.floor(h))
    hi = min(lo + 1, n - 1)
    a, b = float(sorted_values[lo]), float(sorted_values[hi])
    if h == lo or a == b:
        return a
    if math.isinf(a) or math.isinf(b):
        return math.inf
    return a + (h - lo) * (b - a)


@dataclass(frozen=True)
class Dist:
    """Summary of a distribution: count and the usual statistics (seconds for latencies)."""

    n: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float

    def to_dict(self) -> dict[str, Any]:
        return {k: _json_num(getattr(self, k)) for k in ("n", "mean", "p50", "p90", "p99", "max")}


def _json_num(x):
    if isinstance(x, (int, np.integer)):
        return int(x)
    x = float(x)
    return x if math.isfinite(x) else None


def dist(values: np.ndarray) -> Dist:
    """Dist of values; NaN entries are left out, +inf entries count (as worse than anything)."""
    v = np.asarray(values, dtype=np.float64)
    v = np.sort(v[~np.isnan(v)])
    if len(v) == 0:
        return Dist(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    mean = float(np.mean(v)) if np.all(np.isfinite(v)) else math.inf
    return Dist(len(v), mean, quantile(v, 0.5), quantile(v, 0.9), quantile(v, 0.99), float(v[-1]))


def request_latencies(run: RunResults) -> dict[str, np.ndarray]:
    """Per-request ttft, tpot, e2e, queue (seconds, in requests.parquet order).

    Unfinished requests get +inf; tpot is NaN for one-token requests (undefined).
    """
    return table_latencies(run.requests)


def table_latencies(r: pa.Table) -> dict[str, np.ndarray]:
    """:func:`request_latencies` of a requests table (``requests.parquet``) itself."""
    arrival = col(r, "arrival_s")
    admit = col(r, "admit_s")
    first = col(r, "first_token_s")
    finish = col(r, "finish_s")
    out = col(r, "output_tokens")
    inf = math.inf
    ttft = np.where(np.isnan(first), inf, first - arrival)
    e2e = np.where(np.isnan(finish), inf, finish - arrival)
    queue = np.where(np.isnan(admit), inf, admit - arrival)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = (finish - first) / (out - 1)
    tpot = np.where(out <= 1, math.nan, np.where(np.isnan(finish) | np.isnan(first), inf, tpot))
    return {"ttft": ttft, "tpot": tpot, "e2e": e2e, "queue": queue}


def inter_token_gaps(run: RunResults) -> tuple[np.ndarray, np.ndarray] | None:
    """(per-step gaps, per-token gaps) in seconds, or None without request_steps.parquet.

    Per-step: one gap per verify step (from the previous delivery of the same request, the first
    token being the first delivery).  Per-token: each step's gap divided evenly over its tokens.
    Steps that committed no token are left out of the per-token view.
    """
    rs = run.request_steps
    if rs is None:
        return None
    req = col(rs, "request", np.int64, -1)
    t = col(rs, "time_s")
    k = col(rs, "tokens", np.int64, 0)
    if len(req) == 0:
        return np.zeros(0), np.zeros(0)
    order = np.lexsort((t, req))
    req, t, k = req[order], t[order], k[order]
    first = col(run.requests, "first_token_s")
    prev = np.empty_like(t)
    prev[0] = first[req[0]]
    same = req[1:] == req[:-1]
    prev[1:] = np.where(same, t[:-1], first[req[1:]])
    step_gaps = t - prev
    keep = k > 0
    token_gaps = np.repeat(step_gaps[keep] / k[keep], k[keep])
    return step_gaps, token_gaps


def goodput(run: RunResults, *, ttft_s: float | None = None, tpot_s: float | None = None,
            lat: dict[str, np.ndarray] | None = None) -> dict[str, Any] | None:
    """Requests meeting both their TTFT and TPOT thresholds, per second and as a fraction.

    Per-request ``ttft_slo_s``/``tpot_slo_s`` take precedence where present (not null); the
    global ``ttft_s``/``tpot_s`` apply elsewhere.  Returns None when no request has any threshold.
    """
    r = run.requests
    n = r.num_rows
    lat = lat or request_latencies(run)
    thr = {}
    for name, glob in (("ttft", ttft_s), ("tpot", tpot_s)):
        per = col(r, f"{name}_slo_s") if f"{name}_slo_s" in r.column_names else np.full(n, math.nan)
        thr[name] = np.where(np.isnan(per), math.nan if glob is None else float(glob), per)
    if n == 0 or (np.all(np.isnan(thr["ttft"])) and np.all(np.isnan(thr["tpot"]))):
        return None
    finished = np.isfinite(lat["e2e"])
    ok_ttft = np.isnan(thr["ttft"]) | (lat["ttft"] <= thr["ttft"])
    tp = lat["tpot"]
    ok_tpot = np.isnan(thr["tpot"]) | np.isnan(tp) | (tp <= thr["tpot"])
    good = finished & ok_ttft & ok_tpot
    dur = duration_s(run)
    count = int(np.sum(good))
    return {
        "good_requests": count,
        "fraction": count / n,
        "req_s": count / dur if dur > 0 else math.nan,
        "ttft_ok_fraction": float(np.mean(finished & ok_ttft)),
        "tpot_ok_fraction": float(np.mean(finished & ok_tpot)),
        "thresholds": {"ttft_s": ttft_s, "tpot_s": tpot_s,
                       "per_request_ttft": int(np.sum(~np.isnan(col(r, "ttft_slo_s"))))
                       if "ttft_slo_s" in r.column_names else 0,
                       "per_request_tpot": int(np.sum(~np.isnan(col(r, "tpot_slo_s"))))
                       if "tpot_slo_s" in r.column_names else 0},
    }


def duration_s(run: RunResults) -> float:
    """Latest finish minus earliest arrival (0 for an empty run)."""
    r = run.requests
    if r.num_rows == 0:
        return 0.0
    arrival = col(r, "arrival_s")
    finish = col(r, "finish_s")
    end = np.nanmax(finish) if np.any(~np.isnan(finish)) else np.nanmax(arrival)
    return float(end - np.nanmin(arrival))


def kind_mask(steps: pa.Table, kind: str) -> np.ndarray:
    """Rows of steps.parquet whose ``kind`` is ``kind`` (plain or dictionary-encoded strings)."""
    c = steps["kind"]
    if pa.types.is_dictionary(c.type):
        c = c.cast(pa.string())
    return np.asarray(pc.equal(c, kind).to_numpy(zero_copy_only=False), dtype=bool)


def kind_names(steps: pa.Table) -> list[str]:
    """The distinct values of steps.parquet's ``kind`` column, sorted (kinds added to the engine
    later, such as ``draft_extend``, included)."""
    c = steps["kind"]
    if pa.types.is_dictionary(c.type):
        c = c.cast(pa.string())
    return sorted(str(k) for k in pc.unique(c).to_pylist() if k is not None)


def verify_stats(run: RunResults) -> dict[str, Any]:
    """Slots, padding, efficiency, acceptance, launches and graph use of the verify phase."""
    s = run.steps
    v = kind_mask(s, "verify")
    tokens = col(s, "tokens", np.int64, 0)[v]
    pad = col(s, "padded_slots", np.int64, 0)[v]
    gpad = col(s, "graph_pad_slots", np.int64, 0)[v]
    committed = col(s, "committed_tokens", np.int64, 0)[v]
    bs = col(s, "bs", np.int64, 0)[v]
    slots = int(tokens.sum() + gpad.sum())  # tokens already hold the width padding
    graph = np.asarray(s["graph"].to_numpy(zero_copy_only=False), dtype=bool)
    out: dict[str, Any] = {
        "launches": int(v.sum()),
        "slots": slots,
        "real_rows": int(tokens.sum() - pad.sum()),
        "padded_slots": int(pad.sum()),
        "graph_pad_slots": int(gpad.sum()),
        "committed_tokens": int(committed.sum()),
        "verify_efficiency": float(committed.sum() / slots) if slots else math.nan,
        "padding_waste": float((pad.sum() + gpad.sum()) / slots) if slots else math.nan,
        "width_pad_frac": float(pad.sum() / slots) if slots else math.nan,
        "graph_pad_frac": float(gpad.sum() / slots) if slots else math.nan,
        "accept_len_mean": float(committed.sum() / bs.sum()) if bs.sum() else math.nan,
        "violations": int(col(s, "violations", np.int64, 0).sum()),
        "violating_launches": int(np.sum(col(s, "violations", np.int64, 0)[v] > 0)),
    }
    out["violation_row_frac"] = (out["violations"] / out["real_rows"]) if out["real_rows"] else 0.0
    launches = {}
    for kind in ("prefill", "draft", "verify") + tuple(k for k in kind_names(s)
                                                     if k not in ("prefill", "draft", "verify")):
        m = kind_mask(s, kind)
        launches[kind] = {"graph": int(np.sum(graph & m)), "eager": int(np.sum(~graph & m))}
    out["launches_by_kind"] = launches
    return out


def iteration_stats(run: RunResults) -> dict[str, Any]:
    """Per decode iteration: verify launches, width mixing, distinct widths distribution."""
    s = run.steps
    v = kind_mask(s, "verify")
    rep = col(s, "replica", np.int64, 0)
    it = col(s, "iteration", np.int64, 0)
    idw = col(s, "iter_distinct_widths", np.int64, 0)
    all_keys = rep * (1 << 40) + it
    keys = all_keys[v]
    if len(keys) == 0:
        return {"iterations": 0, "verify_launches_per_iter": math.nan,
                "launches_per_iter": math.nan, "mixed_iter_frac": math.nan,
                "iter_distinct_widths": {}, "launch_distinct_widths": {}}
    uniq, first_idx, counts = np.unique(keys, return_index=True, return_counts=True)
    per_iter = idw[v][first_idx]
    all_launches = np.isin(all_keys, uniq)
    vals, cnt = np.unique(per_iter, return_counts=True)
    lvals, lcnt = np.unique(col(s, "distinct_widths", np.int64, 0)[v], return_counts=True)
    return {
        "iterations": int(len(uniq)),
        "verify_launches_per_iter": float(counts.mean()),
        "launches_per_iter": float(all_launches.sum() / len(uniq)),
        "max_verify_launches_per_iter": int(counts.max()),
        "mixed_iter_frac": float(np.mean(per_iter > 1)),
        "iter_distinct_widths": {int(a): int(b) for a, b in zip(vals, cnt)},
        "launch_distinct_widths": {int(a): int(b) for a, b in zip(lvals, lcnt)},
    }


def breakdown(run: RunResults, column: str, *, ttft_s: float | None = None,
              tpot_s: float | None = None, top: int = 20,
              lat: dict[str, np.ndarray] | None = None) -> list[dict[str, Any]] | None:
    """Per value of ``column`` (``category`` or ``tenant``): requests, latency percentiles,
    goodput and acceptance, most frequent values first (at most ``top``; ties by name).

    None when the column is absent or entirely null.  Acceptance length here is per request
    (``(accepted_tokens + steps) / steps`` summed over the class), since steps.parquet does not
    say which class a launch served.
    """
    r = run.requests
    if column not in r.column_names or r[column].null_count == r.num_rows:
        return None
    c = r[column]
    if pa.types.is_dictionary(c.type):
        c = c.cast(pa.string())
    labels = np.asarray(pc.fill_null(c, "(none)").to_numpy(zero_copy_only=False), dtype=object)
    lat = lat or request_latencies(run)
    per_ttft = col(r, "ttft_slo_s") if "ttft_slo_s" in r.column_names else None
    per_tpot = col(r, "tpot_slo_s") if "tpot_slo_s" in r.column_names else None
    thr_t = np.full(r.num_rows, math.nan if ttft_s is None else float(ttft_s))
    thr_p = np.full(r.num_rows, math.nan if tpot_s is None else float(tpot_s))
    if per_ttft is not None:
        thr_t = np.where(np.isnan(per_ttft), thr_t, per_ttft)
    if per_tpot is not None:
        thr_p = np.where(np.isnan(per_tpot), thr_p, per_tpot)
    finished = np.isfinite(lat["e2e"])
    good = (finished & (np.isnan(thr_t) | (lat["ttft"] <= thr_t))
            & (np.isnan(thr_p) | np.isnan(lat["tpot"]) | (lat["tpot"] <= thr_p)))
    any_thr = bool(np.any(~np.isnan(thr_t)) or np.any(~np.isnan(thr_p)))
    steps = col(r, "steps", np.int64, 0)
    acc = col(r, "accepted_tokens", np.int64, 0)
    labels = labels.astype(str)
    values, counts = np.unique(labels, return_counts=True)
    order = sorted(range(len(values)), key=lambda i: (-counts[i], values[i]))[:top]
    rows = []
    for i in order:
        m = labels == values[i]
        st = steps[m].sum()
        rows.append({
            column: str(values[i]),
            "requests": int(m.sum()),
            "finished": int(finished[m].sum()),
            "ttft_p50_s": dist(lat["ttft"][m]).p50, "ttft_p99_s": dist(lat["ttft"][m]).p99,
            "tpot_p50_s": dist(lat["tpot"][m]).p50, "tpot_p99_s": dist(lat["tpot"][m]).p99,
            "e2e_p99_s": dist(lat["e2e"][m]).p99,
            "goodput_frac": float(good[m].mean()) if any_thr else None,
            "accept_len_mean": float((acc[m].sum() + st) / st) if st else None,
        })
    return rows


def summarize(run: RunResults, *, ttft_s: float | None = None,
              tpot_s: float | None = None) -> dict[str, Any]:
    """Every headline metric of a run as a JSON-ready dict (non-finite numbers become None).

    ``ttft_s``/``tpot_s``: global goodput thresholds (per-request SLO columns take precedence).
    """
    r = run.requests
    lat = request_latencies(run)
    dur = duration_s(run)
    finished = np.isfinite(lat["e2e"])
    out_tok = col(r, "output_tokens", np.int64, 0)
    in_tok = col(r, "prompt_tokens", np.int64, 0)
    gaps = inter_token_gaps(run)
    acc = col(r, "accepted_tokens", np.int64, 0).sum()
    ver = col(r, "verified_drafts", np.int64, 0).sum()
    out: dict[str, Any] = {
        "name": run.name,
        "requests": r.num_rows,
        "finished": int(finished.sum()),
        "duration_s": dur,
        "throughput_tok_s": float(out_tok[finished].sum() / dur) if dur > 0 else math.nan,
        "throughput_req_s": float(finished.sum() / dur) if dur > 0 else math.nan,
        "input_tok_s": float(in_tok[finished].sum() / dur) if dur > 0 else math.nan,
        "ttft_s": dist(lat["ttft"]).to_dict(),
        "tpot_s": dist(lat["tpot"]).to_dict(),
        "e2e_s": dist(lat["e2e"]).to_dict(),
        "queue_s": dist(lat["queue"]).to_dict(),
        "max_gap_s": dist(np.where(finished, col(r, "max_gap_s"), math.inf)).to_dict(),
        "step_gap_s": dist(gaps[0]).to_dict() if gaps is not None else None,
        "itl_s": dist(gaps[1]).to_dict() if gaps is not None else None,
        "goodput": goodput(run, ttft_s=ttft_s, tpot_s=tpot_s, lat=lat),
        "drafted_tokens": int(col(r, "drafted_tokens", np.int64, 0).sum()),
        "verified_drafts": int(ver),
        "accepted_tokens": int(acc),
        "acceptance_rate": float(acc / ver) if ver else math.nan,
        "truncated_drafts": int(col(r, "truncated_drafts", np.int64, 0).sum()),
        "retractions": int(col(r, "retractions", np.int64, 0).sum()),
        "retracted_requests": int(np.sum(col(r, "retractions", np.int64, 0) > 0)),
        "verify": verify_stats(run),
        "iterations": iteration_stats(run),
        "by_category": breakdown(run, "category", ttft_s=ttft_s, tpot_s=tpot_s, lat=lat),
        "by_tenant": breakdown(run, "tenant", ttft_s=ttft_s, tpot_s=tpot_s, lat=lat),
    }
    return _clean(out)


def _clean(x):
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x
