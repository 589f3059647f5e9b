"""How fast each recorded live run's GPU ran its decode graphs, per sitting, against a profile.

A live run's per-step residuals mix two things: the profile's error at each shape and the
machine's own speed. The second shows as one offset over the whole sitting, the same for every
decode kind, from the first step. This prints, for each run and each sitting of it (a new
process, often on another GPU), the GPU, the median residual (``log(live / predicted)``, %) of
graph replays at 8 requests or fewer per decode kind, and of prefills: small graphs are where a
run's batches are mostly on or near the profile's grid, so the shapes' own error is small there.

    python benchmarks/machine_state.py benchmarks/results/h200-*/live_long_* benchmarks/results/h200-*/live_conv*

Each run is compared with the shipped profile of its model (``--profile`` for another). Runs of a
model with no shipped profile, runs without ``steps.parquet`` and sittings with fewer than
``MIN_STEPS`` small graph replays of a kind print ``-``. CPU only, a few seconds a run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.profile import load_profile  # noqa: E402
from backends.shipped import default_profile  # noqa: E402
from benchmarks.residual_by_shape import (KINDS, MIN_STEPS, SMALL_BS, residuals,  # noqa: E402
                                          sitting_starts)
from traces.errors import SpecschedError  # noqa: E402


def sittings(run: Path, n: int) -> list[tuple[int, int, str]]:
    """(first step, end step, GPU uuid's first 8 characters) of each sitting of a run. A run
    whose journal cannot be lined up with its steps is one sitting, on the summary's GPU, or
    ``several`` when its journal names more than one."""
    d = json.loads((run / "summary.json").read_text()).get("backend_detail") or {}
    segs = (d.get("journal") or {}).get("segments") or []
    starts = (0,) + sitting_starts(run, n)
    ends = starts[1:] + (n,)
    if len(starts) > 1:
        gpus = [(g.get("gpu") or {}).get("uuid", "") for g in segs]
    elif len({(g.get("gpu") or {}).get("uuid", "") for g in segs}) > 1:
        gpus = ["several"]
    else:
        gpus = [(d.get("gpu") or {}).get("uuid", "")]
    return [(a, b, (g or "?")[:8]) for a, b, g in zip(starts, ends, gpus)]


def state(s: dict[str, np.ndarray], a: int, b: int) -> dict[str, tuple[float, int] | None]:
    """Median residual and steps per kind over steps ``a:b``: decode kinds' graph replays at
    ``SMALL_BS`` requests or fewer, and every prefill."""
    m = np.zeros(len(s["kind"]), bool)
    m[a:b] = True
    m &= np.isfinite(s["resid"])
    out: dict[str, tuple[float, int] | None] = {}
    for k in KINDS:
        mk = m & (s["kind"] == k)
        if k != "prefill":
            mk &= s["graph"] & (s["bs_padded"] <= SMALL_BS)
        out[k] = (float(np.median(s["resid"][mk])), int(mk.sum())) if mk.sum() >= MIN_STEPS else None
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="results folders of live runs")
    ap.add_argument("--profile", type=Path, help="profile to compare with (default: each run's "
                    "model's shipped profile)")
    a = ap.parse_args(argv)
    tables: dict[str, object] = {}
    print("| run | model | policy | sitting | GPU | " +
          " | ".join(f"{k}{'' if k == 'prefill' else f' graphs bs <= {SMALL_BS}'} (steps)"
                     for k in KINDS) + " |")
    print("|---|---|---|---|---|" + "---|" * len(KINDS))
    for run in a.runs:
        if not (run / "steps.parquet").exists() or not (run / "summary.json").exists():
            continue
        summ = json.loads((run / "summary.json").read_text())
        model = summ.get("model")
        try:
            path = a.profile or default_profile(model)
        except SpecschedError:
            continue
        if str(path) not in tables:
            tables[str(path)] = load_profile(path)
        s = residuals(run, tables[str(path)])
        policy = summ.get("policy") or (summ.get("config") or {}).get("engine", {}).get("policy")
        for i, (x, y, gpu) in enumerate(sittings(run, len(s["kind"]))):
            st = state(s, x, y)
            cells = [f"{v[0]:+.2f} ({v[1]})" if v else "-" for v in st.values()]
            print(f"| {run.parent.name}/{run.name} | {model} | {policy} | {i + 1} | {gpu} | " +
                  " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
