"""Batch sizes between grid points, by the line and by the attention's waves: leave-one-out.

Each measured interior batch size of a shipped profile's verify grids (graph and eager; draft
and draft-extend grids with ``--kind``) is predicted from its two neighbours on the batch axis at the same
width and KV line, once by the line between them (the default, ``backend.bs_interp = auto``)
and once as the what-if ``backend.bs_interp = waves`` does it (``backends.mla_waves.
interp3_waves``: on unified attention the rise above the first KV line placed by the 3D kernel's
wave cost, ``backends.dense_waves``), and compared with its measurement. Nothing in
the rule is fitted to these grids (its constants are the kernel's occupancy, recorded in the
profile, and the 3D kernel's wave fill and tail exponent, fitted on straggler batches), so the
grids are a test it could fail. The neighbours are further apart than a lookup's are (every
other grid point), so both errors are larger than a lookup's.

    python benchmarks/bs_waves_loo.py                  # every shipped dense profile
    python benchmarks/bs_waves_loo.py --model llama-3.1-70b --worst 10

CPU only, a few seconds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.interp import interp2, interp3  # noqa: E402
from backends.mla_waves import interp2_waves, interp3_waves  # noqa: E402
from backends.profile import grid_rows, load_profile, read_profile  # noqa: E402
from backends.shipped import default_profile  # noqa: E402
from traces.errors import SpecschedError  # noqa: E402

MODELS = ("llama-3.1-8b", "llama-3.1-70b")


def cases(model: str, kind: str, graph: bool) -> list[dict]:
    """Every leave-one-out case of one grid of ``model``'s shipped profile: the measured
    latency at an interior batch size and both predictions from its neighbours."""
    path = default_profile(model)
    table = load_profile(path)
    table.set_bs_interp("waves")
    att = table._att_vec
    rows, _ = read_profile(path)
    got = {(r["bs"], r["width"], r["kv_len"]): r["latency_s"] for r in grid_rows(rows).to_pylist()
           if r["kind"] == kind and bool(r["graph"]) == graph}
    bss = sorted({k[0] for k in got})
    widths = sorted({k[1] for k in got})
    kvs = sorted({k[2] for k in got})
    out = []
    for w in widths:
        for b0, b, b1 in zip(bss, bss[1:], bss[2:]):
            for kv in kvs[1:]:
                keys = [(x, w, k) for x in (b0, b, b1) for k in (kvs[0], kv)]
                if not all(k in got for k in keys):
                    continue
                a0, a2 = np.array([b0, b1], float), np.array([kvs[0], kv], float)
                if kind == "draft":
                    v = np.array([[got[(x, w, k)] for k in (kvs[0], kv)] for x in (b0, b1)])
                    line = interp2(a0, a2, v, float(b), float(kv))[0]
                    waves = interp2_waves(a0, a2, v, float(b), float(kv), att)[0]
                else:
                    v = np.array([[[got[(x, w, k)] for k in (kvs[0], kv)]] for x in (b0, b1)])
                    a1 = np.array([float(w)])
                    line = interp3(a0, a1, a2, v, float(b), float(w), float(kv))[0]
                    waves = interp3_waves(a0, a1, a2, v, float(b), float(w), float(kv),
                                          float(w), att)[0]
                true = got[(b, w, kv)]
                out.append({"bs": b, "width": w, "kv": kv, "line_pct": (line / true - 1) * 100,
                            "waves_pct": (waves / true - 1) * 100})
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", action="append", help="a shipped dense model (repeatable; "
                    "default: " + ", ".join(MODELS) + ")")
    ap.add_argument("--kind", choices=("verify", "draft", "draft_extend"), default="verify")
    ap.add_argument("--worst", type=int, default=0, help="also list the N cases the line errs "
                    "most on")
    a = ap.parse_args(argv)
    print(f"| model | {a.kind} grid | cases | the line (MAPE, worst) | by waves (MAPE, worst) |")
    print("|---|---|---|---|---|")
    try:
        for model in a.model or MODELS:
            for graph in (True, False):
                cs = cases(model, a.kind, graph)
                if not cs:
                    continue
                line = np.array([abs(c["line_pct"]) for c in cs])
                waves = np.array([abs(c["waves_pct"]) for c in cs])
                print(f"| {model} | {'graph' if graph else 'eager'} | {len(cs)} | "
                      f"{line.mean():.2f}% ({line.max():.1f}%) | {waves.mean():.2f}% "
                      f"({waves.max():.1f}%) |")
                for c in sorted(cs, key=lambda c: -abs(c["line_pct"]))[:a.worst]:
                    print(f"|  | bs {c['bs']}, width {c['width']}, KV {c['kv']} |  | "
                          f"{c['line_pct']:+.1f}% | {c['waves_pct']:+.1f}% |")
    except SpecschedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
