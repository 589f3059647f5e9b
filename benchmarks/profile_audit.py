"""Each shipped profile row that calibrations re-measured, against every re-measurement of it.

``specsched calibrate`` on a GPU of the profile's own model re-measures some of the shipped
profile's grid rows (its anchors) with the profile's protocol. Over many calibrations, on
different GPUs and days, those re-measurements say whether a shipped row was recorded right:
GPU-to-GPU differences move every row of a calibration together and scatter from one
calibration to the next, but a row recorded in a disturbed moment stays off on every one.

For every anchor shape measured by at least ``--min`` distinct calibrations (re-fits of the same
anchors counted once) under ``benchmarks/results/``, this prints the median of measured /
shipped, its range and count, sorted by how far the median is from 1. The calibrations compare
against the shipped file of their time; a row whose shipped value changed since is compared
against today's through the anchor's recorded ``base_s`` only when it still equals today's row
(otherwise left out and counted). CPU only, a few seconds:

    python benchmarks/profile_audit.py [--min 3] [--top 15]

On 2026-12-07 (1.6 s) 72 shipped rows had been re-measured by 3 to 9 calibrations on H200s,
and every one's median lies within 4.6% of the shipped row but one: the 8B's draft graph at 256
requests over KV 512, 0.795 (0.770-0.826 over nine), where the shipped eager row at the same
shape is 0.78 ms against the graph row's 1.01 ms. The next farthest are the draft-extend graphs
at 256 requests x 8 rows (the 70B shard 0.954 over five, the 8B 0.964 over nine). 105 anchors
were left out: the 70B's and V2-Lite's profiles were re-recorded after them.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.calibrate import SHAPE  # noqa: E402
from backends.calibrate_prior import sheet_of  # noqa: E402
from backends.profile import grid_rows, read_profile  # noqa: E402
from backends.shipped import default_profile  # noqa: E402
from benchmarks.calibrate_prior_whatif import calibrations  # noqa: E402


def remeasured(results: Path) -> tuple[dict[tuple, list[float]], int]:
    """``{(model, *shape): [measured / shipped, ...]}`` over the calibrations made on a GPU of
    their base's model, each measurement once, against today's shipped rows of that GPU model's
    profile; and how many
    anchors were left out because their recorded base no longer equals today's row."""
    shipped: dict[tuple[str, str], dict[tuple, float]] = {}
    out, stale = {}, 0
    for _, meta in calibrations(results, other_model=False):
        cal = meta["calibration"]
        name = (meta.get("model") or {}).get("name")
        key = (name, sheet_of(cal["base_gpu"]))
        if key not in shipped:
            rows, _ = read_profile(str(default_profile(*key)))
            shipped[key] = {tuple(r[k] for k in SHAPE): float(r["latency_s"])
                            for r in grid_rows(rows).to_pylist()}
        for a in cal["anchors"]:
            shape = tuple(a[k] for k in SHAPE)
            base = shipped[key].get(shape)
            if base is None or not math.isclose(base, float(a["base_s"]), rel_tol=1e-6):
                stale += 1
                continue
            out.setdefault((name, *shape), []).append(float(a["measured_s"]) / base)
    return out, stale


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--min", type=int, default=3, help="fewest calibrations per row shown")
    ap.add_argument("--top", type=int, default=15, help="rows shown, farthest from 1 first")
    args = ap.parse_args(argv)
    rows, stale = remeasured(ROOT / "benchmarks" / "results")
    kept = [(k, v) for k, v in rows.items() if len(v) >= args.min]
    kept.sort(key=lambda kv: -abs(math.log(float(np.median(kv[1])))))
    print(f"{len(kept)} shipped rows re-measured by at least {args.min} calibrations "
          f"({stale} anchors left out: their shipped row has changed since)\n")
    print("| model | kind | graph | bs | width | KV | tokens | calibrations | median measured "
          "/ shipped | range |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (name, kind, graph, bs, width, kv, tokens), v in kept[:args.top]:
        print(f"| {name} | {kind} | {'graph' if graph else 'eager'} | {bs} | {width} | {kv} | "
              f"{tokens} | {len(v)} | {float(np.median(v)):.3f} | {min(v):.3f}-{max(v):.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
