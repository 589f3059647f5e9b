"""Does a calibration read its GPU as the live runs on that GPU do? One row per pairing.

``specsched calibrate`` measures a few of a profile's grid points (anchors) on a GPU and scales
each pass group by the median of measured / profile. A live run on the same GPU shows that
GPU's speed as the median residual of its small graph replays and of its prefills against the
same profile (``benchmarks/machine_state.py``). This pairs every recorded calibration with every
sitting of a live run of its model on the same GPU (by UUID) and prints, per group, what the
calibration read (its factor, as a %) beside what the sitting showed, and for prefill whether
scaling by the calibration's factor brought the profile nearer the live prefills or further:

    python benchmarks/calibration_vs_live.py benchmarks/results

The anchors are re-fitted to the model's shipped profile of today, as
``specsched calibrate --anchors-from`` does (``backends.calibrate_refit``), so both columns are
against the same profile; an anchor that is not a grid row of it is left out. CPU only.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.calibrate import fit_factors, group_name  # noqa: E402
from backends.calibrate_refit import rebase_anchors  # noqa: E402
from backends.profile import grid_rows, load_profile, read_profile  # noqa: E402
from backends.shipped import default_profile  # noqa: E402
from benchmarks.machine_state import sittings, state  # noqa: E402
from benchmarks.residual_by_shape import residuals  # noqa: E402
from traces.errors import SpecschedError  # noqa: E402

#: machine_state's kinds -> the calibration group read beside it (graph replays; prefill)
GROUP_OF = {"verify": "verify_graph", "draft": "draft_graph", "draft_extend": "extend_graph",
            "prefill": "prefill"}


def refit(cal_path: Path, base_path: str) -> dict[str, float]:
    """The calibration's factor per group, its anchors re-fitted to ``base_path``, as
    ``log(factor)`` in % (the unit of the live residuals)."""
    _, meta = read_profile(str(cal_path))
    base, _ = read_profile(base_path)
    anchors, _ = rebase_anchors(meta["calibration"]["anchors"], grid_rows(base).to_pylist())
    if not anchors:
        return {}
    fit = fit_factors(anchors, {group_name(a["kind"], a["graph"]) for a in anchors})
    return {g: math.log(v["factor"]) * 100 for g, v in fit.items()}  # each from its own anchors


def pairings(root: Path):
    """(calibrated profile, its model, GPU uuid prefix) and the live runs under ``root``; a
    calibration that names no GPU, or repeats an earlier one's measurements, is left out."""
    cals, runs, seen = [], [], set()
    for p in sorted(root.rglob("*calibrated*.parquet")):
        _, meta = read_profile(str(p))
        cal = meta.get("calibration")
        uuid = ((cal or {}).get("machine") or {}).get("uuid") if isinstance(cal, dict) else None
        if not uuid or not cal.get("anchors"):
            continue  # no anchors, or a GPU the calibration did not name (nothing to pair by)
        measured = tuple(float(a["measured_s"]) for a in cal["anchors"])
        if measured in seen:
            continue  # the same measurements re-fitted to another base (--anchors-from)
        seen.add(measured)
        cals.append((p, (meta.get("model") or {}).get("name"), uuid[:8]))
    for s in sorted(root.rglob("summary.json")):
        if (s.parent / "steps.parquet").exists():
            runs.append(s.parent)
    return cals, runs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, help="folder holding calibrated profiles and live runs")
    a = ap.parse_args(argv)
    try:
        cals, runs = pairings(a.root)
        by_gpu: dict[tuple[str, str], list] = {}
        tables: dict[str, object] = {}  # each model's shipped profile, loaded once
        for run in runs:
            model = json.loads((run / "summary.json").read_text()).get("model")
            try:
                path = str(default_profile(model))
            except SpecschedError:
                continue
            s = None
            for i, (x, y, gpu) in enumerate(sittings(run, _steps(run))):
                if not any(c[1] == model and c[2] == gpu for c in cals):
                    continue
                if path not in tables:
                    tables[path] = load_profile(path)
                s = residuals(run, tables[path]) if s is None else s
                by_gpu.setdefault((model, gpu), []).append((run, i + 1, state(s, x, y)))
    except SpecschedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print("Per group: calibration factor / live sitting's median residual, both log %, against "
          "today's shipped profile. Prefill: |live - factor| against |live| (nearer or further).\n")
    print("| calibration | GPU | live run, sitting | verify graph | draft graph | draft-extend graph "
          "| prefill | prefill after scaling |")
    print("|---|---|---|---|---|---|---|---|")
    nearer = further = 0
    gaps: dict[str, list[tuple[float, float]]] = {g: [] for g in GROUP_OF.values()}
    for cal, model, gpu in cals:
        live = by_gpu.get((model, gpu), [])
        if not live:
            continue
        fac = refit(cal, str(default_profile(model)))
        for run, sitting, st in live:
            cells = []
            for k, g in GROUP_OF.items():
                f, v = fac.get(g), st.get(k)
                if f is not None and v is not None:
                    gaps[g].append((abs(v[0] - f), abs(v[0])))
                cells.append(f"{_f(f)} / {_f(v[0] if v else None)}")
            f, v = fac.get("prefill"), st.get("prefill")
            if f is not None and v is not None:
                after, before = abs(v[0] - f), abs(v[0])
                verdict = "nearer" if after < before else "further"
                nearer += after < before
                further += after >= before
                cells.append(f"{after:.2f} vs {before:.2f} ({verdict})")
            else:
                cells.append("-")
            print(f"| {cal.parent.name}/{cal.name} | {gpu} | {run.parent.name}/{run.name}, "
                  f"{sitting} | " + " | ".join(cells) + " |")
    print(f"\nPrefill scaled by the calibration's factor: nearer the live sitting in {nearer}, "
          f"further in {further} pairings.")
    print("Mean |live - calibration| against mean |live| (the shipped profile's own offset), "
          "per group: " + "; ".join(
              f"{g} {sum(x for x, _ in v) / len(v):.2f} vs {sum(y for _, y in v) / len(v):.2f} "
              f"({len(v)})" for g, v in gaps.items() if v) + ".")
    return 0


def _steps(run: Path) -> int:
    import pyarrow.parquet as pq
    return pq.ParquetFile(run / "steps.parquet").metadata.num_rows


def _f(x) -> str:
    return "-" if x is None else f"{x:+.2f}"


if __name__ == "__main__":
    sys.exit(main())
