"""Shared pieces of the report's figures: matplotlib setup, SVG output, fixed colour maps, bins.

Colours are fixed maps, never "the i-th colour of this figure": a run keeps its colour in every
figure (its index in the report), a verify width keeps its colour in every panel and figure
(:func:`width_color`), and a pass kind keeps its colour too (:func:`kind_color`, kinds the map
does not know get a grey shade fixed by their name).
"""

from __future__ import annotations

import io
import math
import zlib
from typing import Sequence

import numpy as np

from analysis.metrics import col
from analysis.results import RunResults

__all__ = ["mpl", "svg", "run_color", "width_color", "kind_color", "OTHER_COLOR", "time_bins",
           "binned_quantile", "binned_sum", "binned_max", "centers", "run_span", "ecdf",
           "log_axis_if_wide", "subplots", "MAX_PANELS"]

#: Figures with one panel (row) per run show the first this many runs.
MAX_PANELS = 8

_RUN_PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
                "#7f7f7f", "#bcbd22", "#17becf"]

#: Launch width -> colour, the same in every panel and figure.  Widths 1-12 get distinct
#: qualitative colours; wider launches (up to 65 = 64 drafts + 1) a fixed shade of a sequential
#: map, so the colour depends on the width alone.
_WIDTH_PALETTE = {
    0: "#c7c7c7", 1: "#4e79a7", 2: "#f28e2b", 3: "#59a14f", 4: "#e15759", 5: "#76b7b2",
    6: "#edc948", 7: "#b07aa1", 8: "#ff9da7", 9: "#9c755f", 10: "#1b9e77", 11: "#7570b3",
    12: "#66a61e",
}
OTHER_COLOR = "#bab0ac"

#: Pass kind -> colour; unknown kinds (a kind added to steps.parquet later) get a grey fixed by
#: their name, so they are drawn, labelled and stable rather than dropped.
_KIND_PALETTE = {"prefill": "#8c564b", "draft": "#ff7f0e", "verify": "#1f77b4",
                 "draft_extend": "#bcbd22"}


def mpl():
    """matplotlib.pyplot with the Agg backend and the report's deterministic settings."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "svg.hashsalt": "specsched",
        "svg.fonttype": "none",
        "font.size": 9,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "figure.dpi": 100,
        "savefig.dpi": 100,
    })
    return plt


def subplots(nrows: int, ncols: int, figsize, **kw):
    """plt.subplots with the constrained layout (titles, labels and legends never overlap)."""
    return mpl().subplots(nrows, ncols, figsize=figsize, layout="constrained", **kw)


def svg(fig) -> str:
    """The figure as an inline ``<svg>`` element (no XML prolog, no date), and close it."""
    plt = mpl()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.find("<svg"):]


def run_color(i: int) -> str:
    """Colour of the i-th run of the report (the same in every figure)."""
    return _RUN_PALETTE[i % len(_RUN_PALETTE)]


def width_color(width: int) -> str:
    """Colour of a launch width, the same in every panel and figure of every report."""
    w = int(width)
    if w in _WIDTH_PALETTE:
        return _WIDTH_PALETTE[w]
    import matplotlib

    r, g, b, _ = matplotlib.colormaps["viridis"](min(max(w - 13, 0), 52) / 52)
    return "#{:02x}{:02x}{:02x}".format(round(r * 255), round(g * 255), round(b * 255))


def kind_color(kind: str) -> str:
    """Colour of a pass kind; a kind this map does not know gets a grey fixed by its name."""
    if kind in _KIND_PALETTE:
        return _KIND_PALETTE[kind]
    level = 0x60 + zlib.crc32(kind.encode()) % 0x70
    return f"#{level:02x}{level:02x}{level:02x}"


def time_bins(t0: float, t1: float, n: int = 60) -> np.ndarray:
    """n equal bins covering [t0, t1] (one bin of width 1 s when the span is empty)."""
    if not (math.isfinite(t0) and math.isfinite(t1)) or t1 <= t0:
        base = t0 if math.isfinite(t0) else 0.0
        return np.array([base, base + 1])
    return np.linspace(t0, t1, n + 1)


def _bin_index(t: np.ndarray, edges: np.ndarray) -> np.ndarray:
    return np.clip(np.searchsorted(edges, t, side="right") - 1, 0, len(edges) - 2)


def binned_quantile(t: np.ndarray, v: np.ndarray, edges: np.ndarray, q: float) -> np.ndarray:
    """Per bin of ``t``, the q-quantile of ``v`` (linear interpolation; NaN for empty bins)."""
    idx = _bin_index(t, edges)
    out = np.full(len(edges) - 1, np.nan)
    order = np.lexsort((v, idx))
    idx, v = idx[order], v[order]
    starts = np.searchsorted(idx, np.arange(len(edges) - 1), side="left")
    ends = np.searchsorted(idx, np.arange(len(edges) - 1), side="right")
    for b, (s, e) in enumerate(zip(starts, ends)):
        if e > s:
            seg = v[s:e]
            h = (len(seg) - 1) * q
            lo = int(math.floor(h))
            hi = min(lo + 1, len(seg) - 1)
            out[b] = seg[lo] + (h - lo) * (seg[hi] - seg[lo]) if math.isfinite(seg[hi]) else seg[lo]
    return out


def binned_sum(t: np.ndarray, w: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per bin of ``t``, the sum of ``w``."""
    return np.bincount(_bin_index(t, edges), weights=w, minlength=len(edges) - 1).astype(np.float64)


def binned_max(t: np.ndarray, v: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per bin of ``t``, the largest ``v`` (NaN for empty bins)."""
    out = np.full(len(edges) - 1, -np.inf)
    np.maximum.at(out, _bin_index(t, edges), v.astype(np.float64))
    out[np.isneginf(out)] = np.nan
    return out


def centers(edges: np.ndarray) -> np.ndarray:
    """Bin centres."""
    return 0.5 * (edges[1:] + edges[:-1])


def run_span(run: RunResults) -> tuple[float, float]:
    """(first arrival, last finish) of a run, in simulated seconds."""
    a = col(run.requests, "arrival_s")
    f = col(run.requests, "finish_s")
    t0 = float(np.nanmin(a)) if len(a) else 0.0
    t1 = float(np.nanmax(f)) if np.any(~np.isnan(f)) else t0 + 1
    return t0, t1


def ecdf(ax, values: np.ndarray, n_total: int, **kw) -> bool:
    """Step plot of the empirical CDF of the finite values over ``n_total``; False if none."""
    v = np.sort(values[np.isfinite(values)])
    if len(v) == 0:
        return False
    if len(v) > 2000:  # plot at most 2000 quantiles; the curve is visually identical
        q = np.linspace(0, len(v) - 1, 2000).round().astype(int)
        x, y = v[q], (q + 1) / n_total
    else:
        x, y = v, np.arange(1, len(v) + 1) / n_total
    ax.step(x, y, where="post", **kw)
    return True


def log_axis_if_wide(ax, values: Sequence[np.ndarray]) -> None:
    """Log-scale the x axis when the positive values span more than a factor of 50."""
    pos = np.concatenate([v[np.isfinite(v) & (v > 0)] for v in values] or [np.zeros(0)])
    if len(pos) and pos.max() / max(pos.min(), 1e-12) > 50:
        ax.set_xscale("log")
