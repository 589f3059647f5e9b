"""`specsched plan` on the whole Azure conversation trace: wall time, and whether its answer holds.

    python benchmarks/bench_plan.py --csv AzureLLMInferenceTrace_conv.csv
                                    [--slo 'ttft_p90<=2s,tpot_p99<=200ms'] [--jobs 2]

1. Converts the Azure conversation trace CSV given with ``--csv`` (Azure/AzurePublicDataset's
   ``AzureLLMInferenceTrace_conv``, 19,366 requests, 58 min; not shipped) into a trace
   with Spec-Bench EAGLE acceptance (the shipped lengths file, seed 0), cached under the temp
   folder (not timed).
2. Runs ``specsched plan --trace T --slo S --jobs N --json`` as a user would, with the default
   CPU backend (the shipped profile; the roofline backend when no profile is shipped, said in
   the output), and times it end to end (target: <= 60 s on 2 cores).
3. Runs ``specsched simulate`` at the reported rate scale and at 1.1 times it, and checks the
   SLO on the written results folders with ``analysis``: the first must meet it, the second
   must not.

Prints every figure; exits 1 when the answer does not hold or the time is over the target.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT.parent / "shared" / "data" / "traces" / "azure2023_conv.csv"
LENGTHS = ROOT / "traces" / "samples" / "specbench_vicuna7b_eagle_lengths.jsonl"
TARGET_S = 60.0


def specsched(*args: str, capture: bool = True) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("specsched")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "specsched"]
    proc = subprocess.run(cmd + list(args), cwd=ROOT, capture_output=capture, text=True)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr or "")
        raise SystemExit(f"specsched {' '.join(args[:1])} failed with exit {proc.returncode}")
    return proc


def default_backend() -> tuple[str, str]:
    """('profile', why) when a profile is shipped for the default model/GPU, else roofline."""
    from simulator.config import SimConfig
    from specsched.setup import prepare
    from traces.errors import SpecschedError

    try:
        prepare(SimConfig.load(None, {}))
        return "profile", "the default CPU backend (shipped profile)"
    except SpecschedError as exc:
        return "roofline", f"roofline: the default profile backend is unavailable ({exc})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--slo", default="ttft_p90<=2s,tpot_p99<=200ms")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--backend", default=None, help="force a backend (default: profile, "
                                                    "else roofline)")
    ap.add_argument("--csv", type=Path, default=CSV,
                    help="the Azure conversation trace CSV (default: %(default)s)")
    a = ap.parse_args()
    csv = a.csv
    if not csv.is_file():
        print(f"needs the Azure conversation trace CSV: {csv} is not a file (--csv PATH)",
              file=sys.stderr)
        return 2
    cache = Path(tempfile.gettempdir()) / "specsched-bench"
    cache.mkdir(exist_ok=True)
    trace = cache / "azure_conv_eagle_full.parquet"
    if not trace.exists():
        t0 = time.perf_counter()
        specsched("trace", "convert", "--from", "azure", str(csv), "-o", str(trace),
                  "--acceptance", f"specbench:{LENGTHS}", "--seed", "0")
        print(f"trace: converted {csv.name} in {time.perf_counter() - t0:.1f} s -> {trace}")
    if a.backend:
        backend, why = a.backend, f"{a.backend} (forced)"
    else:
        backend, why = default_backend()
    print(f"backend: {why}")
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start")

    t0 = time.perf_counter()
    out = specsched("plan", "--trace", str(trace), "--slo", a.slo, "--backend", backend,
                    "--jobs", str(a.jobs), "--json").stdout
    wall = time.perf_counter() - t0
    res = json.loads(out)
    best = res["best"]
    print(f"plan: {res['requests']} requests, recorded rate {res['recorded_rate_req_s']:.3f} "
          f"req/s, SLO {res['slo']}")
    print(f"plan: max rate {res['max_rate_req_s']:.3f} req/s (x{res['rate_scale']:.5g}), "
          f"{best['simulations']} simulations, wall {wall:.1f} s on {a.jobs} workers "
          f"(target <= {TARGET_S:.0f} s)")

    from analysis.results import load_run
    from analysis.slo import parse_slo

    slo = parse_slo(a.slo)
    ok = True
    with tempfile.TemporaryDirectory(prefix="specsched-bench-") as tmp:
        for label, scale, want in (("at the answer", res["rate_scale"], True),
                                   ("at +10%", res["rate_scale"] * 1.1, False)):
            folder = Path(tmp) / label.replace(" ", "_")
            t1 = time.perf_counter()
            specsched("simulate", "--trace", str(trace), "--backend", backend, "--rate-scale",
                      repr(scale), "--out", str(folder), "--no-report", "--no-progress")
            sim_s = time.perf_counter() - t1
            check = slo.check(load_run(folder))
            terms = ", ".join(f"{t.term.text}: {t.value:.4g}" for t in check.terms)
            verdict = "meets" if check.ok else "misses"
            good = check.ok == want
            ok &= good
            print(f"simulate {label} (x{scale:.5g}, {scale * res['recorded_rate_req_s']:.3f} "
                  f"req/s): {verdict} the SLO [{terms}] in {sim_s:.1f} s -- "
                  f"{'as expected' if good else 'WRONG'}")
    in_time = wall <= TARGET_S
    print(f"result: answer {'holds' if ok else 'DOES NOT HOLD'}; wall {wall:.1f} s "
          f"{'<=' if in_time else '>'} {TARGET_S:.0f} s")
    return 0 if ok and in_time else 1


if __name__ == "__main__":
    sys.exit(main())
