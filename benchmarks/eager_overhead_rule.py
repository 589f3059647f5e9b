"""The two rules for eager points a profile did not measure, side by side on every live run (CPU).

``backends.profile.EAGER_OVERHEAD`` derives an unmeasured eager verify point as its graph value
plus an overhead: ``"median"`` one overhead for every point, ``"by_bs"`` (the default) the
overhead at the measured eager batch sizes either side. For each shipped model with live runs
under ``benchmarks/results/`` this prints, under each rule, the MAPE of the run's eager verify
and draft-extend steps and of all its steps, and each profile's held-out MAPE.

    .venv/bin/python benchmarks/eager_overhead_rule.py [--model llama-3.1-70b ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import backends.profile as bp  # noqa: E402
from analysis.fidelity.lookup import predict_steps  # noqa: E402
from analysis.fidelity.stats import heldout_errors  # noqa: E402
from benchmarks.systematic_errors import live_runs  # noqa: E402

MODELS = ("llama-3.1-8b", "llama-3.1-70b", "deepseek-v2-lite", "deepseek-v3")
RULES = ("median", "by_bs")


def errors(run: Path, table) -> tuple[int, float, float] | None:
    """(eager verify and draft-extend steps, their MAPE %, every step's MAPE %) of a live run
    against ``table``; None for a run without such eager steps."""
    import pyarrow.parquet as pq

    steps = pq.read_table(run / "steps.parquet")
    kv_lookup = ((json.loads((run / "summary.json").read_text()).get("config") or {})
                 .get("backend") or {}).get("kv_lookup") or "straggler"
    pred, _ = predict_steps(steps, table, kv_lookup)
    err = np.abs(pred / steps.column("latency_s").to_numpy() - 1) * 100
    kind = np.asarray(steps.column("kind").to_pylist())
    eager = ~steps.column("graph").to_numpy(zero_copy_only=False) & np.isin(
        kind, ["verify", "draft_extend"])
    if not eager.any():
        return None
    return int(eager.sum()), float(err[eager].mean()), float(err.mean())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", action="append", choices=MODELS)
    a = ap.parse_args(argv)
    saved = bp.EAGER_OVERHEAD
    try:
        for model in a.model or MODELS:
            profile = ROOT / "backends" / "profiles" / f"{model}__H200.parquet"
            res, held = {}, {}
            for rule in RULES:
                bp.EAGER_OVERHEAD = rule
                table = bp.load_profile(profile)
                h = heldout_errors(table)
                held[rule] = None if h is None else h["mape_pct"]
                for run in live_runs(ROOT / "benchmarks" / "results", model):
                    e = errors(run, table)
                    if e is not None:
                        res.setdefault(run, {})[rule] = e
            print(f"{model}: held-out MAPE " + " -> ".join(
                "-" if held[r] is None else f"{held[r]:.3f}%" for r in RULES)
                + f" ({' -> '.join(RULES)})")
            for run, v in res.items():
                (n, e0, a0), (_, e1, a1) = v[RULES[0]], v[RULES[1]]
                print(f"  {run.parent.name}/{run.name}: {n} eager steps, MAPE {e0:.2f} -> "
                      f"{e1:.2f}%; all steps {a0:.3f} -> {a1:.3f}%")
    finally:
        bp.EAGER_OVERHEAD = saved
    return 0


if __name__ == "__main__":
    sys.exit(main())
