"""The report's comparison figures: headline metrics side by side, and rate sweeps.

A *rate sweep* is a set of runs whose configurations (``summary.json["config"]``) and traces
are the same except for ``rate_scale``: what ``specsched sweep`` writes for a ``rate_scale``
axis, or ``simulate --rate-scale`` repeated.  Runs that also differ in something else form one
series per value of it (e.g. one line per policy when the sweep crossed policy with
rate_scale).  Only series with at least two rates are drawn.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from analysis.metrics import col
from analysis.plots_base import run_color, subplots, svg
from analysis.results import RunResults

__all__ = ["fig_side_by_side", "RateSeries", "rate_series", "offered_rate", "fig_rate_sweep"]

#: (panel title, getter over a summarize() dict, scale for display)
_SIDE_PANELS = [
    ("throughput (output tok/s)", lambda s: s["throughput_tok_s"], 1.0),
    ("goodput (fraction)", lambda s: (s["goodput"] or {}).get("fraction"), 1.0),
    ("TTFT p90 (s)", lambda s: s["ttft_s"]["p90"], 1.0),
    ("TPOT p99 (ms)", lambda s: s["tpot_s"]["p99"], 1e3),
    ("verify efficiency", lambda s: s["verify"]["verify_efficiency"], 1.0),
    ("verify launches / iteration", lambda s: s["iterations"]["verify_launches_per_iter"], 1.0),
    ("acceptance length", lambda s: s["verify"]["accept_len_mean"], 1.0),
    ("iterations mixing widths", lambda s: s["iterations"]["mixed_iter_frac"], 1.0),
]


def _value(get, s: dict) -> float:
    try:
        v = get(s)
    except (KeyError, TypeError):
        return math.nan
    return math.nan if v is None else float(v)


def fig_side_by_side(runs: list[RunResults], summaries: list[dict]) -> str | None:
    """Headline metrics as horizontal bars, one row per run (only with two runs or more; panels
    no run has a value for are left out)."""
    if len(runs) < 2:
        return None
    panels = [(t, g, k) for t, g, k in _SIDE_PANELS
              if any(math.isfinite(_value(g, s)) for s in summaries)]
    ncols = 4 if len(panels) > 4 else len(panels)
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = subplots(nrows, ncols, (12, nrows * (0.28 * len(runs) + 1.5)), squeeze=False)
    y = np.arange(len(runs))[::-1]
    for ax, (title, get, scale) in zip(axes.flat, panels):
        vals = [_value(get, s) * scale for s in summaries]
        ax.barh(y, np.nan_to_num(vals), color=[run_color(i) for i in range(len(runs))])
        top = max([v for v in vals if math.isfinite(v)] + [0.0])
        for yi, v in zip(y, vals):  # one label per bar, right of its end: never two on a row
            ax.annotate("n/a" if not math.isfinite(v) else f"{v:.4g}",
                        (v if math.isfinite(v) else 0.0, yi), xytext=(3, 0),
                        textcoords="offset points", va="center", fontsize=7)
        ax.set_xlim(0, top * 1.3 if top > 0 else 1)
        ax.set_title(title, fontsize=9, loc="left")
        ax.set_yticks(y, [r.name for r in runs], fontsize=7)
        ax.grid(axis="y", visible=False)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_axis_off()
    return svg(fig)


def offered_rate(run: RunResults) -> float:
    """Requests per second offered to the run: n / (last arrival - first arrival)."""
    a = col(run.requests, "arrival_s")
    if len(a) < 2:
        return math.nan
    span = float(np.nanmax(a) - np.nanmin(a))
    return len(a) / span if span > 0 else math.nan


@dataclass(frozen=True)
class RateSeries:
    """Runs of one configuration at several rates, by increasing rate_scale."""

    label: str
    runs: tuple[int, ...]          # indices into the report's runs
    rate_scale: tuple[float, ...]


def _flat(d: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(d, dict):
        out: dict[str, str] = {}
        for k in sorted(d):
            out.update(_flat(d[k], f"{prefix}{k}."))
        return out
    return {prefix[:-1]: json.dumps(d, sort_keys=True)}


def rate_series(runs: list[RunResults]) -> list[RateSeries]:
    """The rate sweeps among the runs (see the module docstring), in order of first run."""
    groups: dict[str, list[tuple[float, int]]] = {}
    flats: dict[str, dict[str, str]] = {}
    for i, run in enumerate(runs):
        s = run.summary or {}
        cfg = s.get("config")
        if not isinstance(cfg, dict) or not isinstance(cfg.get("rate_scale"), (int, float)):
            continue
        flat = _flat({k: v for k, v in cfg.items() if k != "rate_scale"})
        flat["trace"] = json.dumps(s.get("trace"), sort_keys=True)
        key = json.dumps(flat, sort_keys=True)
        groups.setdefault(key, []).append((float(cfg["rate_scale"]), i))
        flats[key] = flat
    keys = [k for k, v in groups.items() if len({x for x, _ in v}) >= 2]
    if not keys:
        return []
    differ = sorted({name for k in keys for name in flats[k]
                     if len({flats[j].get(name) for j in keys}) > 1})
    out = []
    for k in keys:
        pts = sorted(groups[k])
        seen: dict[float, int] = {}
        for x, i in pts:
            seen.setdefault(x, i)  # the first run at a repeated rate stands for it
        label = ", ".join(f"{n.rsplit('.', 1)[-1]}={json.loads(flats[k][n])}" for n in differ
                          if n != "trace") or "rate sweep"
        if "trace" in differ:
            label += f" ({runs[pts[0][1]].name})"
        out.append(RateSeries(label, tuple(seen.values()), tuple(seen)))
    return out


def _log_if_wide(ax) -> None:
    """Log y axis, with plain-number ticks, when the plotted values span more than 20x."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ys = np.concatenate([np.asarray(line.get_ydata(), float) for line in ax.get_lines()]
                        or [np.zeros(0)])
    ys = ys[np.isfinite(ys) & (ys > 0)]
    if len(ys) and ys.max() / ys.min() > 20:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())


_QS = (("p50", "-"), ("p90", "--"), ("p99", ":"))


def fig_rate_sweep(runs: list[RunResults], summaries: list[dict]) -> str | None:
    """Goodput and throughput, TTFT and TPOT percentiles against the offered request rate, one
    line per rate series (None when the runs hold no rate sweep)."""
    series = rate_series(runs)
    if not series:
        return None
    fig, axes = subplots(1, 3, (12, 3.8))
    ax_g, ax_t, ax_p = axes
    any_goodput = False
    for j, ser in enumerate(series):
        c = run_color(j)
        x = [offered_rate(runs[i]) for i in ser.runs]
        sums = [summaries[i] for i in ser.runs]
        ax_g.plot(x, [s.get("throughput_req_s") or math.nan for s in sums], color=c,
                  linestyle=":", marker=".", label=f"{ser.label}: throughput")
        good = [(s.get("goodput") or {}).get("req_s") for s in sums]
        if any(g is not None for g in good):
            any_goodput = True
            ax_g.plot(x, [math.nan if g is None else g for g in good], color=c, marker="o",
                      label=f"{ser.label}: goodput")
        for ax, key, scale in ((ax_t, "ttft_s", 1.0), (ax_p, "tpot_s", 1e3)):
            for q, ls in _QS:
                ys = [(s.get(key) or {}).get(q) for s in sums]
                ax.plot(x, [math.nan if v is None else v * scale for v in ys], color=c,
                        linestyle=ls, marker=".", label=f"{ser.label} {q}")
    ax_g.set_ylabel("requests/s")
    ax_g.set_title("goodput and throughput" if any_goodput
                   else "throughput (goodput needs an SLO: --slo)", fontsize=9, loc="left")
    ax_t.set_ylabel("TTFT (s)")
    ax_t.set_title("TTFT percentiles", fontsize=9, loc="left")
    ax_p.set_ylabel("TPOT (ms)")
    ax_p.set_title("TPOT percentiles", fontsize=9, loc="left")
    for ax in (ax_t, ax_p):
        _log_if_wide(ax)
    for ax in axes:
        ax.set_xlabel("offered rate (req/s)")
        ax.legend(fontsize=6.5, loc="upper left")
    return svg(fig)
