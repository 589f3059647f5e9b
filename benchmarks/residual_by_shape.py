"""Is a live run's per-step error the profile's or the run's?  Residuals by time and by shape.

For every step of a recorded live run (``steps.parquet``) the residual is ``log(live /
predicted)`` in percent, predicted by ``--profile`` at the step's own lookup point
(``analysis.fidelity.lookup.predict_steps``, as ``specsched fidelity`` does). Prints, per pass
kind, the median residual in five equal-count slices of the run's time, and per cell (kind,
padded batch size, mean-KV band: under 8k, 8k-16k, 16k and over; at least 15 steps) the
median. Given a second run of the same trace (another GPU, another day), it prints both runs'
cells side by side and their agreement: if the cells of two runs on two machines agree far
better than the cells spread, the error belongs to the profile's rows or lookup at those
shapes, not to either machine or to noise (docs/aiter_mla.md, *Long context*).

    python benchmarks/residual_by_shape.py --profile backends/profiles/deepseek-v2-lite__H200.parquet \\
        benchmarks/results/h200-2026-12-03b/live_longv2lite benchmarks/results/h200-2026-12-03/live_longv2lite

CPU only; a few seconds a run.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.fidelity.lookup import col, predict_steps  # noqa: E402
from backends.profile import load_profile  # noqa: E402

KINDS = ("verify", "draft", "draft_extend", "prefill")
BANDS = ((0, 8192), (8192, 16384), (16384, np.inf))
MIN_STEPS = 15


def residuals(run: Path, table) -> dict[str, np.ndarray]:
    """The run's steps as columns, with ``resid`` (%) against ``table``."""
    steps = pq.read_table(run / "steps.parquet")
    pred, _ = predict_steps(steps, table)
    out = {c: col(steps, c) for c in ("kind", "start_s", "bs_padded", "kv_mean")}
    out["resid"] = np.log(col(steps, "latency_s") / pred) * 100
    return out


def cells(s: dict[str, np.ndarray]) -> dict[tuple, tuple[float, int]]:
    """(kind, padded bs, KV band start) -> (median residual, steps), decode kinds only."""
    out = {}
    ok = np.isfinite(s["resid"])
    for k in KINDS[:3]:
        for b in np.unique(s["bs_padded"][s["kind"] == k]):
            for lo, hi in BANDS:
                m = ok & (s["kind"] == k) & (s["bs_padded"] == b) & (s["kv_mean"] >= lo) & (s["kv_mean"] < hi)
                if m.sum() >= MIN_STEPS:
                    out[(k, int(b), int(lo))] = (float(np.median(s["resid"][m])), int(m.sum()))
    return out


def by_time(s: dict[str, np.ndarray]) -> None:
    print("| kind | steps | median residual by fifth of the run's time (%) |")
    print("|---|---|---|")
    ok = np.isfinite(s["resid"])
    for k in KINDS:
        m = ok & (s["kind"] == k)
        if not m.any():
            continue
        edges = np.quantile(s["start_s"][m], np.linspace(0, 1, 6))
        med = [np.median(s["resid"][m & (s["start_s"] >= a) & (s["start_s"] <= b)])
               for a, b in zip(edges[:-1], edges[1:])]
        print(f"| {k} | {int(m.sum())} | " + " / ".join(f"{x:+.2f}" for x in med) + " |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="results folders of live runs (1 or 2)")
    ap.add_argument("--profile", required=True, type=Path)
    a = ap.parse_args(argv)
    if len(a.runs) > 2:
        ap.error("give one run, or two of the same trace")
    table = load_profile(a.profile)
    data = [residuals(r, table) for r in a.runs]
    for r, s in zip(a.runs, data):
        print(f"\n{r} against {a.profile.name}")
        by_time(s)
    cs = [cells(s) for s in data]
    keys = sorted(set(cs[0]).intersection(*cs[1:]))
    print("\n| kind | padded bs | mean KV from | " + " | ".join(f"run {i + 1} (steps)" for i in range(len(cs))) + " |")
    print("|---|---|---|" + "---|" * len(cs))
    for key in keys:
        print(f"| {key[0]} | {key[1]} | {key[2]} | " + " | ".join(f"{c[key][0]:+.2f} ({c[key][1]})" for c in cs) + " |")
    if len(cs) == 2 and len(keys) > 2:
        x = np.array([cs[0][k][0] for k in keys])
        y = np.array([cs[1][k][0] for k in keys])
        print(f"\n{len(keys)} cells in both runs: correlation {np.corrcoef(x, y)[0, 1]:.3f}, median "
              f"|difference| {np.median(np.abs(x - y)):.2f} points; the cells of run 1 spread "
              f"{x.min():+.2f} to {x.max():+.2f}% (interquartile {np.percentile(x, 75) - np.percentile(x, 25):.2f} points)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
