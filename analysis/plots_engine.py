"""The report's verify-side figures: batch size and width over time, their histograms, padding.

Widths are drawn with :func:`analysis.plots_base.width_color` everywhere, so width 4 has one
colour in every panel.  SVG element ids carry the width (``...-w4``) so a test or a reader can
tell which shape is which width.
"""

from __future__ import annotations

import numpy as np

from analysis.metrics import col, kind_mask
from analysis.plots_base import (MAX_PANELS, OTHER_COLOR, binned_sum, centers, run_color,
                                 run_span, subplots, svg, time_bins, width_color)
from analysis.results import RunResults

__all__ = ["fig_batch_over_time", "fig_width_mix", "fig_width_distribution", "fig_histograms",
           "fig_padding", "shown_widths"]

_MAX_WIDTHS = 9  # widths named in a width legend; the rest are "other widths"


def _verify(run: RunResults):
    s = run.steps
    return s, kind_mask(s, "verify")


def _iteration_firsts(s, v) -> np.ndarray:
    key = col(s, "replica", np.int64, 0)[v] * (1 << 40) + col(s, "iteration", np.int64, 0)[v]
    return np.unique(key, return_index=True)[1]


def shown_widths(runs: list[RunResults]) -> list[int]:
    """The launch widths named in width legends: all of them when at most nine occur in the
    runs together, else the nine that verified the most requests (the rest are "other")."""
    totals: dict[int, float] = {}
    for run in runs:
        s, v = _verify(run)
        w = col(s, "width", np.int64, 0)[v]
        bs = col(s, "bs")[v]
        for x in np.unique(w):
            totals[int(x)] = totals.get(int(x), 0.0) + float(bs[w == x].sum())
    if len(totals) <= _MAX_WIDTHS + 1:
        return sorted(totals)
    return sorted(sorted(totals, key=lambda x: (-totals[x], x))[:_MAX_WIDTHS])


def fig_batch_over_time(runs: list[RunResults]) -> str | None:
    """Requests per verify launch (real and padded) and verify launches per iteration, binned."""
    if not any(_verify(r)[1].any() for r in runs):
        return None
    fig, axes = subplots(2, 1, (11, 6), sharex=True)
    for i, run in enumerate(runs):
        s, v = _verify(run)
        if not v.any():
            continue
        t = col(s, "start_s")[v]
        t0, t1 = run_span(run)
        edges = time_bins(t0, t1)
        c = centers(edges)
        n = binned_sum(t, np.ones_like(t), edges)
        first = _iteration_firsts(s, v)
        with np.errstate(invalid="ignore", divide="ignore"):
            axes[0].plot(c, binned_sum(t, col(s, "bs")[v], edges) / n, color=run_color(i),
                         label=f"{run.name} real")
            axes[0].plot(c, binned_sum(t, col(s, "bs_padded")[v], edges) / n, color=run_color(i),
                         linestyle=":", label=f"{run.name} padded")
            axes[1].plot(c, n / binned_sum(t[first], np.ones(len(first)), edges),
                         color=run_color(i), label=run.name)
    axes[0].set_ylabel("requests per verify launch")
    axes[1].set_ylabel("verify launches per iteration")
    axes[1].set_xlabel("simulated time (s)")
    for ax in axes:
        ax.legend(loc="upper left", fontsize=7, ncol=2)
    return svg(fig)


def fig_width_mix(runs: list[RunResults]) -> str | None:
    """Per run (the first eight with verify launches): share of verified requests by launch
    width over time, and the fraction of iterations whose running set mixed widths."""
    runs_i = [(i, r) for i, r in enumerate(runs) if _verify(r)[1].any()][:MAX_PANELS]
    if not runs_i:
        return None
    keep = shown_widths([r for _, r in runs_i])
    fig, axes = subplots(len(runs_i), 1, (11, 2.6 * len(runs_i) + 0.4), squeeze=False)
    for row, (i, run) in enumerate(runs_i):
        ax = axes[row, 0]
        s, v = _verify(run)
        t = col(s, "start_s")[v]
        w = col(s, "width", np.int64, 0)[v]
        bs = col(s, "bs")[v]
        t0, t1 = run_span(run)
        edges = time_bins(t0, t1)
        c = centers(edges)
        total = binned_sum(t, bs, edges)
        layers, labels, colors, gids = [], [], [], []
        for x in keep:
            if np.any(w == x):
                layers.append(binned_sum(t[w == x], bs[w == x], edges))
                labels.append(f"width {x}")
                colors.append(width_color(x))
                gids.append(f"width-mix-{i}-w{x}")
        other = ~np.isin(w, keep)
        if other.any():
            layers.append(binned_sum(t[other], bs[other], edges))
            labels.append("other widths")
            colors.append(OTHER_COLOR)
            gids.append(f"width-mix-{i}-other")
        with np.errstate(invalid="ignore", divide="ignore"):
            shares = [np.nan_to_num(layer / total) for layer in layers]
        for poly, gid in zip(ax.stackplot(c, shares, labels=labels, colors=colors, alpha=0.85),
                             gids):
            poly.set_gid(gid)
        first = _iteration_firsts(s, v)
        idw = col(s, "iter_distinct_widths", np.int64, 0)[v][first]
        ni = binned_sum(t[first], np.ones(len(first)), edges)
        with np.errstate(invalid="ignore", divide="ignore"):
            ax.plot(c, binned_sum(t[first], (idw > 1).astype(float), edges) / ni, color="black",
                    linewidth=1.5, label="iterations mixing widths")
        ax.set_ylim(0, 1.02)
        ax.set_ylabel("share")
        ax.set_title(run.name, fontsize=9, loc="left")
        ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7)
    axes[-1, 0].set_xlabel("simulated time (s)")
    return svg(fig)


def fig_width_distribution(runs: list[RunResults], summaries: list[dict]) -> str | None:
    """Distribution of the distinct proposed widths per verify iteration, per run."""
    keys = sorted({int(k) for s in summaries for k in s["iterations"]["iter_distinct_widths"]})
    if not keys:
        return None
    fig, ax = subplots(1, 1, (11, 3.2))
    x = np.arange(len(keys))
    w = 0.8 / len(runs)
    for i, s in enumerate(summaries):
        d = {int(k): v for k, v in s["iterations"]["iter_distinct_widths"].items()}
        tot = sum(d.values()) or 1
        ax.bar(x + i * w - 0.4 + w / 2, [d.get(k, 0) / tot for k in keys], width=w,
               color=run_color(i), label=runs[i].name)
    ax.set_xticks(x, [str(k) for k in keys])
    if len(runs) > 1:
        ax.legend(fontsize=7)
    ax.set_xlabel("distinct proposed widths in the iteration's running set")
    ax.set_ylabel("fraction of iterations")
    return svg(fig)


def _bs_bins(bs: np.ndarray) -> np.ndarray:
    hi = int(bs.max()) if len(bs) else 1
    if hi <= 64:
        return np.arange(0.5, hi + 1.5)
    return np.linspace(0.5, hi + 0.5, 49)


def fig_histograms(runs: list[RunResults]) -> str | None:
    """Per run (the first eight with verify launches): histogram of the verify batch size (real,
    and graph-padded as an outline) and of the launch width (coloured by width)."""
    runs_i = [(i, r) for i, r in enumerate(runs) if _verify(r)[1].any()][:MAX_PANELS]
    if not runs_i:
        return None
    fig, axes = subplots(len(runs_i), 2, (11, 2.5 * len(runs_i) + 0.4), squeeze=False,
                         gridspec_kw={"width_ratios": [3, 2]})
    for row, (i, run) in enumerate(runs_i):
        s, v = _verify(run)
        bs = col(s, "bs", np.int64, 0)[v]
        bsp = col(s, "bs_padded", np.int64, 0)[v]
        ax, bx = axes[row]
        bins = _bs_bins(np.concatenate([bs, bsp]))
        ax.hist(bs, bins=bins, color=run_color(i), alpha=0.8, label="real")
        if np.any(bsp != bs):
            ax.hist(bsp, bins=bins, histtype="step", color="black", linestyle=":",
                    label="graph-padded")
            ax.legend(fontsize=7, loc="upper right")
        ax.set_ylabel("verify launches")
        ax.set_title(f"{run.name}: requests per verify launch", fontsize=9, loc="left")
        w = col(s, "width", np.int64, 0)[v]
        widths, counts = np.unique(w, return_counts=True)
        for x, n in zip(widths, counts):
            bar = bx.bar([int(x)], [int(n)], color=width_color(x), width=0.8)
            bar.patches[0].set_gid(f"width-hist-{i}-w{int(x)}")
        bx.set_xticks(widths, [str(int(x)) for x in widths], fontsize=7)
        bx.set_xlim(widths.min() - 1.5, widths.max() + 1.5)
        bx.set_title(f"{run.name}: launch width", fontsize=9, loc="left")
        bx.set_ylabel("verify launches")
    axes[-1, 0].set_xlabel("batch size (requests)")
    axes[-1, 1].set_xlabel("launch width (query rows per request)")
    return svg(fig)


def _padding_fracs(summary: dict) -> tuple[float, float]:
    """(width padding, graph padding) of a run as analysis.metrics.summarize computed them."""
    ver = summary.get("verify") or {}
    return ver.get("width_pad_frac") or 0.0, ver.get("graph_pad_frac") or 0.0


def fig_padding(runs: list[RunResults], summaries: list[dict]) -> str | None:
    """Padded verify rows over time, and (with several runs) width vs graph padding per run."""
    if not any(_verify(r)[1].any() for r in runs):
        return None
    many = len(runs) > 1
    if many:
        fig, (ax, bx) = subplots(1, 2, (11, max(3.6, 0.32 * len(runs) + 1.4)),
                                 gridspec_kw={"width_ratios": [3, 1.6]})
    else:
        fig, ax = subplots(1, 1, (11, 3.6))
    for i, run in enumerate(runs):
        s, v = _verify(run)
        t = col(s, "start_s")[v]
        gpad = col(s, "graph_pad_slots")[v]
        pad = col(s, "padded_slots")[v] + gpad
        slots = col(s, "tokens")[v] + gpad  # tokens already hold the width padding
        t0, t1 = run_span(run)
        edges = time_bins(t0, t1)
        with np.errstate(invalid="ignore", divide="ignore"):
            ax.plot(centers(edges), binned_sum(t, pad, edges) / binned_sum(t, slots, edges),
                    color=run_color(i), label=run.name)
    ax.set_ylabel("padded / verify slots")
    ax.set_xlabel("simulated time (s)")
    ax.legend(loc="upper left", fontsize=7)
    ax.set_title("over time", fontsize=9, loc="left")
    if many:
        y = np.arange(len(runs))[::-1]
        fr = [_padding_fracs(s) for s in summaries]
        wf, gf = [a for a, _ in fr], [b for _, b in fr]
        bx.barh(y, wf, color="#d62728", label="width padding")
        bx.barh(y, gf, left=wf, color="#ff9896", label="graph padding")
        for yi, a, b in zip(y, wf, gf):
            bx.annotate(f"{100 * (a + b):.1f}%", (a + b, yi), xytext=(3, 0),
                        textcoords="offset points", va="center", fontsize=7)
        bx.set_yticks(y, [r.name for r in runs], fontsize=7)
        bx.set_xlim(0, max(max(a + b for a, b in fr) * 1.35, 0.01))
        bx.set_xlabel("fraction of slots")
        bx.set_title("whole run", fontsize=9, loc="left")
        bx.legend(fontsize=7, loc="lower right")
    return svg(fig)
