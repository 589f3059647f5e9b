"""The partial-wave form for AITER's 3D split-KV kernel, scored on recorded straggler runs (CPU).

``benchmarks/bench_aiter_straggler.py`` times verify and draft graphs with stragglers against
uniform batches of the same launch. On the 3D split-KV kernel (small batches: the kernel the
conversation and long-context samples mostly run) the lookup rule of 2026-12-02 took a batch's
makespan as ``max(W x mean, max(N / S, 1) x mean + phi x (kv_max - mean))`` over ``W`` waves
of the resident slots: when the last wave was only partly filled, the straggler was taken to
hide in it. The run of 2026-12-02 (``straggler3d.json``) showed the opposite: 10-12 requests at
width 4 (1.2-1.5 waves) erred by -4 to -9%, 16, 24 and 32 requests (full waves) by under 2%.

The kernel splits every sequence into the same number of segments and dispatches its programs
query block first, so one straggler's programs are spread through all the waves, and a partly
filled wave runs faster than a full one (fewer programs per SM). The engine's rule
(``backends.attention_kv._split_kv``) now says so: a wave filled to a fraction ``f`` takes
``f ** gamma`` of a full wave's time, and only the last wave's straggler programs outlast the
rest, running nearly alone (``phi``). This script scores both rules on every 3D-kernel case of
the recorded runs (three runs, two days, three machines), as ``bench_aiter_straggler.py --score``
does: each case's measured uniform curve read at the rule's KV.

    python benchmarks/straggler_3d_waves.py
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_aiter_straggler as bench  # noqa: E402  (its case layout and scoring)
from backends.attention_kv import (ATT_BQ, ATT_G3D, ATT_KVH, ATT_S3D, ATT_SMS,  # noqa: E402
                                   KERNEL_3D, attention_kernel, attention_params, kv_segments)

RESULTS = ROOT / "benchmarks" / "results"
RUNS = (RESULTS / "h200-2026-12-02b" / "straggler3d.json",
        RESULTS / "h200-2026-11-29d" / "straggler.json",
        RESULTS / "h200-2026-11-29d" / "straggler_holdout.json")


def is_3d(case: dict, att: np.ndarray) -> bool:
    """Whether AITER launches the 3D split-KV kernel for the case's graph (the engine's rule)."""
    decode = case["kind"] == "draft"
    rows = case["bs"] * (1 if decode else case["width"])
    return attention_kernel(float(case["bs"]), float(rows), decode, att) == KERNEL_3D


def previous_rule_kv(case: dict, att: np.ndarray) -> float:
    """The KV the 3D rule of 2026-12-02 looked a case up at (the waves and tail rule, kept here
    only to compare; ``backends.attention_kv.effective_kv`` before the partial-wave form)."""
    kv = bench.case_kv(case).astype(float)
    nseq, nreal = float(case["bs"]), float(case["real"])
    rows = nseq * (1 if case["kind"] == "draft" else case["width"])
    kvsum, kvmax = float(kv.sum()), float(kv.max())
    mean = kvsum / nseq
    seg = kv_segments(nseq, rows, att)
    slots, gamma, sms = att[ATT_S3D], att[ATT_G3D], att[ATT_SMS]
    per_seq = np.ceil(rows / nseq / att[ATT_BQ]) * att[ATT_KVH] * seg
    n_real = nreal * per_seq
    waves = max(np.ceil(n_real / slots), 1.0)
    waves_u = max(np.ceil(nseq * per_seq / slots), 1.0)
    phi = min((max(per_seq / sms, 1.0) / (min(nseq * per_seq, slots) / sms)) ** gamma, 1.0)
    mreal = kvsum / nreal
    span = max(waves * mreal, max(n_real / slots, 1.0) * mreal + phi * (kvmax - mreal))
    return min(max(span / waves_u, mean), max(kvmax, mean))


def latency_error(case: dict, k: float) -> float:
    """The case's latency error (%) when looked up at KV ``k`` on its measured uniform curve."""
    ks = [int(x) for x in case["uniform"]]
    uni = np.maximum.accumulate(np.array(list(case["uniform"].values()), dtype=np.float64))
    return (float(np.interp(k, ks, uni)) / case["mixed_s"] - 1) * 100


def scored(path: Path) -> list[dict]:
    """The run's 3D-kernel cases, each with the mean lookup's, the previous rule's and the
    engine's latency error (``mean_err``, ``previous_err``, ``rule_err``, in %)."""
    d = json.loads(Path(path).read_text())
    att = attention_params(d["summary"]["occupancy"])
    with contextlib.redirect_stdout(io.StringIO()):
        rows, _, _ = bench.rescore(str(path))  # the engine's effective_kv, as --score runs it
    out = []
    for c, r in zip(d["cases"], rows):
        if is_3d(c, att):
            out.append({**c, "mean_err": r["mean_err_pct"], "rule_err": r["rule_err_pct"],
                        "previous_err": latency_error(c, previous_rule_kv(c, att))})
    return out


def line(name: str, e: np.ndarray) -> str:
    return (f"{name:<52} {len(e):3d} cases  MAPE {np.mean(np.abs(e)):5.2f}%  signed "
            f"{np.mean(e):+5.2f}%  worst {e[np.argmax(np.abs(e))]:+6.1f}%  within 3%: "
            f"{int(np.sum(np.abs(e) <= 3))}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=",".join(str(p) for p in RUNS),
                    help="straggler JSONs to score (comma-separated)")
    ap.add_argument("--cases", action="store_true", help="print every case")
    args = ap.parse_args()
    everything: list[dict] = []
    for p in [Path(x) for x in args.runs.split(",") if x]:
        cases = scored(p)
        if not cases:
            continue
        everything += cases
        name = f"{p.parent.name}/{p.name}"
        for key, label in (("mean_err", "mean KV"), ("previous_err", "previous rule"),
                           ("rule_err", "partial-wave form")):
            print(line(f"{name}, {label}", np.array([c[key] for c in cases])))
        if args.cases:
            for c in cases:
                print(f"    {c['spec']:<28} mean {c['mean_err']:+6.2f}%  previous "
                      f"{c['previous_err']:+6.2f}%  now {c['rule_err']:+6.2f}%")
    for key, label in (("mean_err", "mean KV"), ("previous_err", "previous rule"),
                       ("rule_err", "partial-wave form")):
        print(line(f"all runs, {label}", np.array([c[key] for c in everything])))


if __name__ == "__main__":
    main()
