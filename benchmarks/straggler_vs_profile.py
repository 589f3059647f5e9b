"""A straggler benchmark's measured batches against a profile's predictions (CPU).

``bench_aiter_straggler.py`` times, on one GPU, batches with stragglers and uniform batches of
the same launch at several KV lengths. This script sets both beside what a profile predicts for
them, so an error on a live run's straggler band can be split into its two sources:

- the **uniform curve**: the profile's uniform batch at (batch size, width, KV) against the
  measured uniform batch (grid interpolation between batch sizes, widths and KV lines);
- the **straggler rule**: the KV the fidelity report looks a live step up at (from its mean
  and longest KV, ``analysis.fidelity.lookup``: the engine's rule as it is now), read off the
  *measured* uniform curve (linear between its points) against the measured mixed batch.

Beside both, the mixed batch as the profile predicts it (its curve at that KV): the error a
fidelity report would show for the step.

Measured times are the GPU's plus the modelled tensor-parallel all-reduce the benchmark
recorded (``comm_s``), as a profile's are. A JSON without ``comm_s`` (recorded before it was
kept) is compared as it is, with a warning: exact only at tp 1.

    python benchmarks/straggler_vs_profile.py benchmarks/results/h200-2026-12-02f/straggler70b.json \\
        --model llama-3.1-70b --tp 8

``--fit-tail`` fits the 3D split-KV kernel's tail exponent (``backends.attention_kv``) to the
cases that run that kernel: for each exponent from 0 to 1 in steps of 0.05 it prints the rule's
MAPE on the measured curve, and names the least.  The rule read off the measured curve does not
depend on the profile's own curve, so the fit is the rule's alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_aiter_straggler as bench  # noqa: E402  (its case layout)
from analysis.fidelity.lookup import lookup_points, predict  # noqa: E402
from backends.attention_kv import (KERNEL_3D, attention_kernel, attention_params,  # noqa: E402
                                   table_model)
from backends.models import load_model  # noqa: E402
from backends.profile import ProfileExecutor  # noqa: E402
from backends.shipped import default_profile  # noqa: E402


def case_steps(cases: list[dict]) -> pa.Table:
    """The mixed batches of ``cases`` as a live run's steps table records them: real batch size,
    padded batch size, width, rows, and the real requests' mean and longest KV."""
    kv = [bench.case_kv(c).astype(float) for c in cases]
    return pa.table({
        "kind": [c["kind"] for c in cases],
        "graph": [bool(c.get("graph", True)) for c in cases],
        "bs": [int(c["real"]) for c in cases],
        "bs_padded": [int(c["bs"]) for c in cases],
        "width": [int(c["width"]) if c["kind"] == "verify" else 1 for c in cases],
        "tokens": [int(c["real"]) * (int(c["width"]) if c["kind"] == "verify" else 1)
                   for c in cases],
        "kv_mean": [float(k.mean()) for k in kv],
        "kv_max": [float(k.max()) for k in kv],
        "mode": ["uniform"] * len(cases),
        "passes": [1] * len(cases),
    })


def compare(cases: list[dict], table) -> list[dict]:
    """Per case: the uniform points' errors (profile / measured - 1, each KV the benchmark
    measured) and the mixed batch's, predicted as the fidelity report predicts a live step."""
    pts = lookup_points(case_steps(cases), table)
    pred, _ = predict(pts, table)
    out = []
    for i, c in enumerate(cases):
        comm = float(c.get("comm_s", 0.0))
        graph = bool(c.get("graph", True))
        uni = []
        for k, t in c["uniform"].items():
            if c["kind"] == "draft":
                p = table.draft_pass_s(c["bs"], float(k), graph)[0]
            else:
                p = table.verify_s(c["bs"], c["width"], float(k), graph)[0]
            uni.append((int(k), t + comm, p, p / (t + comm) - 1))
        mixed = c["mixed_s"] + comm
        on_curve = measured_at(c, float(pts["kv"][i]))
        out.append({"spec": c["spec"], "uniform": uni, "mixed_s": mixed,
                    "predicted_s": float(pred[i]), "lookup_kv": float(pts["kv"][i]),
                    "mixed_err": float(pred[i]) / mixed - 1,
                    "rule_err_measured_curve": on_curve / mixed - 1})
    return out


def measured_at(case: dict, kv: float) -> float:
    """The case's measured uniform batch at ``kv`` (linear between the KVs it was timed at, made
    monotone in KV: its noise is not), its modelled all-reduce included."""
    comm = float(case.get("comm_s", 0.0))
    ks = np.array([float(k) for k in case["uniform"]])
    curve = np.maximum.accumulate([t + comm for t in case["uniform"].values()])
    return float(np.interp(kv, ks, curve))


@contextlib.contextmanager
def attention_set(table, key: str, value):
    """The table's attention metadata ``key`` set to ``value`` inside the block, then restored
    (removed again where the table had none)."""
    saved = table.attention.get(key)
    table.attention[key] = value
    try:
        yield
    finally:
        table.attention.pop(key)
        if saved is not None:
            table.attention[key] = saved


def tail_exponent_3d(table, gamma: float):
    """The table's 3D split-KV tail exponent set to ``gamma`` inside the block, then restored."""
    saved = table.attention.get("tail_exponent")
    return attention_set(table, "tail_exponent", {**(saved or {}), "3d": float(gamma)})


def cases_3d(cases: list[dict], table) -> list[dict]:
    """The cases whose launch runs AITER's 3D split-KV kernel under the table's attention."""
    att = attention_params(table.attention, table_model(table))
    return [c for c in cases if c["kind"] in ("verify", "draft") and attention_kernel(
        float(c["bs"]), float(c["bs"] * (c["width"] if c["kind"] == "verify" else 1)),
        c["kind"] == "draft", att) == KERNEL_3D]


def fit_tail(cases: list[dict], table) -> list[tuple[float, float]]:
    """(exponent, the rule's MAPE on the measured curve) over the cases whose launch runs the 3D
    split-KV kernel, for exponents 0, 0.05, ..., 1 (the profile's ``tail_exponent`` set to
    each in turn, then restored)."""
    cases3d = cases_3d(cases, table)
    if not cases3d:
        raise ValueError("no case runs the 3D split-KV kernel")
    out = []
    for g in np.round(np.arange(0.0, 1.0001, 0.05), 2):
        with tail_exponent_3d(table, g):
            errs = [r["rule_err_measured_curve"] for r in compare(cases3d, table)]
        out.append((float(g), float(np.abs(errs).mean())))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", help="bench_aiter_straggler.py --json output")
    ap.add_argument("--model", required=True)
    ap.add_argument("--tp", type=int, default=None)
    ap.add_argument("--profile", default=None, help="profile parquet (default: the shipped one)")
    ap.add_argument("--eager", action="store_true",
                    help="the cases were eager launches (a JSON that does not say so itself)")
    ap.add_argument("--bs-interp", choices=("auto", "waves", "line"), default="auto",
                    help="batch sizes between the profile's grid points, as backend.bs_interp")
    ap.add_argument("--fit-tail", action="store_true",
                    help="fit the 3D split-KV kernel's tail exponent to the cases that run it")
    args = ap.parse_args()
    try:
        d = json.loads(Path(args.json).read_text())
        cases = d["cases"]
    except (OSError, ValueError, KeyError) as e:
        print(f"error: {args.json}: not a straggler benchmark's JSON ({e})", file=sys.stderr)
        sys.exit(2)
    model = load_model(args.model, tp=args.tp)
    path = args.profile or default_profile(model.name, "H200")
    table = ProfileExecutor(path, model=model).latency_table()
    table.set_bs_interp(args.bs_interp)
    if any("comm_s" not in c for c in cases):
        print("warning: no comm_s recorded: measured times lack the modelled all-reduce "
              "(exact only at tp 1)", file=sys.stderr)
    for c in cases:
        c.setdefault("graph", not args.eager)
    if args.fit_tail:
        if not table.attention:
            print(f"error: {path}: the profile has no attention metadata", file=sys.stderr)
            sys.exit(2)
        try:
            fits = fit_tail(cases, table)
        except ValueError as e:
            print(f"error: {args.json}: {e}", file=sys.stderr)
            sys.exit(2)
        for g, m in fits:
            print(f"3d tail exponent {g:.2f}: the rule's MAPE on the measured curve {100 * m:.2f}%")
        best = min(fits, key=lambda f: f[1])
        print(f"least: {best[0]:.2f} ({100 * best[1]:.2f}%)")
        return
    rows = compare(cases, table)
    print(f"{args.json} against {path}")
    print(f"{'case':<28} {'uniform: KV profile-vs-measured':<52} {'mixed ms':>9} "
          f"{'predicted':>9} {'error':>7} {'rule on measured curve':>22}")
    for r in rows:
        uni = " ".join(f"{k}:{100 * e:+.1f}%" for k, _, _, e in r["uniform"])
        print(f"{r['spec']:<28} {uni:<52} {1e3 * r['mixed_s']:9.3f} "
              f"{1e3 * r['predicted_s']:9.3f} {100 * r['mixed_err']:+6.1f}% "
              f"{100 * r['rule_err_measured_curve']:+21.1f}%")
    ue = np.array([e for r in rows for *_, e in r["uniform"]])
    me = np.array([r["mixed_err"] for r in rows])
    re_ = np.array([r["rule_err_measured_curve"] for r in rows])
    print(f"MAPE over {len(rows)} cases: uniform points {100 * np.abs(ue).mean():.2f}% "
          f"({len(ue)} points), mixed batches predicted {100 * np.abs(me).mean():.2f}%, "
          f"the rule on the measured curve {100 * np.abs(re_).mean():.2f}%")


if __name__ == "__main__":
    main()
