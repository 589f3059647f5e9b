"""Whether a dense model's prefill time follows the exact token count, across machines (CPU).

A sweep of prefills at many token counts (``specsched profile --prefill-tokens``, e.g. the
``prefill-dense:MODEL`` job of ``benchmarks/gpu_live_session.sh``) and the model's live runs,
recorded on other GPUs and days, are set side by side three ways:

1. **Exact counts.** At every token count that both the sweep (prefix 0) and the live runs'
   single-request prefix-0 prefills hold (at least ``--min-live`` of them), the live median over
   the sweep's time (log %), and its mean absolute deviation from their median (the machines'
   common offset taken out).
2. **Profiles against the live prefills.** For each profile given with ``--profile`` (the first
   is the reference, e.g. the shipped one), the mean |log residual| of every live prefill of the
   model (all batch sizes and prefixes) against it, pooled over the runs, raw and with each
   run's median residual taken out.
3. **An exact-count line, emulated** (``--line``): every live prefill whose token count the
   sweep holds at prefix 0 predicted as the first profile's lookup plus (the sweep's time at
   that count, scaled to the profile's level, minus the profile's own prefix-0 value there):
   the GEMMs' cost by exact count added at any prefix, the profile's grid giving the rest.
   Scored as in 2, with how many prefills the line reached. A sweep at every count (the
   ``prefill-line:MODEL`` job) reaches them all.
4. **A median over counts, emulated** (``--spread N``): the first profile with each prefill grid
   row replaced by the median, over N token counts spaced evenly within a quarter of the gap to
   its nearer grid neighbour, of the sweep's times (scaled per prefix line to the profile's level
   at the grid's own tokens), where the sweep holds every such count; scored as in 2.

    python benchmarks/prefill_exact_counts.py \\
        benchmarks/results/h200-2026-12-05/prefill_dense_llama-3.1-8b.parquet \\
        --model llama-3.1-8b --profile backends/profiles/llama-3.1-8b__H200.parquet \\
        --profile benchmarks/results/h200-2026-12-05/llama-3.1-8b__H200.parquet --spread 3 --line

About 20 s on two CPUs for the 8B's 24 live runs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.fidelity.lookup import col, predict_steps  # noqa: E402
from backends.profile import grid_rows, load_profile, read_profile  # noqa: E402
from backends.profile_file import write_profile  # noqa: E402
from benchmarks.systematic_errors import live_runs  # noqa: E402
from traces.errors import SpecschedError  # noqa: E402


def sweep_times(path: str) -> dict[tuple[int, int], float]:
    """(prefix, tokens) -> the sweep's median seconds, over its prefill rows."""
    rows, _ = read_profile(path)
    return {(int(r["kv_len"]), int(r["tokens"])): float(r["latency_s"])
            for r in rows.to_pylist() if r["kind"] == "prefill"}


def exact_counts(runs: list[Path], sweep: dict, min_live: int) -> list[tuple[int, int, float]]:
    """(tokens, live prefills, log % live median / sweep) at each prefix-0 count both hold."""
    live = defaultdict(list)
    for run in runs:
        t = pq.read_table(run / "steps.parquet", columns=["kind", "bs", "kv_mean", "tokens",
                                                          "latency_s"]).to_pylist()
        for r in t:
            if r["kind"] == "prefill" and r["bs"] == 1 and r["kv_mean"] == 0:
                live[int(r["tokens"])].append(r["latency_s"])
    return [(k, len(live[k]), 100 * float(np.log(np.median(live[k]) / sweep[(0, k)])))
            for k in sorted(t for p, t in sweep if p == 0) if len(live.get(k, [])) >= min_live]


def spread_counts(tokens: int, grid: list[int], n: int) -> list[int]:
    """``n`` counts evenly within +- a quarter of the gap from ``tokens`` to its nearer grid
    neighbour (to 0 below the smallest; the lower gap alone above the largest)."""
    pts = sorted(set(grid) | {tokens})
    i = pts.index(tokens)
    gaps = [tokens - (pts[i - 1] if i else 0)] + ([pts[i + 1] - tokens] if i + 1 < len(pts) else [])
    w = min(gaps) // 4
    return sorted({int(c) for c in np.rint(np.linspace(tokens - w, tokens + w, n))})


def spread_profile(base: str, sweep: dict, n: int, out: Path) -> list[tuple]:
    """Write ``base`` with each prefill grid row the median of the sweep's times at its spread
    counts (the sweep scaled per prefix line by the median of base / sweep at the base's grid
    tokens) where the sweep holds them all; returns (prefix, tokens, counts, change %)."""
    table, meta = read_profile(base)
    rows = table.to_pylist()
    grid = sorted({int(r["tokens"]) for r in grid_rows(table).to_pylist() if r["kind"] == "prefill"})
    level = {}
    for p in {k[0] for k in sweep}:
        ratios = [r["latency_s"] / sweep[(p, r["tokens"])] for r in rows
                  if r["kind"] == "prefill" and r["kv_len"] == p and (p, r["tokens"]) in sweep]
        level[p] = float(np.median(ratios)) if ratios else None
    changed = []
    for r in rows:
        if r["kind"] != "prefill" or r.get("split", "grid") != "grid":
            continue
        p, t = int(r["kv_len"]), int(r["tokens"])
        cs = spread_counts(t, grid, n)
        if len(cs) < n or level.get(p) is None or any((p, c) not in sweep for c in cs):
            continue
        f = float(np.median([sweep[(p, c)] for c in cs])) * level[p] / r["latency_s"]
        for k in ("latency_s", "p10_s", "p90_s"):
            r[k] *= f
        changed.append((p, t, cs, 100 * (f - 1)))
    write_profile(rows, out, meta)
    return changed


def line_level(table, sweep: dict) -> float:
    """The median of the profile's prefix-0 value over the sweep's at the sweep's prefix-0
    counts that are grid tokens of the profile (the line put on the profile's machine)."""
    grid = {int(t) for t in table.prefill.axes[0]}
    ratios = [table.prefill_s(t, 0)[0] / v for (p, t), v in sweep.items() if p == 0 and t in grid]
    if not ratios:
        raise SpecschedError("the sweep shares no prefix-0 token count with the profile's grid")
    return float(np.median(ratios))


def score(runs: list[Path], profile: str, line: dict | None = None) -> dict[str, float]:
    """Mean |log residual| (%) of every live prefill against ``profile`` (``raw``) and with
    each run's median taken out (``offset_out``), pooled over ``runs``; with ``line`` (the
    sweep: (prefix, tokens) -> s), also how many prefills it corrected (``reached``) and their
    mean |log residual| ``before`` and ``after``."""
    table = load_profile(profile)
    level = line_level(table, line) if line else 1.0
    raw, off, before, after = [], [], [], []
    for run in runs:
        steps = pq.read_table(run / "steps.parquet")
        pred, _ = predict_steps(steps, table)
        live = col(steps, "latency_s")
        with np.errstate(divide="ignore", invalid="ignore"):
            m = (col(steps, "kind") == "prefill") & np.isfinite(np.log(live / pred))
        live, pred = live[m], pred[m]
        if line:
            tok = col(steps, "tokens")[m].astype(int)
            hit = np.array([(0, int(t)) in line for t in tok], bool)
            before.extend(np.abs(100 * np.log(live[hit] / pred[hit])).tolist())
            for i in np.nonzero(hit)[0]:
                pred[i] += level * line[(0, int(tok[i]))] - table.prefill_s(int(tok[i]), 0)[0]
            after.extend(np.abs(100 * np.log(live[hit] / pred[hit])).tolist())
        r = 100 * np.log(live / pred)
        if len(r):
            raw.append(np.abs(r))
            off.append(np.abs(r - np.median(r)))
    out = {"raw": float(np.mean(np.concatenate(raw))),
           "offset_out": float(np.mean(np.concatenate(off))), "reached": len(before)}
    if before:
        out.update(before=float(np.mean(before)), after=float(np.mean(after)))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweep", help="a profile holding the prefill sweep")
    ap.add_argument("--model", required=True)
    ap.add_argument("--profile", action="append", default=[], help="a profile to score "
                    "(repeatable; the first is the reference and the base of --spread)")
    ap.add_argument("--spread", type=int, default=0, help="emulate a median over N counts")
    ap.add_argument("--line", action="store_true", help="emulate an exact-count prefix-0 line")
    ap.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--min-live", type=int, default=3, help="live prefills an exact count needs")
    a = ap.parse_args(argv)
    try:
        runs = live_runs(a.results, a.model)
        if not runs:
            raise SpecschedError(f"no live run of {a.model} under {a.results}")
        sweep = sweep_times(a.sweep)
        ex = exact_counts(runs, sweep, a.min_live)
        print(f"{len(runs)} live runs of {a.model}; exact prefix-0 counts both hold "
              f"(>= {a.min_live} live prefills):")
        for t, n, d in ex:
            print(f"  {t:6d} tokens, {n:4d} live: live / sweep {d:+.2f}%")
        if ex:
            v = np.array([d for _, _, d in ex])
            print(f"  median {np.median(v):+.2f}%, mean |deviation from it| "
                  f"{np.mean(np.abs(v - np.median(v))):.2f}% over {len(v)} counts")
        for p in a.profile:
            sc = score(runs, p)
            print(f"{p}: every live prefill, mean |residual| {sc['raw']:.2f}% "
                  f"({sc['offset_out']:.2f}% with each run's offset out)")
        if a.line and a.profile:
            sc = score(runs, a.profile[0], sweep)
            n = sc["reached"]
            print(f"{a.profile[0]} with the sweep's prefix-0 times as an exact-count line "
                  f"({n} live prefills at a count it holds): mean |residual| {sc['raw']:.2f}% "
                  f"({sc['offset_out']:.2f}% with each run's offset out)"
                  + (f"; over those {n}: {sc['before']:.2f}% -> {sc['after']:.2f}%" if n else ""))
        if a.spread and a.profile:
            with tempfile.TemporaryDirectory() as d:
                out = Path(d) / "spread.parquet"
                changed = spread_profile(a.profile[0], sweep, a.spread, out)
                for p, t, cs, f in changed:
                    print(f"  spread row prefix {p} tokens {t}: counts {cs} -> {f:+.2f}%")
                sc = score(runs, str(out))
                print(f"{a.profile[0]} with a median over {a.spread} counts at {len(changed)} "
                      f"rows: mean |residual| {sc['raw']:.2f}% ({sc['offset_out']:.2f}% with each "
                      f"run's offset out)")
    except SpecschedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
