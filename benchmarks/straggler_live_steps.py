"""The straggler lookup on recorded live runs' mixed steps, on a CPU: the table in docs/backends.md.

A live run records each pass's shape and latency (``steps.parquet``). This script takes the
verify and draft *graph* steps whose longest request holds at least 1.5 x the mean KV of the
launch (padded rows counted as empty) and at least 1,024 tokens, and scores the profile's
latency at three coordinates: the mean KV, the waves and tail rule alone
(``backends.attention_kv.effective_kv``), and the engine's lookup (that rule, with the
lone-straggler form on the 2D verify kernel: ``verify_kv``). It prints MAPE and mean signed
error per run, and the same for the steps that ran the 2D verify kernel.

    python benchmarks/straggler_live_steps.py
    python benchmarks/straggler_live_steps.py --profile OTHER.parquet --runs DIR,DIR
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.fidelity.lookup import col, lookup_points, predict  # noqa: E402
from backends.attention_kv import KERNEL_2D, attention_kernel, attention_rows, table_attention
from backends.profile import load_profile  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_PROFILE = ROOT / "backends" / "profiles" / "llama-3.1-8b__H200.parquet"
DEFAULT_RUNS = (RESULTS / "h200-2026-11-29d" / "live_conv400_a",
                RESULTS / "h200-2026-11-29d" / "live_conv400_b",
                RESULTS / "h200-2026-11-29c" / "live_conv400",
                RESULTS / "h200-2026-11-29c" / "live_code")
#: a step is mixed when its longest request holds this many times the launch's mean KV ...
RATIO = 1.5
#: ... and at least this many tokens
MIN_KV = 1024


def mixed_steps(steps, p: dict) -> np.ndarray:
    """Indices of the verify and draft graph steps with a straggler (:data:`RATIO`, :data:`MIN_KV`)."""
    kv_max = col(steps, "kv_max").astype(np.float64)
    m = (np.isin(p["kind"], ("verify", "draft")) & p["graph"] & (kv_max >= RATIO * p["kv_at_mean"])
         & (kv_max >= MIN_KV))
    return np.flatnonzero(m)


def on_2d_verify(p: dict, idx: np.ndarray, table) -> np.ndarray:
    """Which of the steps ``idx`` are verify launches on AITER's 2D kernel."""
    att = table_attention(table)
    out = np.zeros(len(idx), dtype=bool)
    for j, i in enumerate(idx):
        if p["kind"][i] == "verify":
            rows = attention_rows(False, bool(p["graph"][i]), p["bs"][i], p["width"][i],
                                  p["tokens"][i])
            out[j] = attention_kernel(p["bs"][i], rows, False, att) == KERNEL_2D
    return out


def errors(steps, table) -> dict[str, np.ndarray]:
    """Relative errors of the mixed steps at each coordinate, and which ran the 2D verify kernel."""
    steps = steps.drop_columns([c for c in ("lookup_kv",) if c in steps.column_names])
    waves = replace(table, attention={**table.attention, "lone_straggler_2d_s": 0.0})
    p = lookup_points(steps, table)
    idx = mixed_steps(steps, p)
    measured = col(steps, "latency_s").astype(np.float64)[idx]
    out = {"2d": on_2d_verify(p, idx, table)}
    sub = {k: v[idx] for k, v in p.items()}
    out["engine"] = predict(sub, table)[0] / measured - 1
    sub_w = {k: v[idx] for k, v in lookup_points(steps, waves).items()}
    out["waves"] = predict(sub_w, table)[0] / measured - 1
    sub["kv"] = sub["kv_at_mean"]
    out["mean"] = predict(sub, table)[0] / measured - 1
    return out


def fmt(e: np.ndarray) -> str:
    if not len(e):
        return f"{'-':>16}"
    return f"{np.mean(np.abs(e)) * 100:6.2f}% ({np.mean(e) * 100:+.2f}%)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default=str(DEFAULT_PROFILE))
    ap.add_argument("--runs", default=",".join(str(r) for r in DEFAULT_RUNS),
                    help="live results folders (comma-separated)")
    args = ap.parse_args()
    table = load_profile(args.profile)
    if not table.attention:
        sys.exit(f"error: {args.profile}: the profile carries no attention metadata")
    print(f"profile {args.profile}; MAPE (mean signed error)")
    print(f"{'run':<36} {'steps':>6} {'mean KV':>17} {'waves rule':>17} {'engine':>17} | "
          f"{'2D verify':>9} {'waves rule':>17} {'engine':>17}")
    for run in (r for r in args.runs.split(",") if r):
        e = errors(pq.read_table(Path(run) / "steps.parquet"), table)
        two = e["2d"]
        name = "/".join(Path(run).parts[-2:])
        print(f"{name:<36} {len(two):6d} {fmt(e['mean'])} {fmt(e['waves'])} {fmt(e['engine'])} | "
              f"{int(two.sum()):9d} {fmt(e['waves'][two])} {fmt(e['engine'][two])}")


if __name__ == "__main__":
    main()
