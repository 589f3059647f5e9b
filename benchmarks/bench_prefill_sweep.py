"""Prefills timed at many token counts between a profile's grid tokens, and the profile's
prediction of them by the plain bilinear line and by each term the lookup adds between grid
tokens: the fused-MoE block staircase (backends/moe_prefill.py) and the prefill attention's
waves (backends/prefill_waves.py).

On a GPU (``--measure``) it times one model's prefills as a profile does (one request,
``runner.prefill(..., reps, warmup=1)``, the median) at each ``TOKENS@PREFIX`` of ``--shapes``
(each model has a default: its grid tokens from 1,024 or 2,048 up to 8,192 and points between
them, at prefix lines of its profile and one between them), records the prefill attention
kernel's measured occupancy (``backends.aiter.occupancy.prefill_occupancy``), and writes it all
to ``--json``, point by point.  On a CPU (``--compare JSON``) it prints, for each measured point
off the profile's grid, the shipped profile's prediction by the line, with the block term, with
the wave term and with both (the lookup as the simulator makes it), and each one's MAPE per
prefix; and, to take the machine's own offset out, the lookup applied to the sweep's own
measurements at the grid tokens (its chord plus both terms at the profile's fitted costs).

    python3 benchmarks/bench_prefill_sweep.py --model llama-3.1-8b --measure --json OUT/prefill_sweep_8b.json
    python3 benchmarks/bench_prefill_sweep.py --compare OUT/prefill_sweep_8b.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _shapes(tokens, prefixes) -> str:
    return ",".join(f"{t}@{p}" for p in prefixes for t in sorted(tokens))


#: per model: grid tokens (for the sweep's own chord) and points between them, at prefixes
DEFAULTS = {
    # 2026-12-03 (GPU 25e51672) measured prefixes 0 and 16,384; these are the other lines and
    # one between lines 16,384 and 32,768
    "deepseek-v2-lite": _shapes((2048, 3072, 4096, 8192, 2240, 2496, 2752, 2944, 3584, 4608,
                                 5120, 5632, 6144, 6656, 7168, 7680), (8192, 24576, 32768)),
    "llama-3.1-8b": _shapes((1024, 1536, 2048, 3072, 4096, 6144, 8192, 1152, 1280, 1408, 1792,
                             2304, 2560, 2816, 3328, 3584, 3840, 4608, 5120, 5632, 6656, 7168,
                             7680), (0, 8192, 12288, 16384)),
    "llama-3.1-70b": _shapes((2048, 3072, 4096, 6144, 8192, 2560, 3584, 4352, 4608, 5120,
                              5632, 6656, 7168, 7680), (0, 8192, 12288, 16384)),
}
#: named sets ``--shapes`` also takes: the 2026-12-03 DeepSeek-V2-Lite sweep (GPU 25e51672)
SHAPE_SETS = {
    "moe-2026-12-03": _shapes((2048, 3072, 4096, 8192, 2240, 2368, 2432, 2496, 2560, 2624, 2688,
                               2752, 2816, 2880, 2944, 4608, 5120, 5376, 5632, 6144, 6656, 7168,
                               7680), (0, 16384)),
}


def measure(a) -> None:
    from backends.aiter import make_executor
    from backends.aiter.executor import gpu_info
    from backends.aiter.occupancy import prefill_occupancy
    from backends.models import load_model

    ex = make_executor(load_model(a.model, tp=a.tp), capture_bs=[1])
    runner = ex.runner
    out = {"model": a.model, "tp": a.tp, "gpu": gpu_info(), "reps": a.reps,
           "prefill_occupancy": prefill_occupancy(runner), "points": []}
    print(f"prefill attention: {out['prefill_occupancy']['slots_per_sm']} blocks per SM "
          f"({out['prefill_occupancy']['kernel']})", flush=True)
    shapes = SHAPE_SETS.get(a.shapes, a.shapes) or DEFAULTS[a.model]
    for spec in shapes.split(","):
        tok, pre = (int(x) for x in spec.split("@"))
        times = [t.latency_s for t in runner.prefill(np.array([tok]), np.array([pre]),
                                                     reps=a.reps, warmup=1)]
        row = {"tokens": tok, "prefix": pre, "median_s": float(np.median(times)),
               "min_s": float(np.min(times)), "max_s": float(np.max(times))}
        out["points"].append(row)
        print(f"{tok}@{pre} {row['median_s'] * 1e3:.2f} ms", flush=True)
        Path(a.json).write_text(json.dumps(out, indent=1))  # each point kept if cut off


def _rules(table, tok: float, pre: float) -> dict[str, float]:
    """The four predictions at one point: line, +blocks, +waves, both (the table's lookup)."""
    from backends.interp import interp_prefill
    from backends.moe_prefill import prefill_block_term
    from backends.prefill_waves import prefill_wave_term

    a0, a1 = table.prefill.axes
    line = interp_prefill(a0, a1, table.prefill.values, tok, pre)[0]
    blocks = prefill_block_term(a0, table._pf_cost, table._pf_moe, tok)
    waves = prefill_wave_term(a0, a1, table._pf_wave, table._pf_wprm, tok, pre)
    return {"line": line, "blocks": line + blocks, "waves": line + waves,
            "both": line + blocks + waves}


def compare(a) -> None:
    from backends.prefill_waves import waves
    from backends.profile import load_profile
    from backends.shipped import default_profile

    data = json.loads(Path(a.compare).read_text())
    table = load_profile(a.profile or default_profile(data["model"], "H200"))
    a0 = table.prefill.axes[0]
    pts = {(p["tokens"], p["prefix"]): p["median_s"] for p in data["points"]}
    occ = data.get("prefill_occupancy")
    print(f"GPU {data['gpu'].get('uuid', '?')[:8]}; profile {Path(table.source['file']).name}"
          + (f"; prefill attention {occ['slots_per_sm']} blocks/SM measured" if occ else ""))
    print(f"wave term: {table.source.get('prefill_attention_waves', {}).get('ms_per_wave')}")
    names = ("line", "blocks", "waves", "both", "own")
    print("tokens prefix measured_ms |   line  +blocks  +waves   both |  own chord+both  waves")
    errs: dict = {}
    for (tok, pre), y in sorted(pts.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        if tok in a0:
            continue
        row = _rules(table, float(tok), float(pre))
        i = int(np.searchsorted(a0, tok)) - 1
        t0, t1 = float(a0[i]), float(a0[i + 1])
        row["own"] = None
        if (t0, pre) in pts and (t1, pre) in pts:
            # the sweep's own chord plus both terms (the table's line is its chord too)
            w = (tok - t0) / (t1 - t0)
            chord = pts[(t0, pre)] + w * (pts[(t1, pre)] - pts[(t0, pre)])
            row["own"] = chord + row["both"] - row["line"]
        cells = []
        for k in names:
            v = row[k]
            if v is None:
                cells.append("      -")
                continue
            e = (v / y - 1) * 100
            errs.setdefault((k, pre), []).append(e)
            errs.setdefault((k, "all"), []).append(e)
            cells.append(f"{e:+7.2f}")
        print(f"{tok:6d} {pre:6d} {y * 1e3:9.2f} | {' '.join(cells[:4])} | {cells[4]:>14s}"
              f"  {waves(float(tok), table._pf_wprm):5.0f}")
    for pre in sorted({p for _, p in errs if p != "all"}) + ["all"]:
        print(f"prefix {pre}: " + "  ".join(
            f"{k} {np.mean(np.abs(errs[(k, pre)])):.2f}% (worst {np.max(np.abs(errs[(k, pre)])):.1f})"
            for k in names if (k, pre) in errs) + f"  [{len(errs[('line', pre)])} points]")


def gpu_cpu_main(doc: str, measure, compare, json_default: str, add_args=None) -> None:
    """The command line the prefill benchmarks share: ``--measure`` (GPU) writes ``--json``,
    ``--compare JSON`` (CPU) reads one; ``add_args(parser)`` adds a script's own options."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    if add_args is not None:
        add_args(ap)
    ap.add_argument("--measure", action="store_true")
    ap.add_argument("--json", default=json_default)
    ap.add_argument("--compare", default=None, help="a --measure JSON to compare")
    a = ap.parse_args()
    if a.measure:
        measure(a)
    if a.compare:
        compare(a)
    if not (a.measure or a.compare):
        ap.error("give --measure (GPU) or --compare JSON (CPU)")


def _args(ap) -> None:
    ap.add_argument("--model", default="deepseek-v2-lite", choices=sorted(DEFAULTS))
    ap.add_argument("--tp", type=int, default=None, help="tensor parallelism (70B: 8)")
    ap.add_argument("--shapes", default=None, help="TOKENS@PREFIX,... or a named set "
                    f"({', '.join(SHAPE_SETS)}; default: per model)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--profile", default=None, help="profile (default: the shipped one)")


def main() -> None:
    gpu_cpu_main(__doc__, measure, compare, "prefill_sweep.json", _args)


if __name__ == "__main__":
    main()
