"""The report's engine-state figures: KV-cache use, running and queued requests, and where the
GPU's time went by pass kind, over simulated time (per replica when a run has several).

- **Queued** at time t: requests that arrived (``arrival_s <= t``) and were not yet admitted
  (``admit_s > t`` or never).  **Running**: admitted and not finished.  ``admit_s`` is the first
  admission, so a retracted request still counts as running while it waits to be prefilled
  again.  Each is drawn as its peak per time bin (120 bins): the most requests queued (running)
  at any instant of the bin, exact from the event times.
- **KV use**: the most KV pages in use (``kv_pages_used`` of steps.parquet) by a pass starting in
  each time bin (120 bins), as a fraction of the replica's pool (``kv_capacity_tokens //
  page_size`` from summary.json) when the pool is known, else in pages.
- **Busy by kind**: seconds of passes of each ``kind`` (any kind found in steps.parquet, known or
  not) per second of the bin, per replica: 1.0 means the replica never idled.
"""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow as pa
from matplotlib.ticker import MaxNLocator

from analysis.metrics import col
from analysis.plots_base import (MAX_PANELS, binned_max, binned_sum, centers, kind_color,
                                 run_color, run_span, subplots, svg, time_bins)
from analysis.results import RunResults

__all__ = ["fig_engine_state", "fig_busy_by_kind", "request_state_peaks", "pool_pages",
           "step_kinds"]

_BINS = 120
_MAX_REPLICA_LINES = 8
_KIND_ORDER = ("prefill", "draft", "draft_extend", "verify")


def _peaks(up: np.ndarray, down: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per bin, the highest level of the count that each ``up`` time raises by one and each
    (finite) ``down`` time lowers by one, taken after all the changes at an instant."""
    down = down[np.isfinite(down)]
    times = np.concatenate([up, down])
    if len(times) == 0:
        return np.zeros(len(edges) - 1)
    order = np.argsort(times, kind="stable")
    t = times[order]
    level = np.cumsum(np.concatenate([np.ones(len(up)), -np.ones(len(down))])[order])
    last = np.r_[t[1:] != t[:-1], True]  # the level after every change at that instant
    t, level = t[last], level[last]
    peak = binned_max(t, level, edges)
    at = np.searchsorted(t, edges[:-1], side="right") - 1  # the level entering each bin
    start = np.where(at >= 0, level[np.maximum(at, 0)], 0.0)
    return np.fmax(peak, start)


def request_state_peaks(run: RunResults, edges: np.ndarray, replica: int | None = None
                        ) -> tuple[np.ndarray, np.ndarray]:
    """(queued, running): the most requests queued and running at any instant of each bin (of
    one replica, or all)."""
    r = run.requests
    arrival = col(r, "arrival_s")
    admit = col(r, "admit_s", fill=np.inf)
    finish = col(r, "finish_s", fill=np.inf)
    if replica is not None and "replica" in r.column_names:
        m = col(r, "replica", np.int64, 0) == replica
        arrival, admit, finish = arrival[m], admit[m], finish[m]
    admitted = admit[np.isfinite(admit)]
    return _peaks(arrival, admit, edges), _peaks(admitted, finish, edges)


def pool_pages(run: RunResults) -> int | None:
    """KV pages of one replica's pool, from summary.json (None when it does not say)."""
    s = run.summary or {}
    cap = s.get("kv_capacity_tokens")
    page = ((s.get("config") or {}).get("engine") or {}).get("page_size")
    if isinstance(cap, (int, float)) and isinstance(page, (int, float)) and cap > 0 and page > 0:
        return int(cap) // int(page)
    return None


def step_kinds(steps: pa.Table) -> tuple[list[str], np.ndarray]:
    """(kinds in display order, each row's index into them): the known kinds first, then any
    other kind by name."""
    c = steps["kind"]
    if pa.types.is_dictionary(c.type):
        c = c.cast(pa.string())
    enc = c.combine_chunks().dictionary_encode()
    names = [str(x) for x in enc.dictionary.to_pylist()]
    kinds = [k for k in _KIND_ORDER if k in names] + sorted(set(names) - set(_KIND_ORDER))
    pos = np.array([kinds.index(n) for n in names], dtype=np.int64)
    codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64)
    return kinds, pos[codes] if len(codes) else np.zeros(0, dtype=np.int64)


def _replicas(run: RunResults) -> list[int]:
    reps = set()
    if "replica" in run.requests.column_names:
        reps |= set(np.unique(col(run.requests, "replica", np.int64, 0)).tolist())
    reps |= set(np.unique(col(run.steps, "replica", np.int64, 0)).tolist())
    return sorted(reps) or [0]


def _lines(ax, t, series: list[np.ndarray], reps: list[int], run_i: int, label: str) -> None:
    """One line per replica (up to eight), else their mean and a min-max band."""
    if len(series) == 1:
        ax.plot(t, series[0], color=run_color(run_i), drawstyle="steps-mid", label=label)
    elif len(series) <= _MAX_REPLICA_LINES:
        for k, (rep, y) in enumerate(zip(reps, series)):
            ax.plot(t, y, color=run_color(k), linewidth=1, drawstyle="steps-mid",
                    label=f"replica {rep}")
    else:
        a = np.vstack(series)
        with warnings.catch_warnings():  # all-NaN bins (no pass there) stay NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            lo, hi, mean = np.nanmin(a, 0), np.nanmax(a, 0), np.nanmean(a, 0)
        ax.fill_between(t, lo, hi, color=run_color(run_i), alpha=0.25,
                        label=f"min-max of {len(series)} replicas")
        ax.plot(t, mean, color=run_color(run_i), drawstyle="steps-mid", label="replica mean")


def fig_engine_state(runs: list[RunResults]) -> str | None:
    """Per run (the first eight): KV-cache use, running and queued requests over time."""
    runs = runs[:MAX_PANELS]
    if not any(r.requests.num_rows for r in runs):
        return None
    has_kv = any("kv_pages_used" in r.steps.column_names and r.steps.num_rows for r in runs)
    ncols = 3 if has_kv else 2
    fig, axes = subplots(len(runs), ncols, (11.5, 2.6 * len(runs) + 0.4), squeeze=False)
    for row, run in enumerate(runs):
        reps = _replicas(run)
        t0, t1 = run_span(run)
        edges = time_bins(t0, t1, _BINS)
        counts = [request_state_peaks(run, edges, rep if len(reps) > 1 else None) for rep in reps]
        ax_kv = axes[row, 0] if has_kv else None
        ax_run, ax_q = axes[row, ncols - 2], axes[row, ncols - 1]
        _lines(ax_run, centers(edges), [c[1] for c in counts], reps, row, run.name)
        _lines(ax_q, centers(edges), [c[0] for c in counts], reps, row, run.name)
        for ax in (ax_run, ax_q):
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax_run.set_ylabel("running requests (peak)")
        ax_q.set_ylabel("queued requests (peak)")
        ax_run.set_title(f"{run.name}: running", fontsize=9, loc="left")
        ax_q.set_title(f"{run.name}: queued", fontsize=9, loc="left")
        if ax_kv is not None:
            s = run.steps
            if "kv_pages_used" in s.column_names and s.num_rows:
                t = col(s, "start_s")
                used = col(s, "kv_pages_used")
                rep_col = col(s, "replica", np.int64, 0)
                pool = pool_pages(run)
                series = [binned_max(t[rep_col == rep], used[rep_col == rep], edges)
                          / (pool or 1) for rep in reps]
                _lines(ax_kv, centers(edges), series, reps, row, run.name)
                if pool:
                    ax_kv.set_ylim(0, 1.02)
                ax_kv.set_ylabel("KV pool used (peak)" if pool else "KV pages used (peak)")
                ax_kv.set_title(f"{run.name}: KV cache", fontsize=9, loc="left")
            else:
                ax_kv.set_axis_off()
        if len(reps) > 1:
            ax_q.legend(fontsize=7, loc="upper left")
    for ax in axes[-1]:
        ax.set_xlabel("simulated time (s)")
    return svg(fig)


def fig_busy_by_kind(runs: list[RunResults]) -> str | None:
    """Per run (the first eight): busy time per second by pass kind, stacked, over time."""
    runs_i = [(i, r) for i, r in enumerate(runs) if r.steps.num_rows][:MAX_PANELS]
    if not runs_i:
        return None
    fig, axes = subplots(len(runs_i), 1, (11, 2.4 * len(runs_i) + 0.4), squeeze=False)
    for row, (i, run) in enumerate(runs_i):
        ax = axes[row, 0]
        s = run.steps
        kinds, idx = step_kinds(s)
        t = col(s, "start_s")
        lat = col(s, "latency_s")
        t0, t1 = run_span(run)
        edges = time_bins(t0, t1)
        per_s = (edges[1] - edges[0]) * len(_replicas(run))
        layers = [binned_sum(t[idx == k], lat[idx == k], edges) / per_s for k in range(len(kinds))]
        polys = ax.stackplot(centers(edges), layers, labels=kinds,
                             colors=[kind_color(k) for k in kinds], alpha=0.85)
        for poly, k in zip(polys, kinds):
            poly.set_gid(f"busy-{i}-{k}")
        ax.set_ylabel("busy s per s per replica")
        ax.set_title(run.name, fontsize=9, loc="left")
        ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7)
    axes[-1, 0].set_xlabel("simulated time (s)")
    return svg(fig)
