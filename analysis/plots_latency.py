"""The report's latency figures: CDFs, and TTFT/TPOT over time.

TTFT and E2E are drawn in seconds, TPOT and inter-token gaps in milliseconds.  A panel with no
value to draw (no request_steps.parquet for the gaps, only one-token requests for TPOT) is left
out rather than drawn empty.
"""

from __future__ import annotations

import numpy as np

from analysis.metrics import col, inter_token_gaps, request_latencies
from analysis.plots_base import (binned_quantile, centers, ecdf, log_axis_if_wide, run_color,
                                 run_span, subplots, svg, time_bins)
from analysis.results import RunResults

__all__ = ["fig_latency_cdfs", "fig_latency_over_time"]

_MAX_SCATTER = 4000

#: (key, axis label, scale from seconds)
_LAT_PANELS = [("ttft", "TTFT (s)", 1.0), ("tpot", "TPOT (ms)", 1e3),
               ("e2e", "E2E latency (s)", 1.0),
               ("itl", "inter-token gap (ms)", 1e3)]


def _has(v: np.ndarray) -> bool:
    return bool(np.any(np.isfinite(v)))


def fig_latency_cdfs(runs: list[RunResults]) -> str | None:
    """CDFs of TTFT, TPOT (ms), E2E and inter-token gaps (ms, per token and per step)."""
    lats = [request_latencies(r) for r in runs]
    gaps = [inter_token_gaps(r) for r in runs]
    panels = []
    for key, label, scale in _LAT_PANELS:
        if key == "itl":
            if any(g is not None and (_has(g[0]) or _has(g[1])) for g in gaps):
                panels.append((key, label, scale))
        elif any(_has(lat[key]) for lat in lats):
            panels.append((key, label, scale))
    if not panels:
        return None
    ncols = 2 if len(panels) == 4 else len(panels)
    nrows = 2 if len(panels) == 4 else 1
    fig, axes = subplots(nrows, ncols, (11, 6.8 if nrows == 2 else 3.6), squeeze=False)
    for ax, (key, label, scale) in zip(axes.flat, panels):
        used = []
        for i, run in enumerate(runs):
            if key == "itl":
                if gaps[i] is None:
                    continue
                step, tok = gaps[i][0] * scale, gaps[i][1] * scale
                ecdf(ax, tok, len(tok), color=run_color(i), label=f"{run.name} per token")
                ecdf(ax, step, len(step), color=run_color(i), linestyle="--",
                     label=f"{run.name} per step")
                used += [step, tok]
            else:
                v = lats[i][key] * scale
                n = int(np.sum(~np.isnan(v)))
                if ecdf(ax, v, max(n, 1), color=run_color(i), label=run.name):
                    used.append(v)
        log_axis_if_wide(ax, used)
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of gaps" if key == "itl" else "fraction of requests")
        ax.set_ylim(0, 1.02)
        ax.legend(loc="lower right", fontsize=7)
    return svg(fig)


def fig_latency_over_time(runs: list[RunResults]) -> str | None:
    """Binned p50 and p90 of TTFT (s) and TPOT (ms) by arrival time (dots: one run's requests)."""
    panels = [("ttft", "TTFT (s)", 1.0), ("tpot", "TPOT (ms)", 1e3)]
    lats = [request_latencies(r) for r in runs]
    panels = [p for p in panels if any(np.any(~np.isnan(lat[p[0]])) for lat in lats)]
    if not panels:
        return None
    fig, axes = subplots(len(panels), 1, (11, 3.3 * len(panels)), sharex=True, squeeze=False)
    for i, run in enumerate(runs):
        arr = col(run.requests, "arrival_s")
        t0, t1 = run_span(run)
        edges = time_bins(t0, float(np.nanmax(arr)) if len(arr) else t1)
        for ax, (key, _, scale) in zip(axes[:, 0], panels):
            v = lats[i][key] * scale
            ok = ~np.isnan(v)
            fin = ok & np.isfinite(v)
            if len(runs) == 1 and fin.any():
                sel = np.flatnonzero(fin)
                if len(sel) > _MAX_SCATTER:
                    sel = sel[np.linspace(0, len(sel) - 1, _MAX_SCATTER).round().astype(int)]
                ax.scatter(arr[sel], v[sel], s=2, alpha=0.25, color="#999999", rasterized=True,
                           label="requests")
            if ok.any():
                c = centers(edges)
                ax.plot(c, binned_quantile(arr[ok], v[ok], edges, 0.5), color=run_color(i),
                        label=f"{run.name} p50")
                ax.plot(c, binned_quantile(arr[ok], v[ok], edges, 0.9), color=run_color(i),
                        linestyle="--", label=f"{run.name} p90")
    for ax, (_, label, _) in zip(axes[:, 0], panels):
        ax.set_ylabel(label)
        ax.legend(loc="upper left", fontsize=7, ncol=2)
    axes[-1, 0].set_xlabel("arrival time (s)")
    return svg(fig)
