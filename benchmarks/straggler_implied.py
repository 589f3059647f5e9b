"""The straggler's share of a live run's batches, implied by their measured times (CPU).

For every verify step of a recorded live run whose batch has a straggler (as the fidelity
report counts one: ``kv_max`` at least 1.5 x the mean and 1,024 tokens), the script finds the KV ``K`` at which the shipped profile's
uniform batch of the same shape (batch size, width, graph or eager) takes the measured time, and
reports the straggler's implied share ``(K - mean) / (kv_max - mean)`` beside the share the
engine's rule uses (``backends.attention_kv``: the lookup KV, ``lookup_points``), per batch size.
A share of 0 means the straggler costs nothing beyond the mean, 1 that the batch runs as a
uniform batch at ``kv_max``. The run records only each batch's mean and longest KV, so the rule
is fed what the fidelity report feeds it.

It reads a live run and the profile's uniform curve, so a share off the rule's can come from
either: the uniform curve between grid points, or the rule. Measure a band with
``bench_aiter_straggler.py`` (uniform and mixed batches on one GPU) to tell them apart.

    python benchmarks/straggler_implied.py benchmarks/results/h200-2026-12-02e/live_long70b_pad \\
        --model llama-3.1-70b --tp 8 --eager --width 6 --bs 9-32
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.fidelity.lookup import lookup_points, predict  # noqa: E402
from analysis.fidelity.stats import STRAGGLER_MIN_KV, STRAGGLER_RATIO  # noqa: E402
from backends.models import load_model  # noqa: E402
from backends.profile import ProfileExecutor  # noqa: E402
from backends.shipped import default_profile  # noqa: E402


def implied_kv(table, bs: float, width: float, graph: bool, measured: float, hi: float) -> float:
    """The KV at which the uniform batch takes ``measured`` (bisection on the profile's
    monotone curve); NaN when the time lies outside the curve between 1 token and ``hi``."""
    f = lambda k: table.verify_s(bs, width, k, graph)[0]  # noqa: E731
    lo = 1.0
    if not f(lo) <= measured <= f(hi):
        return float("nan")
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) < measured else (lo, mid)
    return (lo + hi) / 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", help="a live run's results folder (steps.parquet)")
    ap.add_argument("--model", required=True)
    ap.add_argument("--tp", type=int, default=None)
    ap.add_argument("--profile", default=None, help="profile parquet (default: the shipped one)")
    ap.add_argument("--eager", action="store_true", help="eager launches (default: graphs)")
    ap.add_argument("--width", type=int, default=None, help="only this width")
    ap.add_argument("--bs", default="1-4096", metavar="LO-HI", help="batch sizes (real)")
    args = ap.parse_args()

    model = load_model(args.model, tp=args.tp)
    path = args.profile or default_profile(model.name, "H200")
    table = ProfileExecutor(path, model=model).latency_table()
    steps = pq.read_table(Path(args.run) / "steps.parquet")
    p = lookup_points(steps, table)
    s = steps.to_pandas()
    lo, hi = (int(x) for x in args.bs.split("-"))
    sel = ((s.kind == "verify") & (s.graph == (not args.eager)) & (s.bs >= lo) & (s.bs <= hi)
           & (s.kv_max >= STRAGGLER_RATIO * s.kv_mean) & (s.kv_max >= STRAGGLER_MIN_KV))
    if args.width is not None:
        sel &= p["width"] == args.width
    idx = np.flatnonzero(sel.to_numpy())
    if len(idx) == 0:
        print("error: no verify step of that selection has a straggler", file=sys.stderr)
        sys.exit(2)
    pred, _ = predict({k: v[idx] for k, v in p.items()}, table)  # the selected steps only
    rows = []
    for j, i in enumerate(idx):
        mean, mx, m = float(s.kv_mean[i]), float(s.kv_max[i]), float(s.latency_s[i])
        k = implied_kv(table, p["bs"][i], p["width"][i], bool(p["graph"][i]), m, 2.0 * mx)
        at_mean = table.verify_s(p["bs"][i], p["width"][i], mean, bool(p["graph"][i]))[0]
        rows.append((s.bs[i], (p["kv"][i] - mean) / (mx - mean), (k - mean) / (mx - mean),
                     pred[j] / m - 1, at_mean / m - 1))
    r = np.array(rows, dtype=float)
    ok = ~np.isnan(r[:, 2])
    print(f"{args.run}: {len(r)} verify steps with a straggler "
          f"({'eager' if args.eager else 'graph'}, bs {lo}-{hi}"
          f"{'' if args.width is None else f', width {args.width}'}; {int((~ok).sum())} outside "
          "the uniform curve)")
    print(f"error (MAPE / mean signed): the rule {100 * np.abs(r[:, 3]).mean():.2f}% / "
          f"{100 * r[:, 3].mean():+.2f}%, the mean KV {100 * np.abs(r[:, 4]).mean():.2f}% / "
          f"{100 * r[:, 4].mean():+.2f}%")
    print(" bs  steps  rule's share  implied share (median)  error: rule  mean KV")
    for b in sorted(set(r[:, 0])):
        q = r[(r[:, 0] == b) & ok]
        if len(q):
            print(f"{int(b):3d}  {len(q):5d}  {np.median(q[:, 1]):12.2f}  {np.median(q[:, 2]):22.2f}"
                  f"  {100 * q[:, 3].mean():+10.1f}%  {100 * q[:, 4].mean():+6.1f}%")


if __name__ == "__main__":
    main()
