"""The report's prefix-cache figure: the radix cache's hit rate over time, and how the KV pool
splits between running requests and cached prefixes.

- **Hit rate**: per time bin (60 bins), the prompt tokens found in the cache (``cached_tokens``
  of requests.parquet, counted at a request's first admission) over the prompt tokens of the
  requests first admitted in the bin; the dashed line is the cumulative rate since the start,
  and the dotted one the trace's ideal rate (an infinite cache, ``prefix_ideal_hit_rate`` of
  summary.json).
- **Pool split**: per time bin, the mean over the passes starting in it (every replica) of the
  pages only the cache holds (``kv_pages_cached``: cached prefixes no running request uses,
  SGLang's evictable size) and the pages of running requests (``kv_pages_used -
  kv_pages_cached``: their own and the cached prefixes they lock), as fractions of the
  replica's pool; the rest is free.

Drawn for runs whose trace has prefix information (summary.json ``prefix_ideal_hit_rate`` set);
left out when no run has any.
"""

from __future__ import annotations

import numpy as np

from analysis.metrics import col
from analysis.plots_base import (MAX_PANELS, binned_sum, centers, run_span, subplots, svg,
                                 time_bins)
from analysis.plots_state import pool_pages
from analysis.results import RunResults

__all__ = ["fig_prefix_cache"]

_BINS = 60


def _has_prefix(run: RunResults) -> bool:
    return ((run.summary or {}).get("prefix_ideal_hit_rate") is not None
            and "cached_tokens" in run.requests.column_names)


def fig_prefix_cache(runs: list[RunResults]) -> str | None:
    """Per run with prefix information (the first eight): hit rate and pool split over time."""
    runs = [r for r in runs if _has_prefix(r)][:MAX_PANELS]
    if not runs:
        return None
    fig, axes = subplots(len(runs), 2, (11.5, 2.6 * len(runs) + 0.4), squeeze=False)
    for row, run in enumerate(runs):
        t0, t1 = run_span(run)
        edges = time_bins(t0, t1, _BINS)
        x = centers(edges)
        req = run.requests
        admit = col(req, "admit_s")
        ok = np.isfinite(admit)
        hit = col(req, "cached_tokens", np.float64, 0)[ok]
        prompt = col(req, "prompt_tokens", np.float64, 0)[ok]
        admit = admit[ok]
        num, den = binned_sum(admit, hit, edges), binned_sum(admit, prompt, edges)
        ax = axes[row, 0]
        with np.errstate(invalid="ignore", divide="ignore"):
            ax.plot(x, num / den, drawstyle="steps-mid", label="per bin")
            order = np.argsort(admit, kind="stable")
            cum = np.cumsum(hit[order]) / np.maximum(np.cumsum(prompt[order]), 1)
        ax.plot(admit[order], cum, linestyle="--", label="since the start")
        ideal = run.summary["prefix_ideal_hit_rate"]
        ax.axhline(ideal, color="black", linestyle=":", linewidth=1, label=f"ideal {ideal:.3f}")
        ax.set_ylim(0, 1.02)
        ax.set_ylabel("prefix cache hit rate")
        state = "on" if run.summary.get("radix_cache") else "off"
        ax.set_title(f"{run.name}: hit rate (cache {state})", fontsize=9, loc="left")
        ax.legend(fontsize=7, loc="upper right")
        ax = axes[row, 1]
        s = run.steps
        pool = pool_pages(run)
        if "kv_pages_cached" in s.column_names and s.num_rows and pool:
            t = col(s, "start_s")
            cached = col(s, "kv_pages_cached") / pool
            running = col(s, "kv_pages_used") / pool - cached
            n = binned_sum(t, np.ones_like(t), edges)
            with np.errstate(invalid="ignore", divide="ignore"):
                c, r = binned_sum(t, cached, edges) / n, binned_sum(t, running, edges) / n
            c, r = np.nan_to_num(c), np.nan_to_num(r)
            ax.stackplot(x, r, c, labels=["running requests", "cache only (evictable)"], step="mid",
                         alpha=0.8)
            ax.set_ylim(0, 1.02)
            ax.set_ylabel("share of the KV pool (mean)")
            ax.legend(fontsize=7, loc="upper left")
        else:
            ax.set_axis_off()
        ax.set_title(f"{run.name}: KV pool split", fontsize=9, loc="left")
    for ax in axes[-1]:
        ax.set_xlabel("simulated time (s)")
    return svg(fig)
