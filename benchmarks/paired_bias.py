"""Per model, trace and profile: the bias a request sees, over today's fidelity reports.

Each fidelity report carries ``paired`` (``analysis.fidelity.paired``): every request's simulated
TTFT, TPOT and E2E against its own live figure, the median of ``simulated / live - 1``, and the
same for each repeat recording of the live run against it. This collects them over today's
reports (``benchmarks/fidelity_table.py``'s rows: against today's shipped profiles and their
current calibrations, no backend what-if) per model, trace kind and profile kind:

    python benchmarks/paired_bias.py [--results benchmarks/results] [--other-gpus]

Per metric it prints the median over the reports of their per-request median (signed), the
largest absolute one, and how many reports have it within the 3% target; and, over the reports
with a repeat, how many have it within the target plus the repeat's own median (the floor). A
whole-run percentile can miss by 20% where this says 0.1%: then the miss is the quantile's (the
phase of arrivals against decode rounds), not the profile's. CPU only; reads the reports' JSON.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.fidelity_table import BadReport, load_rows, read_json, results_args  # noqa: E402

METRICS = ("ttft", "tpot", "e2e")
TARGET_PCT = 3.0


def collect(rows: list[dict]) -> dict[tuple[str, str, str], dict[str, list[tuple]]]:
    """(model, trace, profile kind) -> metric -> [(median %, repeat median % or None, report)]
    over today's reports that carry ``paired``."""
    out: dict[tuple[str, str, str], dict[str, list[tuple]]] = {}
    for r in rows:
        if (r["profile"] not in ("shipped", "calibrated") or r["profile_current"] is not True
                or r["what_ifs"]):
            continue
        paired = read_json(Path(r["report"]).with_suffix(".json")).get("paired")
        if not paired:
            continue
        g = out.setdefault((r["model"], r["trace"], r["profile"]), {m: [] for m in METRICS})
        for m in METRICS:
            d = paired.get(m) or {}
            if d.get("median_pct") is not None:
                g[m].append((d["median_pct"], d.get("repeat_median_pct"), r["report"]))
    return out


def _cell(vals: list[tuple]) -> str:
    if not vals:
        return "-"
    med = np.array([v[0] for v in vals])
    within = int(np.sum(np.abs(med) <= TARGET_PCT))
    reps = [v for v in vals if v[1] is not None]
    floor = (f"; {sum(abs(v[0]) <= TARGET_PCT + v[1] for v in reps)} of {len(reps)} within "
             "target + repeat" if reps else "")
    return (f"{np.median(med):+.2f}% (max {np.max(np.abs(med)):.2f}%; {within} of {len(vals)} "
            f"within {TARGET_PCT:g}%{floor})")


def render(groups: dict) -> str:
    lines = ["| model | trace | profile | reports | TTFT per request | TPOT per request | "
             "E2E per request |", "|---|---|---|---|---|---|---|"]
    for (model, trace, kind), g in sorted(groups.items()):
        n = max(len(v) for v in g.values())
        lines.append(f"| {model} | {trace} | {kind} | {n} | "
                     + " | ".join(_cell(g[m]) for m in METRICS) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    results_args(ap)
    args = ap.parse_args(argv)
    try:
        groups = collect(load_rows(args.results, other_gpus=args.other_gpus))
    except BadReport as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not groups:
        print(f"error: {args.results}: no report of today's profiles carries per-request "
              "figures (re-run them: benchmarks/regenerate_reports.py --calibrated)",
              file=sys.stderr)
        return 2
    sys.stdout.write("Per report, the median over its requests of simulated / live - 1; per "
                     "cell, the median of that over the reports (signed), the largest "
                     "absolute, and how many reports are within the target.\n\n")
    sys.stdout.write(render(groups))
    return 0


if __name__ == "__main__":
    sys.exit(main())
