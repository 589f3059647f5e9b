"""Benchmark: convert the full Azure conversation trace with Spec-Bench EAGLE acceptance.

Prints the conversion's wall time (target: under 5 s), the rows, the mean committed tokens per
step against the source's (target: within 0.1 of 3.58), the width mix, and the time
``read_trace_arrays`` takes to load the result (target: well under 0.5 s).

    python benchmarks/bench_convert.py [--trace CSV] [--answers JSONL] [--repeat N]

Defaults read ../shared/data (not shipped with the package).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SHARED = ROOT.parent / "shared" / "data"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(SHARED / "traces" / "azure2023_conv.csv"))
    ap.add_argument("--answers", default=str(SHARED / "acceptance" / "specbench_vicuna7b_eagle.jsonl"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from traces import read_trace_arrays
    from traces.specbench import load_specbench
    from traces.convert import convert

    source_mean = float(load_specbench(args.answers).all_lengths.mean())
    times, read_times = [], []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "conv.parquet"
        for i in range(args.repeat):
            t0 = time.perf_counter()
            res = convert("azure", args.trace, out, acceptance=f"specbench:{args.answers}",
                          seed=args.seed)
            times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            ta = read_trace_arrays(out)
            read_times.append(time.perf_counter() - t0)
        size = out.stat().st_size
    a = ta.accepted_tokens.astype(np.int64)
    d = ta.draft_tokens.astype(np.int64)
    mean_committed = float(np.mean(a + 1))
    widths = np.bincount(d + 1)
    print(f"input            {args.trace}")
    print(f"acceptance       specbench:{Path(args.answers).name} (seed {args.seed})")
    print(f"rows             {res.rows:,}")
    print(f"verify steps     {res.steps:,}")
    print(f"output size      {size / 1e6:.2f} MB")
    print(f"convert time     first {times[0]:.3f} s, median of {len(times)} "
          f"{statistics.median(times):.3f} s   (target < 5 s: "
          f"{'PASS' if max(times) < 5 else 'FAIL'})")
    print(f"read_trace_arrays median {statistics.median(read_times):.3f} s   "
          f"(target < 0.5 s: {'PASS' if statistics.median(read_times) < 0.5 else 'FAIL'})")
    print(f"committed/step   {mean_committed:.4f} vs source {source_mean:.4f} "
          f"(|diff| {abs(mean_committed - source_mean):.4f}; target < 0.1: "
          f"{'PASS' if abs(mean_committed - source_mean) < 0.1 else 'FAIL'})")
    shares = ", ".join(f"w{w}: {c / d.size:.1%}" for w, c in enumerate(widths) if c)
    print(f"widths           {shares}   (mixed: {'yes' if (widths > 0).sum() > 1 else 'no'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
