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


def probes(n_kv: int):
    """(name, executor method, batch): the decode passes a long-context run makes most."""
    from backends.protocol import DraftBatch, DraftExtendBatch, VerifyBatch

    def verify(bs):
        return VerifyBatch(bs_real=bs, bs_padded=bs, widths=np.full(bs, 4),
                           kv_lens=np.full(bs, n_kv), launch_width=4, mode="uniform", graph=True)
    return [
        ("draft bs1", "draft", DraftBatch(bs_real=1, bs_padded=1, kv_lens=np.array([n_kv]),
                                          passes=2, graph=True)),
        ("draft bs4", "draft", DraftBatch(bs_real=4, bs_padded=4, kv_lens=np.full(4, n_kv),
                                          passes=2, graph=True)),
        ("draft_extend bs4", "draft_extend",
         DraftExtendBatch(bs_real=4, bs_padded=4, width=4, kv_lens=np.full(4, n_kv), graph=True)),
        ("verify bs1", "verify", verify(1)),
        ("verify bs4", "verify", verify(4)),
        ("verify bs16", "verify", verify(16)),
    ]


def time_call(ex, method: str, batch) -> float:
    r = getattr(ex, method)(batch)
    return float(getattr(r, "latency_s", r))


def probe_round(ex, plist, n: int) -> dict[str, float]:
    """Median latency (ms) of ``n`` calls of each probe, the probes interleaved."""
    got: dict[str, list[float]] = {name: [] for name, _, _ in plist}
    for _ in range(n):
        for name, method, batch in plist:
            got[name].append(time_call(ex, method, batch))
    return {k: float(np.median(v)) * 1e3 for k, v in got.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="deepseek-v2-lite")
    ap.add_argument("--kv", type=int, default=8192, help="every probe's KV per request")
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
    plist = probes(a.kv)
    for _, method, batch in plist:  # capture every graph before anything is timed
        time_call(ex, method, batch)
    burst = PrefillBatch(tokens=np.array([a.burst_tokens]), prefix=np.array([0]))
    ex.prefill(burst)  # the first call of a length warms up untimed
    smi = start_smi(a.smi)
    time.sleep(1.0)
    rounds: list[dict] = []

    def record(phase: str) -> None:
        t0 = time.time()
        ms = probe_round(ex, plist, a.n)
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
