"""How far a shipped profile's graph latency is from the line between its neighbouring batch sizes.

A profile measures graphs at some batch sizes and interpolates linearly between them; a live
graph launch pads to SGLang's capture ladder, whose sizes a profile may lack. On the MLA path the
decode kernel gives ``rows`` query rows ``ceil(264 / rows)`` KV splits (2-16) and an H200 holds
264 of its programs at once, so a launch's wave count jumps between neighbouring sizes
(``backends.aiter.mla_kernels.decode_splits``; docs/aiter_mla.md). For every interior batch
size of each graph grid (verify, draft, draft-extend; every width) this leaves the size out and
predicts it from its two neighbours at the grid's two longest KV lines, and prints the MAPE and
the worst error; ``--slopes`` prints the verify graphs' time per 1,000 KV tokens at width 4
beside each launch's rows, splits, programs and waves. CPU only, a few seconds.

    python benchmarks/mla_ladder_interp.py --slopes
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.aiter.mla_kernels import decode_splits  # noqa: E402
from backends.profile import grid_rows, read_profile  # noqa: E402

PROFILES = ("deepseek-v2-lite__H200.parquet", "deepseek-v3__H200.parquet",
            "llama-3.1-8b__H200.parquet", "llama-3.1-70b__H200.parquet")
SLOTS = 264  # the MLA decode's resident programs on an H200 (2 an SM, 132 SMs)


def graphs(path: Path, kind: str) -> dict[tuple[int, int, int], float]:
    """(bs, width, kv) -> latency_s of a profile's graph rows of ``kind``."""
    t = grid_rows(read_profile(path)[0]).to_pylist()
    return {(r["bs"], r["width"], r["kv_len"]): r["latency_s"] for r in t
            if r["kind"] == kind and r["graph"]}


def left_out_errors(g: dict) -> np.ndarray:
    """Signed % errors of each interior batch size predicted from its neighbours (longest KVs)."""
    bss = sorted({k[0] for k in g})
    kvs = sorted({k[2] for k in g})[-2:]
    out = []
    for b0, b, b1 in zip(bss, bss[1:], bss[2:]):
        t = (b - b0) / (b1 - b0)
        for w in sorted({k[1] for k in g}):
            for kv in kvs:
                if all((x, w, kv) in g for x in (b0, b, b1)):
                    line = g[(b0, w, kv)] + t * (g[(b1, w, kv)] - g[(b0, w, kv)])
                    out.append((line / g[(b, w, kv)] - 1) * 100)
    return np.asarray(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--slopes", action="store_true", help="the V2-Lite width-4 slope table")
    a = ap.parse_args()
    for name in PROFILES:
        for kind in ("verify", "draft", "draft_extend"):
            e = left_out_errors(graphs(ROOT / "backends" / "profiles" / name, kind))
            if len(e):
                print(f"{name:<32} {kind:<13} {len(e):4d} points: MAPE {np.mean(np.abs(e)):5.2f}%, "
                      f"worst {e[np.argmax(np.abs(e))]:+6.1f}%")
    if a.slopes:
        g = graphs(ROOT / "backends" / "profiles" / PROFILES[0], "verify")
        kvs = sorted({k[2] for k in g})[-2:]
        print(f"\nDeepSeek-V2-Lite verify graphs, width 4, KV {kvs[0]}-{kvs[1]}:")
        print("  bs  rows  splits  programs  waves  ms per 1k KV tokens")
        for b in sorted({k[0] for k in g}):
            rows = 4 * b
            sp = decode_splits(rows)
            slope = (g[(b, 4, kvs[1])] - g[(b, 4, kvs[0])]) / (kvs[1] - kvs[0]) * 1e6
            print(f"{b:4d} {rows:5d} {sp:7d} {rows * sp:9d} {-(-rows * sp // SLOTS):6d}  {slope:8.3f}")


if __name__ == "__main__":
    main()
