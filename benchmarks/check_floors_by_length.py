"""How long must a live run be for fidelity's whole-run checks to tell a good profile from a bad one?

For each run length (the first N requests of a trace) it simulates the profile side once, then
again with every pass x0.99 and x1.01 (an offset between two machines of the size recorded
between H200s) and eight times with per-pass noise of the profile's own measured spread (the
jitter floor, ``analysis.fidelity.jitter``), and prints, per whole-run check, how far each moves
the figure. A check whose figure moves by 3% (the target) when every pass is 1% slower cannot
separate a profile 1% off from one 3% off, whatever the profile: it needs a longer run, or the
live runs must be read with that floor beside them. Needs no GPU and no live run.

    .venv/bin/python benchmarks/check_floors_by_length.py \\
        [--model llama-3.1-8b] [--tp N] [--policy fixed] [--limits 150,400,1000,2000] \\
        [--trace traces/samples/azure_conv_eagle_2k.parquet] [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from analysis.fidelity.jitter import jitter_floors  # noqa: E402
from analysis.fidelity.offset import offset_checks  # noqa: E402
from analysis.fidelity.report import TARGETS, WHOLE_RUN_CHECKS  # noqa: E402
from simulator.config import SimConfig  # noqa: E402
from specsched.setup import load_trace, prepare, simulate_to  # noqa: E402

TRACE = ROOT / "traces" / "samples" / "azure_conv_eagle_2k.parquet"


def floors(trace_path: Path, model: str, tp: int | None, policy: str, limit: int,
           jitter_runs: int = 8) -> dict:
    """Per whole-run check: the largest move under x0.99 / x1.01 of every pass
    (``offset_pct``) and under per-pass noise (``jitter_pct``), for the first ``limit``
    requests of ``trace_path``."""
    cfg = SimConfig.load(None, {"model.name": model, "model.tp": tp, "backend.name": "profile",
                                "engine.policy": policy})
    prep = prepare(cfg)
    trace = load_trace(trace_path, seed=cfg.seed, limit=limit)

    def run_profile(ex):
        return simulate_to(trace, cfg, None, executor=ex).summary

    base = run_profile(prep.executor)
    off = offset_checks(run_profile, prep.executor, base, pct=1.0)["values_pct"]
    jit = jitter_floors(run_profile, prep.executor, prep.executor.latency_table(), base,
                        runs=jitter_runs, seed=cfg.seed)["floor_pct"]
    out = {}
    for name in WHOLE_RUN_CHECKS:
        vals = [abs(v) for v in off.get(name, []) if v is not None]
        out[name] = {"offset_pct": max(vals) if vals else None, "jitter_pct": jit.get(name)}
    return {"requests": len(trace), "duration_s": base["duration_s"], "checks": out}


def _pct(x) -> str:
    return "-" if x is None else f"{x:.2f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--tp", type=int, default=None)
    ap.add_argument("--policy", default="fixed")
    ap.add_argument("--trace", type=Path, default=TRACE)
    ap.add_argument("--limits", default="150,400,1000,2000")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    limits = [int(x) for x in a.limits.split(",")]
    target = TARGETS["whole_run_pct"]
    res = {n: floors(a.trace, a.model, a.tp, a.policy, n) for n in limits}
    print(f"{a.model}{f' tp {a.tp}' if a.tp else ''}, --policy {a.policy}, {a.trace.name}: "
          f"per whole-run check, the largest move of its figure (%) with every pass x0.99 / x1.01 "
          f"(offset) and under per-pass noise (jitter); target {target:g}%\n")
    head = " | ".join(f"{res[n]['requests']} req ({res[n]['duration_s']:.0f} s)" for n in limits)
    print(f"| check | {head} |")
    print("|---|" + "---|" * len(limits))
    for name in WHOLE_RUN_CHECKS:
        cells = []
        for n in limits:
            c = res[n]["checks"][name]
            flag = " *" if (c["offset_pct"] or 0) >= target / 2 else ""
            cells.append(f"{_pct(c['offset_pct'])} / {_pct(c['jitter_pct'])}{flag}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\ncells: offset / jitter; * where a 1% offset moves the figure by half the target or "
          "more")
    if a.json:
        a.json.write_text(json.dumps({"model": a.model, "tp": a.tp, "policy": a.policy,
                                      "trace": a.trace.name, "by_limit": res}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
