"""Speculation controllers on the Azure conversation trace with EAGLE acceptance, at 1x, 4x, 16x.

    python benchmarks/bench_adaptive.py [--csv AzureLLMInferenceTrace_conv.csv] [--limit N]
                                        [--slo ttft=2s,tpot=5ms] [--rates 1,4,16] [--jobs 2]

1. Converts the Azure conversation trace CSV given with ``--csv`` (Azure/AzurePublicDataset's
   ``AzureLLMInferenceTrace_conv``, 19,366 requests; not shipped) into a trace with Spec-Bench
   EAGLE acceptance (the shipped lengths file, seed 0), cached under the temp folder (not timed);
   ``--limit N`` keeps the first N requests.
2. At each rate scale, simulates with the default model and CPU backend: no speculation, static
   k = 1..7, each controller with its defaults (``schedule``: vLLM PR #32374's example;
   ``threshold``: off above batch 32; ``sglang-adaptive``: SGLang PR #24055's per-range defaults;
   these with the engine's default ``num_draft_tokens`` 4), ``goodput`` and ``oracle`` with
   candidates 0..7 (``num_draft_tokens`` 8, the statics' range), and the setting
   ``tune-spec`` picks at that rate (``analysis.tune_spec``, without its max-rate search).
3. Prints a markdown table: goodput (requests per second within both thresholds), TPOT p50 and
   p99 per rate, the tune-spec wall time per rate, and the machine's load.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CSV = next((p for p in (ROOT.parent / "shared", ROOT.parents[1] / "shared")
            if (p / "data" / "traces" / "azure2023_conv.csv").is_file()),
           ROOT.parent / "shared") / "data" / "traces" / "azure2023_conv.csv"
LENGTHS = ROOT / "traces" / "samples" / "specbench_vicuna7b_eagle_lengths.jsonl"


def convert(csv: Path, limit: int | None) -> Path:
    cache = Path(tempfile.gettempdir()) / "specsched-bench"
    cache.mkdir(exist_ok=True)
    trace = cache / f"azure_conv_eagle_{limit or 'full'}.parquet"
    if not trace.exists():
        cmd = [sys.executable, "-m", "specsched", "trace", "convert", "--from", "azure",
               str(csv), "-o", str(trace), "--acceptance", f"specbench:{LENGTHS}", "--seed", "0"]
        if limit:
            cmd += ["--limit", str(limit)]
        subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True)
    return trace


def settings():
    """(label, setting) rows, in table order."""
    from analysis.tune_spec import _setting

    rows = [("no speculation", _setting("static", 0))]
    rows += [(f"static k={k}", _setting("static", k)) for k in range(1, 8)]
    rows += [("schedule (default)", _setting("schedule", 3)),
             ("threshold (default)", _setting("threshold", 3)),
             ("sglang-adaptive (default)", _setting("sglang-adaptive", 3)),
             ("goodput (k 0..7)", _setting("goodput", 7)),
             ("oracle (k 0..7, upper bound)", _setting("oracle", 7))]
    return rows


def fmt(x, mult=1.0, nd=2):
    return "-" if x is None else f"{x * mult:.{nd}f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--csv", type=Path, default=CSV,
                    help="the Azure conversation trace CSV (default: %(default)s)")
    ap.add_argument("--limit", type=int, default=None, help="keep the first N requests")
    ap.add_argument("--slo", default="ttft=2s,tpot=5ms")
    ap.add_argument("--rates", default="1,4,16")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    if not a.csv.is_file():
        print(f"needs the Azure conversation trace CSV: {a.csv} is not a file (--csv PATH)",
              file=sys.stderr)
        return 2
    from analysis.parallel import make_backend
    from analysis.runner import RunSpec
    from analysis.cli_tune import parse_thresholds
    from analysis.tune_spec import _config, score, tune_spec
    from simulator.config import SimConfig

    trace = str(convert(a.csv, a.limit))
    ttft, tpot = parse_thresholds(a.slo)
    rates = [float(x) for x in a.rates.split(",")]
    base = SimConfig.load(None, {})
    load0 = os.getloadavg()[0]
    rows = settings()
    table: dict[tuple[str, float], dict] = {}
    tuned: dict[float, tuple[str, float]] = {}
    t0 = time.perf_counter()
    with make_backend(jobs=a.jobs) as be:
        for r in rates:
            cfg = base.replace({"rate_scale": r})
            jobs = [((label, r), RunSpec(trace, _config(cfg, s))) for label, s in rows]
            for key, res in be.run(jobs, fn=score, extra=(ttft, tpot)):
                if isinstance(res, Exception):
                    raise res
                table[key] = res
            t1 = time.perf_counter()
            tres = tune_spec(trace, cfg, ttft_s=ttft, tpot_s=tpot, backend=be, max_rate=False)
            b = tres["best"]
            desc = f"{b['controller']} k<={b['num_draft_tokens'] - 1}"
            if b["settings"]:
                desc += " " + " ".join(f"{v}" for v in b["settings"].values())
            tuned[r] = (desc, time.perf_counter() - t1, tres["simulations"])
            table[("tuned (tune-spec)", r)] = tres["best_result"]
    wall = time.perf_counter() - t0
    labels = [lab for lab, _ in rows] + ["tuned (tune-spec)"]
    head = "| setting | " + " | ".join(f"{r:g}x goodput (req/s) | {r:g}x TPOT p50 / p99 (ms)"
                                       for r in rates) + " |"
    print(f"trace: {trace} ({'first ' + str(a.limit) if a.limit else 'all'} requests), "
          f"SLO {a.slo}, default model and backend")
    print(f"machine: {os.cpu_count()} CPUs, load average {load0:.2f} at start, "
          f"{os.getloadavg()[0]:.2f} at the end; {a.jobs} jobs; wall {wall:.0f} s\n")
    print(head)
    print("|---|" + "---:|---:|" * len(rates))
    for lab in labels:
        cells = []
        for r in rates:
            x = table[(lab, r)]
            cells += [fmt(x["goodput_req_s"], nd=3),
                      f"{fmt(x['tpot_p50_s'], 1e3)} / {fmt(x['tpot_p99_s'], 1e3)}"]
        print(f"| {lab} | " + " | ".join(cells) + " |")
    print()
    for r in rates:
        desc, secs, n = tuned[r]
        print(f"- tuned at {r:g}x: {desc} ({n} simulations, {secs:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
