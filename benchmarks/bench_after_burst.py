"""Do decode passes run slower after a burst of long prefills?  The same probes, before and after.

DeepSeek-V2-Lite's long-context live runs met the profile within 0.5% for their first 30
seconds and ran every decode kind 3-4% slower from the end of their first burst of 8,192-token
prefills to the end of the run, on three GPUs (``benchmarks/residual_by_shape.py --by-time``;
docs/aiter_mla.md, *Long context*). This separates the GPU's state from the batches: in one
process it times a fixed set of decode probes (graph replays of draft, draft-extend and verify
at KV 8,192, through the executor as a live run calls it, median of ``--n``), then runs
8,192-token prefills back to back for ``--burst-s`` seconds, as the live run's burst did, and
times the same probes again every few seconds for ``--after-s`` seconds. The GPU's SM and memory
clocks, power, temperatures and clock-event reasons are sampled by ``nvidia-smi`` every 100 ms
beside it (``--smi CSV``; the wall time of every probe round is in the JSON, so the two align).

On the H200 (2026-12-03, ``benchmarks/results/h200-2026-12-03c/``) the burst changed nothing
(after / before 0.9997-1.0035, 1,980 MHz throughout): the drift was the graph the run captured
last (``benchmarks/bench_capture_state.py``; docs/aiter.md, Timing).

    python3 benchmarks/bench_after_burst.py --json after_burst.json --smi smi.csv

GPU only; about 150 s with the model's build.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_capture_state import call, parse_probes, probe_round  # noqa: E402

#: the decode passes a long-context run makes most (``bench_capture_state.parse_probes``)
PROBES = "draft:1,draft:4,extend:4,verify:1,verify:4,verify:16"
SMI_FIELDS = ("timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,temperature.memory,"
              "utilization.gpu,clocks_event_reasons.active")


def start_smi(path: str | None):
    """``nvidia-smi`` sampling every 100 ms into ``path`` (CSV), or None without it."""
    if not path:
        return None
    try:
        return subprocess.Popen(["nvidia-smi", f"--query-gpu={SMI_FIELDS}", "--format=csv",
                                 "-lms", "100"], stdout=open(path, "w"), stderr=subprocess.STDOUT)
    except OSError as e:
        print(f"no nvidia-smi ({e}): no telemetry", flush=True)
        return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="deepseek-v2-lite")
    ap.add_argument("--kv", type=int, default=8192, help="every probe's KV per request")
    ap.add_argument("--probes", default=PROBES, help="kind:bs,... (verify, draft, extend)")
    ap.add_argument("--n", type=int, default=15, help="calls of each probe per round")
    ap.add_argument("--before", type=int, default=4, help="probe rounds before the burst")
    ap.add_argument("--burst-s", type=float, default=15.0)
    ap.add_argument("--burst-tokens", type=int, default=8192)
    ap.add_argument("--after-s", type=float, default=60.0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--smi", default=None, help="CSV for nvidia-smi's samples")
    a = ap.parse_args()

    from backends.aiter import make_executor
    from backends.aiter.executor import gpu_info
    from backends.models import load_model
    from backends.protocol import PrefillBatch

    ex = make_executor(load_model(a.model), capture_bs=[1, 4, 16])
    probes = parse_probes(a.probes, a.kv, 4)  # width 4: the long-context run's verify width
    for kind, b in probes.values():  # capture every graph before anything is timed
        call(ex, kind, b)
    burst = PrefillBatch(tokens=np.array([a.burst_tokens]), prefix=np.array([0]))
    ex.prefill(burst)  # the first call of a length warms up untimed
    smi = start_smi(a.smi)
    time.sleep(1.0)
    rounds: list[dict] = []

    def record(phase: str) -> None:
        t0 = time.time()
        ms = probe_round(ex, probes, a.n)
        rounds.append({"phase": phase, "wall_start": t0, "wall_end": time.time(), "ms": ms})
        print(f"{phase:6s} {time.time() - t_start:6.1f}s " +
              " ".join(f"{k} {v:.4f}" for k, v in ms.items()), flush=True)

    t_start = time.time()
    for _ in range(a.before):
        record("before")
        time.sleep(1.0)
    b0 = time.time()
    prefill_ms = []
    while time.time() - b0 < a.burst_s:
        prefill_ms.append(ex.prefill(burst) * 1e3)
    b1 = time.time()
    print(f"burst  {len(prefill_ms)} prefills of {a.burst_tokens} tokens in {b1 - b0:.1f}s: "
          f"first {prefill_ms[0]:.1f} ms, last {prefill_ms[-1]:.1f} ms, "
          f"median {np.median(prefill_ms):.1f} ms", flush=True)
    while time.time() - b1 < a.after_s:
        record("after")
        time.sleep(2.0)
    if smi is not None:
        smi.terminate()
        smi.wait()
    base = {k: float(np.median([r["ms"][k] for r in rounds if r["phase"] == "before"]))
            for k in rounds[0]["ms"]}
    print("after/before (median of rounds): " + " ".join(
        f"{k} {np.median([r['ms'][k] for r in rounds if r['phase'] == 'after']) / v:.4f}"
        for k, v in base.items()), flush=True)
    out = {"model": a.model, "gpu": gpu_info(), "kv": a.kv, "n": a.n,
           "burst": {"wall_start": b0, "wall_end": b1, "tokens": a.burst_tokens,
                     "prefill_ms": prefill_ms},
           "rounds": rounds, "before_ms": base}
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
