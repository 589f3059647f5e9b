"""Prefills timed at many token counts between a MoE profile's grid tokens, and the profile's
prediction of them with and without the fused-MoE block term (backends/moe_prefill.py).

On a GPU (``--measure``) it times DeepSeek-V2-Lite prefills as a profile does (one request,
``runner.prefill(..., reps, warmup=1)``, the median) at each ``TOKENS@PREFIX`` of ``--shapes``:
by default the grid tokens 2,048, 3,072, 4,096 and 8,192 and 13 or 14 points between them, at
prefixes 0 and 16,384, and writes them to ``--json``.  On a CPU (``--compare JSON``) it prints,
for each measured point off the profile's grid, the shipped profile's prediction by the plain
bilinear lookup and with the block term, and the MAPE of each; and, to take the machine's own
offset out, the same two rules applied to the sweep's own measurements at the grid tokens (the
segment's chord, and the chord plus the block term at the profile's fitted cost).

    python3 benchmarks/bench_moe_prefill_sweep.py --measure --json OUT/moe_prefill_sweep.json
    python3 benchmarks/bench_moe_prefill_sweep.py --compare OUT/moe_prefill_sweep.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GRID_T = (2048, 3072, 4096, 8192)
BETWEEN = (2240, 2368, 2432, 2496, 2560, 2624, 2688, 2752, 2816, 2880, 2944,
           4608, 5120, 5376, 5632, 6144, 6656, 7168, 7680)
DEFAULT = ",".join(f"{t}@{p}" for p in (0, 16384) for t in sorted(GRID_T + BETWEEN))


def measure(a) -> None:
    from backends.aiter import make_executor
    from backends.aiter.executor import gpu_info
    from backends.models import load_model

    ex = make_executor(load_model(a.model), capture_bs=[1])
    runner = ex.runner
    out = {"model": a.model, "gpu": gpu_info(), "reps": a.reps, "points": []}
    for spec in a.shapes.split(","):
        tok, pre = (int(x) for x in spec.split("@"))
        times = [t.latency_s for t in runner.prefill(np.array([tok]), np.array([pre]),
                                                     reps=a.reps, warmup=1)]
        row = {"tokens": tok, "prefix": pre, "median_s": float(np.median(times)),
               "min_s": float(np.min(times)), "max_s": float(np.max(times))}
        out["points"].append(row)
        print(f"{tok}@{pre} {row['median_s'] * 1e3:.2f} ms", flush=True)
        Path(a.json).write_text(json.dumps(out, indent=1))  # each point kept if cut off


def compare(a) -> None:
    from backends.interp import interp_prefill
    from backends.moe_prefill import expected_blocks, prefill_block_term
    from backends.profile import load_profile
    from backends.shipped import default_profile

    data = json.loads(Path(a.compare).read_text())
    table = load_profile(a.profile or default_profile(data["model"], "H200"))
    g = table.prefill
    a0, a1 = g.axes
    pts = {(p["tokens"], p["prefix"]): p["median_s"] for p in data["points"]}
    print(f"GPU {data['gpu'].get('uuid', '?')[:8]}; profile {Path(table.source['file']).name}")
    print("tokens prefix measured_ms | profile: line  +blocks | own grid: chord  +blocks")
    errs = {k: [] for k in ("line", "blocks", "own_chord", "own_blocks")}
    for (tok, pre), y in sorted(pts.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if tok in a0:
            continue
        line = interp_prefill(a0, a1, g.values, float(tok), float(pre))[0]
        term = prefill_block_term(a0, table._pf_cost, table._pf_moe, float(tok))
        i = int(np.searchsorted(a0, tok)) - 1
        t0, t1 = int(a0[i]), int(a0[i + 1])
        own = None
        if (t0, pre) in pts and (t1, pre) in pts:
            w = (tok - t0) / (t1 - t0)
            own = pts[(t0, pre)] + w * (pts[(t1, pre)] - pts[(t0, pre)])
        row = {"line": line, "blocks": line + term, "own_chord": own,
               "own_blocks": None if own is None else own + term}
        cells = []
        for k, v in row.items():
            if v is None:
                cells.append("     -")
                continue
            e = (v / y - 1) * 100
            errs[k].append(e)
            cells.append(f"{e:+6.2f}%")
        b = expected_blocks(float(tok), table._pf_moe)
        print(f"{tok:6d} {pre:6d} {y * 1e3:9.2f} | {cells[0]} {cells[1]} | {cells[2]} {cells[3]}"
              f"   blocks {b:7.0f}")
    for k, v in errs.items():
        if v:
            print(f"{k:10s} MAPE {np.mean(np.abs(v)):.2f}%  signed {np.mean(v):+.2f}%  "
                  f"worst {np.max(np.abs(v)):.2f}%  ({len(v)} points)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="deepseek-v2-lite")
    ap.add_argument("--shapes", default=DEFAULT, help="TOKENS@PREFIX,...")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--measure", action="store_true")
    ap.add_argument("--json", default="moe_prefill_sweep.json")
    ap.add_argument("--compare", default=None, help="a --measure JSON to compare")
    ap.add_argument("--profile", default=None, help="profile (default: the shipped one)")
    a = ap.parse_args()
    if a.measure:
        measure(a)
    if a.compare:
        compare(a)
    if not (a.measure or a.compare):
        ap.error("give --measure (GPU) or --compare JSON (CPU)")


if __name__ == "__main__":
    main()
