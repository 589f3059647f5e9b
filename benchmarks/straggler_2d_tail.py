"""A lone-straggler model for AITER's 2D verify kernel, scored on recorded straggler runs (CPU).

``benchmarks/bench_aiter_straggler.py`` times a verify graph with stragglers against uniform
batches of the same launch. On the 2D kernel the committed lookup rule
(``backends.latency_table.effective_kv``) errs by 16% there, and no single tail exponent fits.
This script scores another form on the same measurements. The attention of the batch's longest
requests costs about ``a x kv_max`` of wall time whatever else runs: their programs are
dispatched first and run at a per-tile rate that does not depend on the others. So

    T_mixed = max(T_u(mean KV), T_0 + a x kv_max)

where ``T_u`` is the uniform batch's measured latency curve (linear in KV) and ``T_0`` its value
at KV 0. ``a`` (seconds per KV token over all layers) is one constant per kernel and model, fitted
as the median over the cases of ``(T_mixed - T_0) / kv_max``. The constant is fitted on one run's
cases and scored on another run's, recorded on another machine and day, and by leaving one case
out at a time.

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
RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_FIT = RESULTS / "h200-2026-12-02b" / "straggler2d.json"
DEFAULT_SCORE = (RESULTS / "h200-2026-11-29d" / "straggler.json",
                 RESULTS / "h200-2026-11-29d" / "straggler_holdout.json")


def kernel(case: dict, occ: dict) -> str:
    """Which unified-attention kernel AITER launches for a case's verify graph: ``2d`` when
    the grid of (query blocks + sequences) x KV heads exceeds 4 programs per SM, else ``3d``
    (``draft`` for draft cases, which this model does not cover)."""
    if case["kind"] != "verify":
        return "draft"
    rows = case["bs"] * case["width"]
    programs = (rows // occ["block_q"] + case["bs"]) * occ["kv_heads"]
    return "2d" if programs > occ["target_programs"] else "3d"


def uniform_line(case: dict) -> tuple[float, float]:
    """(T_0, slope) of the case's measured uniform curve, by least squares over its points."""
    k = np.array([float(x) for x in case["uniform"]])
    t = np.array(list(case["uniform"].values()), dtype=np.float64)
    slope, t0 = np.polyfit(k, t, 1)
    return float(t0), float(slope)


def mean_kv(case: dict) -> float:
    """The mean KV over the launch's rows (padded rows count as empty), as a mean lookup sees it."""
    return float(bench.case_kv(case).sum()) / case["bs"]


def lone_a(case: dict) -> float:
    """The case's own ``a``: its mixed latency above ``T_0``, per token of its longest request."""
    t0, _ = uniform_line(case)
    return (case["mixed_s"] - t0) / case["long"]


def predict(case: dict, a: float) -> float:
    t0, slope = uniform_line(case)
    return max(t0 + slope * mean_kv(case), t0 + a * case["long"])


def fit_a(cases: list[dict]) -> float:
    """``a`` for a set of cases: the median of their own (:func:`lone_a`)."""
    return float(np.median([lone_a(c) for c in cases]))


def two_d_cases(path: Path) -> list[dict]:
    """A recorded run's verify cases on the 2D kernel, each with the committed rule's latency
    error re-scored on a CPU (``committed_err_pct``, as ``bench_aiter_straggler.py --score``)."""
    import contextlib
    import io

    d = json.loads(Path(path).read_text())
    occ = d["summary"]["occupancy"]
    with contextlib.redirect_stdout(io.StringIO()):
        rows, _, _ = bench.rescore(str(path))
    return [{**c, "committed_err_pct": r["rule_err_pct"]} for c, r in zip(d["cases"], rows)
            if kernel(c, occ) == "2d"]


def errors(cases: list[dict], a: float) -> np.ndarray:
    return np.array([(predict(c, a) / c["mixed_s"] - 1) * 100 for c in cases])


def committed(cases: list[dict]) -> np.ndarray:
    """The committed rule's latency errors (:func:`two_d_cases`)."""
    return np.array([c["committed_err_pct"] for c in cases])


def line(name: str, e: np.ndarray) -> str:
    return (f"{name:<44} {len(e):3d} cases  MAPE {np.mean(np.abs(e)):6.2f}%  worst "
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
          f"range {per_case.min() * 1e6:.3f}-{per_case.max() * 1e6:.3f})")
    print(line(f"fit: {Path(args.fit).parent.name}/{Path(args.fit).name}, committed rule",
               committed(fit)))
    print(line("fit: lone-straggler model (in sample)", errors(fit, a)))
    loo = np.array([errors([c], fit_a(fit[:i] + fit[i + 1:]))[0] for i, c in enumerate(fit)])
    print(line("fit: lone-straggler model, leave one out", loo))
    held = [c for p in args.score.split(",") if p for c in two_d_cases(Path(p))]
    if held:
        print(line("other runs' 2D cases, committed rule", committed(held)))
        print(line("other runs' 2D cases, lone-straggler model", errors(held, a)))
    print()
    for c in fit + held:
        print(f"  {c['spec']:<28} a {lone_a(c) * 1e6:7.3f} us/token   committed "
              f"{c['committed_err_pct']:+6.1f}%   model {errors([c], a)[0]:+6.1f}%")


if __name__ == "__main__":
    main()
