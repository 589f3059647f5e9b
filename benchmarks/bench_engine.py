#!/usr/bin/env python3
"""Engine speed and memory: the whole Azure conversation trace, and a 1,000,000-request trace.

    python benchmarks/bench_engine.py [--shared ../shared] [--backend roofline|profile]
                                      [--repeat 3] [--million]

1. Converts ``azure2023_conv.csv`` with Spec-Bench EAGLE acceptance (19,366 requests; cached
   under benchmarks/.cache), then simulates it at its recorded rate in a fresh process per
   repetition, on one core (``taskset -c 0`` where available), and prints: requests per
   wall-second of the simulation proper (trace load + engine + writing the results folder), the
   same for the whole ``specsched simulate`` command (interpreter start included), and the peak
   resident memory of that command.  Target: >= 10,000 requests per wall-second, < 1 GB.
2. ``--million``: synthesises 1,000,000 requests (Poisson at 5 req/s on 8 replicas at 40 req/s
   total, EAGLE-like acceptance) and simulates them, printing time and peak memory.

The engine's compiled core is warmed once first (numba caches its machine code on disk), as it
is on any machine after the first run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "benchmarks" / ".cache"


def sh(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(cmd, env=env, capture_output=True, text=True, **kw)


def one_core(cmd: list[str]) -> list[str]:
    return (["taskset", "-c", "0"] + cmd) if shutil.which("taskset") else cmd


def measure(trace: Path, backend: str, extra: list[str], out: Path) -> dict:
    """Run ``specsched simulate`` under /usr/bin/time -v; return its figures."""
    t0 = time.perf_counter()
    cmd = [sys.executable, "-m", "specsched", "simulate", "--trace", str(trace), "--backend",
           backend, "--out", str(out), "--no-report", "--no-progress", "--json", *extra]
    timer = ["/usr/bin/time", "-v"] if Path("/usr/bin/time").exists() else []
    proc = sh(one_core(timer + cmd))
    total = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"simulate failed:\n{proc.stderr}")
    summary = json.loads(proc.stdout)
    rss = None
    for line in proc.stderr.splitlines():
        if "Maximum resident set size" in line:
            rss = int(line.split(":")[1]) / 1024
    # the simulation proper: trace load + engine + results folder, timed inside the command
    return {"requests": summary["requests"], "engine_s": summary["wall_s"],
            "command_s": total, "rss_mb": rss, "summary": summary}


def azure(shared: Path, backend: str, repeat: int) -> None:
    CACHE.mkdir(parents=True, exist_ok=True)
    trace = CACHE / "azure_conv_eagle.parquet"
    if not trace.exists():
        t0 = time.perf_counter()
        proc = sh([sys.executable, "-m", "specsched", "trace", "convert", "--from", "azure",
                   str(shared / "data/traces/azure2023_conv.csv"), "-o", str(trace),
                   "--acceptance",
                   f"specbench:{shared / 'data/acceptance/specbench_vicuna7b_eagle.jsonl'}",
                   "--seed", "0"])
        if proc.returncode != 0:
            raise SystemExit(proc.stderr)
        print(f"converted the Azure conversation trace in {time.perf_counter() - t0:.2f} s")
    with tempfile.TemporaryDirectory() as tmp:
        measure(trace, backend, [], Path(tmp) / "warm")  # numba cache, page cache
        rows = []
        for k in range(repeat):
            rows.append(measure(trace, backend, [], Path(tmp) / f"r{k}"))
    best = min(rows, key=lambda r: r["command_s"])
    n = best["requests"]
    s = best["summary"]
    print(f"\nAzure conversation trace, {n:,} requests at the recorded rate, backend {backend}, "
          f"policy {s['policy']}, one core")
    print(f"  simulated time {s['duration_s']:.0f} s, {s['decode_iterations']:,} decode iterations, "
          f"{s['forward_passes']:,} forward passes")
    for r in rows:
        print(f"  run: simulation {r['engine_s']:.2f} s ({n / r['engine_s']:,.0f} req/s); "
              f"whole command {r['command_s']:.2f} s ({n / r['command_s']:,.0f} req/s); "
              f"peak RSS {r['rss_mb']:.0f} MB")
    med = sorted(r["engine_s"] for r in rows)[len(rows) // 2]
    print(f"  median simulation: {n / med:,.0f} requests per wall-second "
          f"(target >= 10,000); peak RSS {max(r['rss_mb'] for r in rows):.0f} MB (target < 1024)")


def million(backend: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "million.parquet"
        t0 = time.perf_counter()
        proc = sh([sys.executable, "-m", "specsched", "trace", "synth", "-n", "1000000",
                   "--rate", "40", "-o", str(trace), "--acceptance", "geometric:k=4,alpha=0.75",
                   "--seed", "0"])
        if proc.returncode != 0:
            raise SystemExit(proc.stderr)
        print(f"\nsynthesised 1,000,000 requests in {time.perf_counter() - t0:.1f} s")
        r = measure(trace, backend, ["--replicas", "8", "--set",
                                     "engine.record_request_steps=false"], Path(tmp) / "out")
        s = r["summary"]
        print(f"1,000,000 requests on 8 replicas ({backend}): simulation {r['engine_s']:.1f} s "
              f"({1e6 / r['engine_s']:,.0f} req/s), whole command {r['command_s']:.1f} s, "
              f"peak RSS {r['rss_mb']:.0f} MB; simulated {s['duration_s'] / 3600:.1f} h, "
              f"{s['forward_passes']:,} forward passes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shared", type=Path, default=ROOT.parent / "shared")
    ap.add_argument("--backend", default="roofline", choices=["roofline", "profile"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--million", action="store_true")
    a = ap.parse_args()
    azure(a.shared, a.backend, a.repeat)
    if a.million:
        million(a.backend)


if __name__ == "__main__":
    main()
