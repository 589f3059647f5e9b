"""tune-spec's figure: throughput and TPOT against the draft count, per batch-size range.

Two panels from the static runs of a ``tune_spec`` result: each batch-size range's decode
throughput (tokens / s) and time per committed token (ms) at ``k = 1 .. max_k``, with the
no-speculation baseline (``k = 0``) beside each line as a hollow marker and a dotted level, and
the per-range ``k`` the schedule search started from ringed.  Ranges with no rounds at a ``k``
leave a gap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from analysis.plots_base import mpl
from traces.atomic import atomic_output_file

__all__ = ["plot_tune", "write_plot"]

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b")


def plot_tune(res: dict[str, Any]):
    """The matplotlib figure of a ``tune_spec`` result (see the module text)."""
    plt = mpl()
    statics = {int(k): v for k, v in res["static_by_k"].items()}
    ks = sorted(k for k in statics if k > 0)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    panels = (("throughput_tok_s", 1.0, "decode throughput (tokens/s)"),
              ("tpot_s", 1e3, "time per token a request sees (ms)"))
    ranges = statics[0]["ranges"]
    for ax, (key, mult, label) in zip(axes, panels):
        for g, rg in enumerate(ranges):
            c = _COLORS[g % len(_COLORS)]
            xs = [k for k in ks if statics[k]["ranges"][g][key] is not None]
            ys = [statics[k]["ranges"][g][key] * mult for k in xs]
            name = f"bs {rg['bs'][0]}-{rg['bs'][1]}"
            ax.plot(xs, ys, "-o", color=c, ms=4, label=name if xs else name + " (no rounds)")
            base = statics[0]["ranges"][g][key]
            if base is not None:
                ax.plot([0], [base * mult], "o", mfc="none", color=c, ms=7)
                ax.axhline(base * mult, color=c, ls=":", lw=0.8)
            pick = (res.get("per_range_best_k") or [None] * len(ranges))[g]
            if pick and pick in xs:
                ax.plot([pick], [statics[pick]["ranges"][g][key] * mult], "o", mfc="none",
                        mec="black", ms=11, mew=1.2)
        ax.set_xticks(range(0, (ks[-1] if ks else 0) + 1))
        ax.set_xticklabels(["no spec"] + [str(k) for k in ks], fontsize=8)
        ax.set_xlabel("draft tokens per round (static k)")
        ax.set_ylabel(label)
        if key == "tpot_s":
            ax.set_ylim(bottom=0)
    axes[0].legend(fontsize=8, title="batch size", title_fontsize=8)
    b = res["best"]
    slo = res["slo"]
    fig.suptitle(f"tune-spec: best {b['controller']} (k<={b['num_draft_tokens'] - 1}), "
                 f"goodput {res['best_goodput']:.3f} req/s; best static k={res['best_static']['k']}"
                 f"; SLO ttft {slo['ttft_s']} s, tpot {slo['tpot_s']} s\n"
                 "hollow circle at 'no spec' and dotted line: no speculation; black ring: the "
                 "range's fastest k", fontsize=8)
    fig.tight_layout()
    return fig


def write_plot(res: dict[str, Any], path: str | Path, *, inputs=()) -> None:
    """Write the figure as a PNG, atomically."""
    fig = plot_tune(res)
    with atomic_output_file(path, inputs=inputs) as tmp:
        fig.savefig(tmp, format="png", dpi=120, metadata={"Software": None})
    mpl().close(fig)
