"""The report's figures (matplotlib, Agg), each returned as an inline SVG string.

Every figure is built from the result tables (and summary.json's configuration) only.  A figure
with nothing to show for these runs (a comparison with one run, a rate sweep when the runs are
not one) is left out, not drawn empty.  Dense point clouds are rasterized inside the SVG, lines
stay vector.  Output is deterministic: fixed hash salt, no dates in metadata.

The figures live by concern: latency (plots_latency), verify batches and widths (plots_engine),
engine state over time (plots_state), the prefix cache (plots_prefix), comparisons and rate sweeps (plots_compare); shared
helpers and the fixed colour maps in plots_base.
"""

from __future__ import annotations

from typing import Callable

from analysis.plots_base import time_bins, width_color
from analysis.results import RunResults

__all__ = ["FIGURES", "render_all", "time_bins", "width_color"]


def _latency_cdfs(runs, sums):
    from analysis.plots_latency import fig_latency_cdfs
    return fig_latency_cdfs(runs)


def _latency_over_time(runs, sums):
    from analysis.plots_latency import fig_latency_over_time
    return fig_latency_over_time(runs)


def _rate_sweep(runs, sums):
    from analysis.plots_compare import fig_rate_sweep
    return fig_rate_sweep(runs, sums)


def _engine_state(runs, sums):
    from analysis.plots_state import fig_engine_state
    return fig_engine_state(runs)


def _prefix_cache(runs, sums):
    from analysis.plots_prefix import fig_prefix_cache
    return fig_prefix_cache(runs)


def _busy(runs, sums):
    from analysis.plots_state import fig_busy_by_kind
    return fig_busy_by_kind(runs)


def _batch_over_time(runs, sums):
    from analysis.plots_engine import fig_batch_over_time
    return fig_batch_over_time(runs)


def _histograms(runs, sums):
    from analysis.plots_engine import fig_histograms
    return fig_histograms(runs)


def _width_mix(runs, sums):
    from analysis.plots_engine import fig_width_mix
    return fig_width_mix(runs)


def _width_distribution(runs, sums):
    from analysis.plots_engine import fig_width_distribution
    return fig_width_distribution(runs, sums)


def _padding(runs, sums):
    from analysis.plots_engine import fig_padding
    return fig_padding(runs, sums)


def _side_by_side(runs, sums):
    from analysis.plots_compare import fig_side_by_side
    return fig_side_by_side(runs, sums)


#: (id, title, caption, builder) in report order; a builder returns None to leave its figure out.
FIGURES: list[tuple[str, str, str, Callable[[list[RunResults], list[dict]], str | None]]] = [
    ("latency-cdfs", "Latency CDFs",
     "TTFT and E2E (s), TPOT (ms) per request; inter-token gaps (ms) per token (solid: a "
     "burst's gap shared evenly by its tokens) and per step (dashed: gap between deliveries). "
     "Unfinished requests never reach 1.", _latency_cdfs),
    ("latency-over-time", "TTFT and TPOT over time",
     "Binned by arrival time: p50 (solid) and p90 (dashed) per bin; TPOT in ms.",
     _latency_over_time),
    ("rate-sweep", "Against the request rate",
     "Runs whose configurations differ only in rate_scale, one line per series: goodput and "
     "throughput, TTFT and TPOT p50 (solid), p90 (dashed) and p99 (dotted) against the offered "
     "rate (requests / arrival span).", _rate_sweep),
    ("engine-state", "KV cache, running and queued requests over time",
     "Per run (the first eight), per replica when there are several: peak KV pool use per time "
     "bin, and the requests running (admitted, not finished) and queued (arrived, not "
     "admitted).", _engine_state),
    ("prefix-cache", "Prefix cache: hit rate and KV pool split",
     "Per run whose trace has prefix ids (the first eight): the share of prompt tokens found in "
     "the radix cache, by first admission time (per bin, since the start, and the trace's ideal "
     "with an infinite cache), and the mean share of the KV pool held by running requests and by "
     "cached prefixes.", _prefix_cache),
    ("busy-by-kind", "Busy time by pass kind",
     "Per run (the first eight): seconds of forward passes per second and replica, by the kind "
     "of pass (every kind in steps.parquet).", _busy),
    ("batch-over-time", "Batch size over time",
     "Requests per verify launch (real and graph-padded), and verify launches per decode "
     "iteration.", _batch_over_time),
    ("histograms", "Batch size and launch width",
     "Per run (the first eight): how many verify launches had each batch size (real; dotted: "
     "the captured size replayed) and each launch width (colour = width, the same in every "
     "figure).", _histograms),
    ("width-mix", "Width mix over time",
     "Share of verified requests by launch width (colour = width, the same in every panel), and "
     "the fraction of iterations whose running set proposed more than one width (black).",
     _width_mix),
    ("width-distribution", "Distinct widths per iteration",
     "Distribution of the number of distinct proposed widths per verify iteration.",
     _width_distribution),
    ("padding", "Padding waste",
     "Padded query rows as a fraction of all rows the verify kernel computed, over time, and "
     "(several runs) width vs graph batch-size padding for the whole run.", _padding),
    ("side-by-side", "Runs side by side", "Headline metrics of every run (TPOT in ms).",
     _side_by_side),
]


def render_all(runs: list[RunResults], summaries: list[dict]) -> list[tuple[str, str, str, str]]:
    """[(id, title, caption, svg)] for every figure that has something to show."""
    out = []
    for fid, title, caption, build in FIGURES:
        svg = build(runs, summaries)
        if svg is not None:
            out.append((fid, title, caption, svg))
    return out
