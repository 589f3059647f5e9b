"""How much a uniform per-step bias moves each whole-run check, on shipped live runs.

A profile recorded on one H200 and a live run recorded on another differ by the machines' speed
as well as by the profile's lookup: the same grid point measured on six H200s spread by 1-10%
(docs/backends.md, *Machines differ*). This script measures what such an offset does to each
fidelity check: it judges the shipped profile against a recorded live run three times, with
every latency scaled by ``1 - d``, ``1`` and ``1 + d`` (``analysis.fidelity.degrade.scale_rows``),
and prints, per check, the value at each scale and the *amplification*: the check's change per
1% of uniform step bias ((v(1+d) - v(1-d)) / 2d, in points per percent).
A saturated run's waiting-time percentiles amplify a step bias several times; a check at 3%
then passes only when the profile's machine and the run's agree to 3% / amplification, which
is what ``specsched calibrate`` on the run's GPU is for. Every fidelity report now carries the
same two scales for ``d`` = 1% beside each whole-run check (``fidelity --offset-pct``,
``analysis.fidelity.offset``); this script gives them for any ``d`` and the amplification.

CPU only; each judgement re-simulates the run (20-90 s for the runs below).

    .venv/bin/python benchmarks/bench_queue_amplification.py \\
        --profile backends/profiles/deepseek-v3__H200.parquet --model deepseek-v3 \\
        --reference-run benchmarks/results/h200-2026-12-02g/live_v3400 --limit 400
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.fidelity import run_fidelity  # noqa: E402
from analysis.fidelity.degrade import scale_rows, write_rows_changed  # noqa: E402

CONV = ROOT / "traces" / "samples" / "azure_conv_eagle_2k.parquet"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", required=True, type=Path)
    ap.add_argument("--model", required=True)
    ap.add_argument("--reference-run", required=True, type=Path)
    ap.add_argument("--trace", type=Path, default=CONV)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--delta", type=float, default=0.01, help="the scale step d (default 0.01)")
    ap.add_argument("--json", type=Path, help="write the values and amplifications here")
    a = ap.parse_args(argv)
    scales = (1 - a.delta, 1.0, 1 + a.delta)
    values: dict[float, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for s in scales:
            prof = a.profile if s == 1.0 else write_rows_changed(
                a.profile, Path(tmp) / f"x{s}.parquet", lambda rows, s=s: scale_rows(rows, s),
                f"every latency x {s} (bench_queue_amplification)")
            rep = run_fidelity(a.trace, a.model, profile=str(prof), limit=a.limit,
                               reference_run=a.reference_run)
            values[s] = {k: c["value_pct"] for k, c in rep["checks"].items()}
            print(f"scale {s}: done", file=sys.stderr)
    lo, mid, hi = scales
    amp = {k: (values[hi][k] - values[lo][k]) / (2 * a.delta * 100) for k in values[mid]}
    print(f"{a.reference_run.name} ({a.limit or 'all'} requests), profile {a.profile.name}")
    print(f"| check | x{lo} | x1 | x{hi} | points per 1% of step bias |")
    print("|---|---|---|---|---|")
    for k in values[mid]:
        print(f"| {k} | {values[lo][k]:+.2f}% | {values[mid][k]:+.2f}% | {values[hi][k]:+.2f}% "
              f"| {amp[k]:+.2f} |")
    if a.json:
        a.json.write_text(json.dumps({"reference_run": str(a.reference_run), "limit": a.limit,
                                      "profile": str(a.profile), "delta": a.delta,
                                      "values": {str(s): v for s, v in values.items()},
                                      "amplification": amp}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
