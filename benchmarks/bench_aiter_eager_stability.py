"""Eager prefill timing as a live run sees it, against the profile's back-to-back repetitions (GPU).

Eager passes launch every kernel from Python, so on this setup their latency is host-bound and
follows the state of the host.  A profile times one shape several times in a row; a live run
times each prefill once (after one untimed run), between hundreds of graph replays, in a process
whose heap holds the whole simulation.  This script times the same prefill shapes both ways:

* ``hot``: ``--reps`` timed runs in a row after one untimed run (what ``specsched profile`` does);
* ``live-like``: each shape timed once after one untimed run, between 20 replayed decode steps,
  with a large Python heap alive (``--heap`` objects), under each timing setting of the runner:
  queued (the GPU held while the host queues the pass: the GPU's time alone) or not (the host's
  launch rate counts), garbage collector paused or not, spin-wait or blocking wait.

It prints the median and p90 per shape and setting, relative to ``hot`` timed the same way.

    python benchmarks/bench_aiter_eager_stability.py --model llama-3.1-8b
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--tokens", default="100,300,700,1500")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=12, help="live-like timings per shape and setting")
    ap.add_argument("--heap", type=int, default=3_000_000, help="Python objects kept alive")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from backends.aiter import make_executor
    from backends.aiter.metadata import SPEC_CAPTURE_BS

    ex = make_executor(args.model, capture_bs=SPEC_CAPTURE_BS)
    runner = ex.runner
    toks = [int(t) for t in args.tokens.split(",")]
    rng = np.random.default_rng(0)
    zero = np.array([0])

    hot, hot_wall = {}, {}
    for t in toks:
        runner.hold_gpu = False
        ts = runner.prefill(np.array([t]), zero, reps=args.reps, warmup=1)
        hot_wall[t] = float(np.median([x.gpu_s for x in ts]))
        runner.hold_gpu = True
        ts = runner.prefill(np.array([t]), zero, reps=args.reps, warmup=1)
        hot[t] = float(np.median([x.gpu_s for x in ts]))

    heap = [(i, str(i)) for i in range(args.heap)]  # the simulation's heap, roughly
    vkey, dkey = ("verify", 4, 6), ("draft", 4)
    runner.capture(vkey)
    runner.capture(dkey)
    vl, _ = runner.verify_launch(np.full(4, 6), np.full(4, 1500), mode="uniform", padded_bs=4,
                                 launch_width=6)
    dl, _ = runner.draft_launch(np.full(4, 1500), 4)

    settings = [("queued (the default)", True, True, True),
                ("not queued, gc paused, spin", False, True, True),
                ("not queued, gc running, spin", False, False, True),
                ("not queued, gc paused, block", False, True, False),
                ("not queued, gc running, block", False, False, False)]
    results = {"hot_ms": {str(t): hot[t] * 1e3 for t in toks},
               "hot_not_queued_ms": {str(t): hot_wall[t] * 1e3 for t in toks}, "settings": {}}
    print(f"prefill latency, ms: hot = {args.reps} timed runs in a row; live-like = one timed run "
          f"between 20 decode steps, {args.heap:,} objects alive")
    print(f"{'setting':<30} " + " ".join(f"{t:>7} tok: median  p90 (x hot)" for t in toks))
    print(f"{'hot, queued':<30} " + " ".join(f"{hot[t] * 1e3:>19.2f}{'':>13}" for t in toks))
    print(f"{'hot, not queued':<30} " + " ".join(f"{hot_wall[t] * 1e3:>19.2f}{'':>13}" for t in toks))
    for name, hold, pause, spin in settings:
        runner.hold_gpu, runner.pause_gc, runner.spin_wait = hold, pause, spin
        ref = hot if hold else hot_wall
        got = {t: [] for t in toks}
        before = (runner.eager_timed_runs, runner.eager_alloc_events)
        for _ in range(args.rounds):
            for t in rng.permutation(toks):
                for _ in range(10):  # 10 decode iterations: one draft step and one verify each
                    runner.run(dkey, dl, graph=True)
                    runner.run(vkey, vl, graph=True)
                got[int(t)].append(runner.prefill(np.array([int(t)]), zero, warmup=1)[0].gpu_s)
        row = {}
        for t in toks:
            a = np.asarray(got[t])
            row[str(t)] = {"median_ms": float(np.median(a) * 1e3), "p90_ms": float(np.percentile(a, 90) * 1e3),
                           "median_over_hot": float(np.median(a) / ref[t])}
        row["eager_runs_with_driver_allocs"] = runner.eager_alloc_events - before[1]
        row["eager_timed_runs"] = runner.eager_timed_runs - before[0]
        results["settings"][name] = row
        print(f"{name:<30} " + " ".join(
            f"{row[str(t)]['median_ms']:>12.2f} {row[str(t)]['p90_ms']:6.2f} ({row[str(t)]['median_over_hot']:.2f})"
            for t in toks) + f"   driver allocs in {row['eager_runs_with_driver_allocs']} timed runs")
    del heap
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
