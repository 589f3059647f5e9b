#!/usr/bin/env python3
"""How fast Ctrl-C (SIGINT) and SIGTERM stop ``specsched simulate``, and what they leave.

    python benchmarks/bench_interrupt.py [--requests 5000] [--repeat 5] [--replicas 4]
                                         [--max-running 1] [--big]

Synthesises a trace, starts ``simulate`` on it in a fresh process, waits until the engine has
streamed its first step rows into the temporary results folder (so the signal lands inside the
compiled engine loop), sends the signal and prints, per signal, the seconds from the signal to
the end of the process, the exit codes and whether anything was left in the output's parent
folder.  Target: under 1 s, exit 130, nothing left.  ``--big``: 300,000 requests at 200 req/s
on 8 replicas with the default configuration (the case the issue was found on).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def once(trace: Path, sig: int, extra: list[str]) -> tuple[float, int, list[str]]:
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        proc = subprocess.Popen(
            [sys.executable, "-m", "specsched", "simulate", "--trace", str(trace), "--out",
             str(d / "run"), "--no-report", *extra], cwd=ROOT,
            env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        while not list(d.glob(".run.tmp-*/steps.parquet")):
            if proc.poll() is not None:
                raise SystemExit("simulate ended before the signal: use a larger trace")
            time.sleep(0.005)
        t0 = time.monotonic()
        proc.send_signal(sig)
        proc.wait()
        return time.monotonic() - t0, proc.returncode, sorted(p.name for p in d.iterdir())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--replicas", type=int, default=4)
    ap.add_argument("--max-running", type=int, default=1)
    ap.add_argument("--big", action="store_true")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from traces.synth import synth

    n, rate = (300_000, 200.0) if a.big else (a.requests, 50.0)
    extra = ["--replicas", "8"] if a.big else ["--replicas", str(a.replicas), "--set",
                                               f"engine.max_running={a.max_running}"]
    with tempfile.TemporaryDirectory() as d:
        trace = Path(d) / "t.parquet"
        synth(trace, n=n, rate=rate, acceptance="geometric:k=4,alpha=0.7", seed=0)
        print(f"{n} requests, simulate {' '.join(extra)}")
        for sig in (signal.SIGINT, signal.SIGTERM):
            runs = [once(trace, sig, extra) for _ in range(a.repeat)]
            took = [t for t, _, _ in runs]
            print(f"{sig.name}: {min(took):.2f}-{max(took):.2f} s (median "
                  f"{statistics.median(took):.2f}) from the signal to the end; exit codes "
                  f"{sorted({c for _, c, _ in runs})}; left behind: "
                  f"{sorted({x for _, _, left in runs for x in left}) or 'nothing'}")


if __name__ == "__main__":
    main()
