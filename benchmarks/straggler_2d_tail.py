"""A lone-straggler model for AITER's 2D verify kernel, scored on recorded straggler runs (CPU).

``benchmarks/bench_aiter_straggler.py`` times a verify graph with stragglers against uniform
batches of the same launch. On the 2D kernel the committed lookup rule
(``backends.attention_kv.effective_kv``) errs by 16% there, and no single tail exponent fits.
This script scores another form on the same measurements. The attention of the batch's longest
requests costs about ``a x kv_max`` of wall time whatever else runs: their programs are
dispatched first and run at a per-tile rate that does not depend on the others. So

    T_mixed = max(T_u(mean KV), T_0 + a x kv_max)

where ``T_u`` is the uniform batch's measured latency curve (linear in KV) and ``T_0`` its value
at KV 0. ``a`` (seconds per KV token over all layers) is one constant per kernel and model, fitted
as the median over the cases of ``(T_mixed - T_0) / kv_max``. The constant is fitted on one run's
cases and scored on another run's, recorded on another machine and day, and by leaving one case
out at a time. Each case is scored with the engine's own lookup
(``backends.attention_kv.lone_straggler_kv``, :func:`predict`), and the script also scores every
case of each file with the engine's whole rule (this form on 2D verify cases, the waves and tail
rule elsewhere).

    python benchmarks/straggler_2d_tail.py
    python benchmarks/straggler_2d_tail.py --fit FIT.json --score A.json,B.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_aiter_straggler as bench  # noqa: E402  (its case layout and the committed rule)
from backends.attention_kv import (KERNEL_2D, LONE_STRAGGLER_2D_S, attention_kernel,
                                   attention_params, lone_straggler_kv)
from backends.interp import interp3
from backends.latency_table import Grid

RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_FIT = RESULTS / "h200-2026-12-02b" / "straggler2d.json"
DEFAULT_SCORE = (RESULTS / "h200-2026-11-29d" / "straggler.json",
                 RESULTS / "h200-2026-11-29d" / "straggler_holdout.json")


def kernel(case: dict, occ: dict) -> str:
    """Which unified-attention kernel AITER launches for a case's verify graph, by the engine's
    rule (``backends.attention_kv.attention_kernel``): ``2d`` or ``3d`` (``draft`` for draft
    cases, which this model does not cover)."""
    if case["kind"] != "verify":
        return "draft"
    rows = float(case["bs"] * case["width"])
    k = attention_kernel(float(case["bs"]), rows, False, attention_params(occ))
    return "2d" if k == KERNEL_2D else "3d"


def uniform_line(case: dict) -> tuple[float, float]:
    """(T_0, slope) of the case's measured uniform curve, by least squares over its points."""
    k = np.array([float(x) for x in case["uniform"]])
    t = np.array(list(case["uniform"].values()), dtype=np.float64)
    slope, t0 = np.polyfit(k, t, 1)
    return float(t0), float(slope)


def uniform_grid(case: dict) -> Grid:
    """The case's uniform curve as the one-line (batch, width, KV) grid the engine's lookup reads.

    A case has 3-5 uniform points, the first two often within 100 tokens of each other, so the
    curve is its least-squares line (:func:`uniform_line`), sampled at KV 0 and at the measured
    KVs. (A profile's KV lines are medians at 128, 512, 2,048, ... tokens; the engine reads them
    as they are.)"""
    t0, slope = uniform_line(case)
    ks = np.array([0.0] + sorted(float(k) for k in case["uniform"]))
    return Grid.build((np.array([float(case["bs"])]), np.array([float(case["width"])]), ks),
                      (t0 + slope * ks)[None, None, :])


def mean_kv(case: dict) -> float:
    """The mean KV over the launch's rows (padded rows count as empty), as a mean lookup sees it."""
    return float(bench.case_kv(case).sum()) / case["bs"]


def lone_a(case: dict) -> float:
    """The case's own ``a``: its mixed latency above ``T_0``, per token of its longest request."""
    t0, _ = uniform_line(case)
    return (case["mixed_s"] - t0) / case["long"]


def predict(case: dict, a: float) -> float:
    """The case's latency by the engine's lookup (``backends.attention_kv.lone_straggler_kv``
    on :func:`uniform_grid`, read off the same grid), with ``a`` seconds per KV token."""
    g = uniform_grid(case)
    bs, width = float(case["bs"]), float(case["width"])
    kv = lone_straggler_kv(*g.axes, g.values, bs, width, mean_kv(case), float(case["long"]), a)
    return float(interp3(*g.axes, g.values, bs, width, kv)[0])


def fit_a(cases: list[dict]) -> float:
    """``a`` for a set of cases: the median of their own (:func:`lone_a`)."""
    return float(np.median([lone_a(c) for c in cases]))


def scored_cases(path: Path) -> list[dict]:
    """A recorded run's cases, each with its kernel (:func:`kernel`) and the waves and tail
    rule's latency error re-scored on a CPU (``waves_err_pct``, as
    ``bench_aiter_straggler.py --score``, which scores ``effective_kv``)."""
    import contextlib
    import io

    d = json.loads(Path(path).read_text())
    occ = d["summary"]["occupancy"]
    with contextlib.redirect_stdout(io.StringIO()):
        rows, _, _ = bench.rescore(str(path))
    return [{**c, "kernel": kernel(c, occ), "waves_err_pct": r["rule_err_pct"]}
            for c, r in zip(d["cases"], rows)]


def two_d_cases(path: Path) -> list[dict]:
    """A recorded run's verify cases on the 2D kernel (:func:`scored_cases`)."""
    return [c for c in scored_cases(path) if c["kernel"] == "2d"]


def engine_errors(cases: list[dict], a: float) -> np.ndarray:
    """The engine's lookup on every case: the lone-straggler form on the 2D verify kernel, the
    waves and tail rule elsewhere."""
    return np.array([errors([c], a)[0] if c["kernel"] == "2d" else c["waves_err_pct"]
                     for c in cases])


def errors(cases: list[dict], a: float) -> np.ndarray:
    return np.array([(predict(c, a) / c["mixed_s"] - 1) * 100 for c in cases])


def waves_rule(cases: list[dict]) -> np.ndarray:
    """The waves and tail rule's latency errors (:func:`scored_cases`)."""
    return np.array([c["waves_err_pct"] for c in cases])


def line(name: str, e: np.ndarray) -> str:
    return (f"{name:<56} {len(e):3d} cases  MAPE {np.mean(np.abs(e)):6.2f}%  worst "
            f"{e[np.argmax(np.abs(e))]:+6.1f}%  within 3%: {int(np.sum(np.abs(e) <= 3))}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", default=str(DEFAULT_FIT), help="straggler JSON whose 2D cases fit a")
    ap.add_argument("--score", default=",".join(str(p) for p in DEFAULT_SCORE),
                    help="straggler JSONs whose 2D cases are scored with that a (comma-separated)")
    args = ap.parse_args()

    fit = two_d_cases(Path(args.fit))
    if not fit:
        sys.exit(f"error: {args.fit}: no verify case on the 2D kernel to fit a from")
    per_case = np.array([lone_a(c) for c in fit])
    a = fit_a(fit)
    print(f"a = {a * 1e6:.3f} us per KV token over all layers (median of {len(fit)} cases; "
          f"range {per_case.min() * 1e6:.3f}-{per_case.max() * 1e6:.3f}); the engine's "
          f"LONE_STRAGGLER_2D_S x 32 layers: {LONE_STRAGGLER_2D_S * 32 * 1e6:.3f} us")
    print(line(f"fit: {Path(args.fit).parent.name}/{Path(args.fit).name}, waves rule",
               waves_rule(fit)))
    print(line("fit: lone-straggler model (in sample)", errors(fit, a)))
    loo = np.array([errors([c], fit_a(fit[:i] + fit[i + 1:]))[0] for i, c in enumerate(fit)])
    print(line("fit: lone-straggler model, leave one out", loo))
    held = [c for p in args.score.split(",") if p for c in two_d_cases(Path(p))]
    if held:
        print(line("other runs' 2D cases, waves rule", waves_rule(held)))
        print(line("other runs' 2D cases, lone-straggler model", errors(held, a)))
    a_engine = LONE_STRAGGLER_2D_S * 32
    for p in [args.fit] + [p for p in args.score.split(",") if p]:
        cases = scored_cases(Path(p))
        name = f"{Path(p).parent.name}/{Path(p).name}"
        print(line(f"all of {name}, waves rule", waves_rule(cases)))
        print(line(f"all of {name}, engine", engine_errors(cases, a_engine)))
    print()
    for c in fit + held:
        print(f"  {c['spec']:<28} a {lone_a(c) * 1e6:7.3f} us/token   waves rule "
              f"{c['waves_err_pct']:+6.1f}%   model {errors([c], a)[0]:+6.1f}%")


if __name__ == "__main__":
    main()
