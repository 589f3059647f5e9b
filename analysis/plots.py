"""The report's figures (matplotlib, Agg), each returned as an inline SVG string.

Every figure is built from the result tables only.  Dense point clouds are rasterized inside
the SVG, lines stay vector.  Output is deterministic: fixed hash salt, no dates in metadata.
"""

from __future__ import annotations

import io
import math
from typing import Callable, Sequence

import numpy as np

from analysis.metrics import col, inter_token_gaps, request_latencies, kind_mask
from analysis.results import RunResults

__all__ = ["FIGURES", "render_all", "time_bins"]

_BINS = 60
_MAX_SCATTER = 4000


def _mpl():
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


def _svg(fig) -> str:
    plt = _mpl()
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None}, bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    start = text.find("<svg")
    return text[start:]


def _color(i: int) -> str:
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
               "#7f7f7f", "#bcbd22", "#17becf"]
    return palette[i % len(palette)]


def time_bins(t0: float, t1: float, n: int = _BINS) -> np.ndarray:
    """n equal bins covering [t0, t1] (one bin of width 1 s when the span is empty)."""
    if not (math.isfinite(t0) and math.isfinite(t1)) or t1 <= t0:
        return np.array([t0 if math.isfinite(t0) else 0.0, (t0 if math.isfinite(t0) else 0.0) + 1])
    return np.linspace(t0, t1, n + 1)


def _binned_quantile(t: np.ndarray, v: np.ndarray, edges: np.ndarray, q: float) -> np.ndarray:
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, len(edges) - 2)
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


def _binned_sum(t: np.ndarray, w: np.ndarray, edges: np.ndarray) -> np.ndarray:
    idx = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, len(edges) - 2)
    return np.bincount(idx, weights=w, minlength=len(edges) - 1).astype(np.float64)


def _centers(edges: np.ndarray) -> np.ndarray:
    return 0.5 * (edges[1:] + edges[:-1])


def _ecdf(ax, values: np.ndarray, n_total: int, **kw) -> None:
    v = np.sort(values[np.isfinite(values)])
    if len(v) == 0:
        return
    if len(v) > 2000:  # plot at most 2000 quantiles; the curve is visually identical
        q = np.linspace(0, len(v) - 1, 2000).round().astype(int)
        x, y = v[q], (q + 1) / n_total
    else:
        x, y = v, np.arange(1, len(v) + 1) / n_total
    ax.step(x, y, where="post", **kw)


def _seconds_axis(ax, values: Sequence[np.ndarray]) -> None:
    pos = np.concatenate([v[np.isfinite(v) & (v > 0)] for v in values] or [np.zeros(0)])
    if len(pos) and pos.max() / max(pos.min(), 1e-12) > 50:
        ax.set_xscale("log")


def fig_latency_cdfs(runs: list[RunResults]) -> str:
    plt = _mpl()
    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    panels = [("ttft", "TTFT (s)"), ("tpot", "TPOT (s)"), ("e2e", "E2E latency (s)"),
              ("itl", "inter-token gap (s)")]
    lats = [request_latencies(r) for r in runs]
    gaps = [inter_token_gaps(r) for r in runs]
    for ax, (key, label) in zip(axes.flat, panels):
        used = []
        for i, run in enumerate(runs):
            if key == "itl":
                if gaps[i] is None:
                    continue
                _ecdf(ax, gaps[i][1], len(gaps[i][1]), color=_color(i), label=f"{run.name} per token")
                _ecdf(ax, gaps[i][0], len(gaps[i][0]), color=_color(i), linestyle="--",
                      label=f"{run.name} per step")
                used += [gaps[i][0], gaps[i][1]]
            else:
                v = lats[i][key]
                n = int(np.sum(~np.isnan(v)))
                _ecdf(ax, v, max(n, 1), color=_color(i), label=run.name)
                used.append(v)
        _seconds_axis(ax, used)
        ax.set_xlabel(label)
        ax.set_ylabel("fraction of requests" if key != "itl" else "fraction of gaps")
        ax.set_ylim(0, 1.02)
        if key == "itl" and not used:
            ax.text(0.5, 0.5, "no request_steps.parquet", transform=ax.transAxes, ha="center")
        else:
            ax.legend(loc="lower right", fontsize=7)
    fig.suptitle("Latency CDFs (unfinished requests never reach 1)")
    fig.tight_layout()
    return _svg(fig)


def _run_span(run: RunResults) -> tuple[float, float]:
    a = col(run.requests, "arrival_s")
    f = col(run.requests, "finish_s")
    t0 = float(np.nanmin(a)) if len(a) else 0.0
    t1 = float(np.nanmax(f)) if np.any(~np.isnan(f)) else t0 + 1
    return t0, t1


def fig_latency_over_time(runs: list[RunResults]) -> str:
    plt = _mpl()
    fig, axes = plt.subplots(2, 1, figsize=(11, 6.5), sharex=True)
    for i, run in enumerate(runs):
        lat = request_latencies(run)
        arr = col(run.requests, "arrival_s")
        t0, t1 = _run_span(run)
        edges = time_bins(t0, float(np.nanmax(arr)) if len(arr) else t1)
        for ax, key in zip(axes, ("ttft", "tpot")):
            v = lat[key]
            ok = ~np.isnan(v)
            fin = ok & np.isfinite(v)
            if len(runs) == 1 and fin.any():
                sel = np.flatnonzero(fin)
                if len(sel) > _MAX_SCATTER:
                    sel = sel[np.linspace(0, len(sel) - 1, _MAX_SCATTER).round().astype(int)]
                ax.scatter(arr[sel], v[sel], s=2, alpha=0.25, color="#999999", rasterized=True,
                           label="requests")
            if ok.any():
                c = _centers(edges)
                ax.plot(c, _binned_quantile(arr[ok], v[ok], edges, 0.5), color=_color(i),
                        label=f"{run.name} p50")
                ax.plot(c, _binned_quantile(arr[ok], v[ok], edges, 0.9), color=_color(i),
                        linestyle="--", label=f"{run.name} p90")
    axes[0].set_ylabel("TTFT (s)")
    axes[1].set_ylabel("TPOT (s)")
    axes[1].set_xlabel("arrival time (s)")
    for ax in axes:
        ax.legend(loc="upper left", fontsize=7, ncol=2)
    fig.suptitle("TTFT and TPOT over time (by arrival; binned p50 and p90)")
    fig.tight_layout()
    return _svg(fig)


def _verify_rows(run: RunResults):
    s = run.steps
    v = kind_mask(s, "verify")
    return s, v


def fig_batch_over_time(runs: list[RunResults]) -> str:
    plt = _mpl()
    fig, axes = plt.subplots(2, 1, figsize=(11, 6), sharex=True)
    for i, run in enumerate(runs):
        s, v = _verify_rows(run)
        if not v.any():
            continue
        t = col(s, "start_s")[v]
        bs = col(s, "bs")[v]
        bsp = col(s, "bs_padded")[v]
        rep = col(s, "replica", np.int64, 0)[v]
        it = col(s, "iteration", np.int64, 0)[v]
        t0, t1 = _run_span(run)
        edges = time_bins(t0, t1)
        c = _centers(edges)
        n = _binned_sum(t, np.ones_like(t), edges)
        with np.errstate(invalid="ignore", divide="ignore"):
            axes[0].plot(c, _binned_sum(t, bs, edges) / n, color=_color(i),
                         label=f"{run.name} real")
            axes[0].plot(c, _binned_sum(t, bsp, edges) / n, color=_color(i), linestyle=":",
                         label=f"{run.name} padded")
            # requests verified per decode iteration (all launches of the iteration together)
            key = rep * (1 << 40) + it
            _, first = np.unique(key, return_index=True)
            ni = _binned_sum(t[first], np.ones(len(first)), edges)
            axes[1].plot(c, n / ni, color=_color(i), label=run.name)
    axes[0].set_ylabel("requests per verify launch")
    axes[1].set_ylabel("verify launches per iteration")
    axes[1].set_xlabel("simulated time (s)")
    for ax in axes:
        ax.legend(loc="upper left", fontsize=7, ncol=2)
    fig.suptitle("Batch size over time (mean per time bin)")
    fig.tight_layout()
    return _svg(fig)


MAX_PANELS = 8


def fig_width_mix(runs: list[RunResults]) -> str:
    plt = _mpl()
    runs = runs[:MAX_PANELS]  # one panel per run: the first eight
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 2.8 * len(runs) + 0.6), squeeze=False)
    for i, run in enumerate(runs):
        ax = axes[i, 0]
        s, v = _verify_rows(run)
        if not v.any():
            ax.text(0.5, 0.5, "no verify launches", transform=ax.transAxes, ha="center")
            continue
        t = col(s, "start_s")[v]
        w = col(s, "width", np.int64, 0)[v]
        bs = col(s, "bs")[v]
        idw = col(s, "iter_distinct_widths", np.int64, 0)[v]
        t0, t1 = _run_span(run)
        edges = time_bins(t0, t1)
        c = _centers(edges)
        total = _binned_sum(t, bs, edges)
        widths = np.unique(w)
        if len(widths) > 10:  # group the rare tail so the legend stays readable
            counts = np.array([bs[w == x].sum() for x in widths])
            keep = set(widths[np.argsort(-counts, kind="stable")[:9]].tolist())
        else:
            keep = set(widths.tolist())
        layers, labels = [], []
        for x in widths:
            if x in keep:
                layers.append(_binned_sum(t[w == x], bs[w == x], edges))
                labels.append(f"width {x}")
        other = ~np.isin(w, list(keep))
        if other.any():
            layers.append(_binned_sum(t[other], bs[other], edges))
            labels.append("other widths")
        with np.errstate(invalid="ignore", divide="ignore"):
            shares = [np.nan_to_num(layer / total) for layer in layers]
        ax.stackplot(c, shares, labels=labels, alpha=0.8,
                     colors=[_color(j) for j in range(len(shares))])
        key = col(s, "replica", np.int64, 0)[v] * (1 << 40) + col(s, "iteration", np.int64, 0)[v]
        _, first = np.unique(key, return_index=True)
        ni = _binned_sum(t[first], np.ones(len(first)), edges)
        nm = _binned_sum(t[first], (idw[first] > 1).astype(float), edges)
        with np.errstate(invalid="ignore", divide="ignore"):
            ax.plot(c, nm / ni, color="black", linewidth=1.5, label="iterations mixing widths")
        ax.set_ylim(0, 1.02)
        ax.set_ylabel("share")
        ax.set_title(f"{run.name}: launch width per verified request; black: fraction of "
                     f"iterations whose running set mixed widths", fontsize=8)
        ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=7)
    axes[-1, 0].set_xlabel("simulated time (s)")
    fig.suptitle("Width mix over time")
    fig.tight_layout()
    return _svg(fig)


def fig_padding(runs: list[RunResults]) -> str:
    plt = _mpl()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [3, 1.3]})
    width_frac, graph_frac = [], []
    for i, run in enumerate(runs):
        s, v = _verify_rows(run)
        t = col(s, "start_s")[v]
        tok = col(s, "tokens")[v]
        pad = col(s, "padded_slots")[v]
        gpad = col(s, "graph_pad_slots")[v]
        slots = tok + gpad  # tok already holds the width padding
        t0, t1 = _run_span(run)
        edges = time_bins(t0, t1)
        with np.errstate(invalid="ignore", divide="ignore"):
            ax.plot(_centers(edges), _binned_sum(t, pad + gpad, edges) / _binned_sum(t, slots, edges),
                    color=_color(i), label=run.name)
        tot = slots.sum()
        width_frac.append(pad.sum() / tot if tot else 0.0)
        graph_frac.append(gpad.sum() / tot if tot else 0.0)
    ax.set_ylabel("padded / verify slots")
    ax.set_xlabel("simulated time (s)")
    ax.legend(loc="upper left", fontsize=7)
    ax.set_title("padding waste over time", fontsize=9)
    x = np.arange(len(runs))
    bx.bar(x, width_frac, color="#d62728", label="width padding")
    bx.bar(x, graph_frac, bottom=width_frac, color="#ff9896", label="graph padding")
    bx.set_xticks(x, [r.name for r in runs], rotation=30, ha="right", fontsize=7)
    bx.set_ylabel("fraction of slots")
    bx.set_title("whole run", fontsize=9)
    bx.legend(fontsize=7)
    fig.suptitle("Padding waste in verify launches")
    fig.tight_layout()
    return _svg(fig)


def fig_side_by_side(runs: list[RunResults], summaries: list[dict]) -> str:
    plt = _mpl()
    panels = [
        ("throughput (tok/s)", lambda s: s["throughput_tok_s"]),
        ("goodput (fraction)", lambda s: (s["goodput"] or {}).get("fraction")),
        ("TTFT p90 (s)", lambda s: s["ttft_s"]["p90"]),
        ("TPOT p99 (s)", lambda s: s["tpot_s"]["p99"]),
        ("verify efficiency", lambda s: s["verify"]["verify_efficiency"]),
        ("verify launches / iteration", lambda s: s["iterations"]["verify_launches_per_iter"]),
        ("acceptance length", lambda s: s["verify"]["accept_len_mean"]),
        ("iterations mixing widths", lambda s: s["iterations"]["mixed_iter_frac"]),
    ]
    fig, axes = plt.subplots(2, 4, figsize=(12, 5.2))
    x = np.arange(len(runs))
    for ax, (title, get) in zip(axes.flat, panels):
        vals = [get(s) for s in summaries]
        ys = [np.nan if v is None else float(v) for v in vals]
        ax.bar(x, np.nan_to_num(ys), color=[_color(i) for i in range(len(runs))])
        for xi, y in zip(x, ys):
            ax.annotate("n/a" if not math.isfinite(y) else f"{y:.4g}", (xi, np.nan_to_num(y)),
                        ha="center", va="bottom", fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.set_xticks(x, [r.name for r in runs], rotation=30, ha="right", fontsize=7)
    fig.suptitle("Runs side by side")
    fig.tight_layout()
    return _svg(fig)


def fig_width_distribution(runs: list[RunResults], summaries: list[dict]) -> str:
    plt = _mpl()
    fig, ax = plt.subplots(1, 1, figsize=(11, 3.4))
    keys = sorted({int(k) for s in summaries for k in s["iterations"]["iter_distinct_widths"]})
    if not keys:
        ax.text(0.5, 0.5, "no verify iterations", transform=ax.transAxes, ha="center")
    else:
        x = np.arange(len(keys))
        w = 0.8 / len(runs)
        for i, s in enumerate(summaries):
            d = {int(k): v for k, v in s["iterations"]["iter_distinct_widths"].items()}
            tot = sum(d.values()) or 1
            ax.bar(x + i * w - 0.4 + w / 2, [d.get(k, 0) / tot for k in keys], width=w,
                   color=_color(i), label=runs[i].name)
        ax.set_xticks(x, [str(k) for k in keys])
        ax.legend(fontsize=7)
    ax.set_xlabel("distinct proposed widths in the iteration's running set")
    ax.set_ylabel("fraction of iterations")
    fig.suptitle("How many different widths each verify iteration had to serve")
    fig.tight_layout()
    return _svg(fig)


#: (id, title, caption, builder) in report order.
FIGURES: list[tuple[str, str, str, Callable]] = [
    ("latency-cdfs", "Latency CDFs",
     "TTFT, TPOT and end-to-end latency per request; inter-token gaps per token (solid: a "
     "burst's gap shared evenly by its tokens) and per step (dashed: gap between deliveries).",
     lambda runs, sums: fig_latency_cdfs(runs)),
    ("latency-over-time", "TTFT and TPOT over time",
     "Binned by arrival time: p50 (solid) and p90 (dashed) per bin.",
     lambda runs, sums: fig_latency_over_time(runs)),
    ("batch-over-time", "Batch size over time",
     "Requests per verify launch (real and graph-padded), and verify launches per decode "
     "iteration.", lambda runs, sums: fig_batch_over_time(runs)),
    ("width-mix", "Width mix over time",
     "Share of verified requests by launch width, and the fraction of iterations whose "
     "running set proposed more than one width (one panel per run, the first eight).",
     lambda runs, sums: fig_width_mix(runs)),
    ("width-distribution", "Distinct widths per iteration",
     "Distribution of the number of distinct proposed widths per verify iteration.",
     lambda runs, sums: fig_width_distribution(runs, sums)),
    ("padding", "Padding waste",
     "Padded query rows as a fraction of all rows the verify kernel computed, over time and "
     "for the whole run (width padding vs graph batch-size padding).",
     lambda runs, sums: fig_padding(runs)),
    ("side-by-side", "Runs side by side", "Headline metrics of every run.",
     lambda runs, sums: fig_side_by_side(runs, sums)),
]


def render_all(runs: list[RunResults], summaries: list[dict]) -> list[tuple[str, str, str, str]]:
    """[(id, title, caption, svg)] for every figure."""
    return [(fid, title, caption, build(runs, summaries)) for fid, title, caption, build in FIGURES]
