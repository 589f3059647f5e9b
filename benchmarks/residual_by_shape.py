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

With ``--by-capture`` it also cuts each run where it first used each graph (where a live run
that captures lazily captured it) and prints the median residual of small batches' graph
replays between those points: the graph captured last sets how fast every graph replays
(docs/aiter.md, Timing), and this finds it in a run already recorded.

    python benchmarks/residual_by_shape.py --profile backends/profiles/deepseek-v2-lite__H200.parquet \\
        benchmarks/results/h200-2026-12-03b/live_longv2lite benchmarks/results/h200-2026-12-03/live_longv2lite

CPU only; a few seconds a run.
"""

from __future__ import annotations

import argparse
import json
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
SMALL_BS = 8


def residuals(run: Path, table) -> dict[str, np.ndarray]:
    """The run's steps as columns, with ``resid`` (%) against ``table``."""
    steps = pq.read_table(run / "steps.parquet")
    pred, _ = predict_steps(steps, table)
    out = {c: col(steps, c) for c in ("kind", "start_s", "bs", "bs_padded", "kv_mean", "graph",
                                       "width", "tokens")}
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


def capture_intervals(s: dict[str, np.ndarray], resets: tuple[int, ...] = (),
                      small_bs: int = SMALL_BS, min_steps: int = MIN_STEPS) -> list[dict]:
    """The run cut where a lazily capturing live run captured graphs: at each graph key's first
    use (verify and draft-extend by padded batch size and width, draft by padded batch size),
    counted afresh from each step index in ``resets`` (a sitting's first call: a new process).
    Each interval holds the steps from one capture to the next; intervals with fewer than
    ``min_steps`` graph replays at ``small_bs`` requests or fewer are merged into the next, so
    each row names the captures since the last row (``captured``, in order) and the median
    residual of each decode kind's graph replays at small batches (``median``: kind ->
    (median, steps)); eager launches and prefills are left out."""
    n = len(s["kind"])
    seen: set = set()
    rows: list[dict] = []
    pending: list[str] = []
    start = 0

    def close(end: int) -> None:
        nonlocal pending, start
        m = np.zeros(n, bool)
        m[start:end] = True
        m &= s["graph"] & (s["bs_padded"] <= small_bs) & np.isfinite(s["resid"])
        med = {k: (float(np.median(s["resid"][m & (s["kind"] == k)])), int((m & (s["kind"] == k)).sum()))
               for k in KINDS[:3] if (m & (s["kind"] == k)).sum() >= min_steps}
        if med:
            rows.append({"from_step": start, "t": float(s["start_s"][start]),
                         "captured": pending, "median": med})
            pending = []
        start = end

    for i in range(n):
        if i in resets:
            close(i)
            seen = set()
            pending = pending + ["(new process)"]
        k = str(s["kind"][i])
        if k == "prefill" or not s["graph"][i]:
            continue
        key = (k, int(s["bs_padded"][i])) if k == "draft" else (k, int(s["bs_padded"][i]),
                                                                  int(s["width"][i]))
        if key not in seen:
            seen.add(key)
            close(i)
            pending = pending + [" ".join(str(x) for x in key)]
    close(n)
    return rows


def by_capture(s: dict[str, np.ndarray], resets: tuple[int, ...] = ()) -> None:
    print("| from step | at (s) | graphs first used since the row above | " +
          " | ".join(f"{k} at bs <= {SMALL_BS} (steps)" for k in KINDS[:3]) + " |")
    print("|---|---|---|---|---|---|")
    for r in capture_intervals(s, resets):
        caps = r["captured"]
        shown = ", ".join(caps if len(caps) <= 6 else caps[:3] + ["..."] + caps[-3:])
        cells_ = [f"{r['median'][k][0]:+.2f} ({r['median'][k][1]})" if k in r["median"] else "-"
                  for k in KINDS[:3]]
        print(f"| {r['from_step']} | {r['t']:.1f} | {shown} | " + " | ".join(cells_) + " |")


def sitting_starts(run: Path, steps: int) -> tuple[int, ...]:
    """The first call of each sitting after the first (summary.json's journal segments), as
    step indices: one step per executor call, so only when the calls add up to the steps."""
    try:
        j = json.loads((run / "summary.json").read_text())["backend_detail"]["journal"]
    except (OSError, KeyError, TypeError, ValueError):
        return ()
    if j.get("replayed_calls", 0) + j.get("live_calls", 0) != steps:
        return ()
    return tuple(int(x["first_call"]) for x in j.get("segments", [])[1:])


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
    ap.add_argument("--by-capture", action="store_true",
                    help="also cut each run where it first used each graph (a lazy capture)")
    a = ap.parse_args(argv)
    if len(a.runs) > 2:
        ap.error("give one run, or two of the same trace")
    table = load_profile(a.profile)
    data = [residuals(r, table) for r in a.runs]
    for r, s in zip(a.runs, data):
        print(f"\n{r} against {a.profile.name}")
        by_time(s)
        if a.by_capture:
            print()
            by_capture(s, sitting_starts(r, len(s["kind"])))
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
