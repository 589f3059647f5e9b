"""Per-step MAPE of the H100 calibrations with each group's factor following the draft width.

``specsched calibrate`` scales every row of a pass group by one factor over the prior: the
median of its anchors' ``measured / (base x prior)``. On DeepSeek-V2-Lite's H100 anchors that
residual depends on width: 0.74 for the three verify-graph anchors at width 1, 0.80-0.86 for
the four at width 4. The median, 0.80, leaves the live runs' verify passes 2.5-3.1% short by
summed time. This what-if gives each row the median residual of its group's anchors at its own
width, interpolated linearly between the anchored widths and held flat outside them (groups
whose anchors share one width, and prefill, are unchanged). It re-fits every H100 calibration's
anchors on a CPU and scores each against the live runs recorded on its GPU, as
``calibrate_prior_whatif.py`` does, under the default prior (``fitted``). It reports all steps,
then verify steps with their summed time (predicted over live, signed).

Written after seeing these runs. Of the 29 pairings whose calibration anchors a group at
several widths, it is worse on 28. V2-Lite goes 2.05-2.57% -> 2.74-3.13% per step, verify's time
from 2.3-3.1% short to 1.8-4.2% long. The 70B goes 0.91-1.89% -> 1.55-3.21%. The exception is
the 8B's long-context run of ``h100-2026-12-06``, 1.37 -> 1.11%. The anchors' width curve does
not carry over to the live runs. CPU only, about 20 s.

    python benchmarks/calibrate_width_whatif.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.fidelity.stats import step_errors  # noqa: E402
from backends.calibrate import group_name  # noqa: E402
from benchmarks.calibrate_prior_whatif import fitted_table, refits, runs_on  # noqa: E402


def width_prior(anchors: list[dict], prior, factors: dict):
    """``prior`` times, per row, its group's median residual at the row's width over the
    group's factor (interpolated in width between anchored widths, flat outside; 1 for
    prefill and for groups anchored at one width only)."""
    by: dict[str, dict[int, list[float]]] = {}
    for a in anchors:
        by.setdefault(group_name(a["kind"], a["graph"]), {}).setdefault(int(a["width"]), []).append(
            a["measured_s"] / a["base_s"] / prior(a))
    curve = {g: (np.array(sorted(d), float),
                 np.array([statistics.median(d[w]) for w in sorted(d)]) / factors[g]["factor"])
             for g, d in by.items() if len(d) > 1 and g != "prefill"}

    def adjusted(r: dict) -> float:
        g = group_name(r["kind"], r["graph"])
        if g not in curve:
            return prior(r)
        ws, ys = curve[g]
        return prior(r) * float(np.interp(int(r["width"]), ws, ys))

    return adjusted


def main() -> int:
    results = ROOT / "benchmarks" / "results"
    print("| calibration | live run | one factor per group: all / verify / verify time "
          "| per width: all / verify / verify time |")
    print("|---|---|---|---|")
    for f in refits(results):
        runs = runs_on(sorted(p for p in results.iterdir() if p.is_dir()), f.model.name, f.uuid)
        if not runs:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            tables = [fitted_table(f.grid, f.line, f.bmeta, f.factors, p,
                                   Path(tmp) / f"{i}.parquet")
                      for i, p in enumerate((f.prior, width_prior(f.anchors, f.prior,
                                                                  f.factors)))]
            for run in runs:
                steps = pq.read_table(run / "steps.parquet")
                cells = []
                for t in tables:
                    e = step_errors(steps, t, kv_lookup="straggler")
                    v = e["by_kind"]["verify"]
                    cells.append(f"{e['mape_all_pct']:.2f}% / {v['mape_pct']:.2f}% / "
                                 f"{v['time_signed_pct']:+.1f}%")
                print(f"| {f.path.parent.name}/{f.path.name} | {run.parent.name}/{run.name} | "
                      + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
