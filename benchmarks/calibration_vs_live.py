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
against the same profile; an anchor that is not a grid row of it is left out.

A sitting's median prefill residual mixes the GPU's speed with the profile's own error between
its grid tokens, which depends on the workload's prompt lengths (``prefill_between_grid.py``:
up to +-6% on the 8B between 128 and 1,024 tokens). The last column reads the GPU alone: the
median over the sitting's single-request prefills within 1% of a grid token, where the profile
replays its own measurement; calibration is scored against that too. CPU only.

``--prefill-anchors`` prints instead, per calibration, each prefill anchor's own reading (tokens,
prefix, measured / today's profile as log %) beside the median residual of the live prefills at
the grid's tokens on that GPU: which anchor reads the GPU as the workload's prefills do.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.calibrate import fit_factors, group_name  # noqa: E402
from backends.calibrate_refit import rebase_anchors  # noqa: E402
from backends.profile import grid_rows, load_profile, read_profile  # noqa: E402
from backends.shipped import default_profile  # noqa: E402
from benchmarks.machine_state import sittings, state  # noqa: E402
from benchmarks.prefill_between_grid import MIN_NEAR, grid_tokens, on_grid, single_prefills  # noqa: E402
from benchmarks.residual_by_shape import residuals  # noqa: E402
from traces.errors import SpecschedError  # noqa: E402

#: machine_state's kinds -> the calibration group read beside it (graph replays; prefill)
GROUP_OF = {"verify": "verify_graph", "draft": "draft_graph", "draft_extend": "extend_graph",
            "prefill": "prefill"}


def rebased(cal_path: Path, base_path: str) -> list[dict]:
    """The calibration's anchors re-fitted to ``base_path`` (those that are grid rows of it)."""
    _, meta = read_profile(str(cal_path))
    base, _ = read_profile(base_path)
    anchors, _ = rebase_anchors(meta["calibration"]["anchors"], grid_rows(base).to_pylist())
    return anchors


def refit(cal_path: Path, base_path: str, anchors: list[dict] | None = None) -> dict[str, float]:
    """The calibration's factor per group, its anchors re-fitted to ``base_path`` (or
    ``anchors``, already re-fitted), as ``log(factor)`` in % (the unit of the live residuals)."""
    anchors = rebased(cal_path, base_path) if anchors is None else anchors
    if not anchors:
        return {}
    fit = fit_factors(anchors, {group_name(a["kind"], a["graph"]) for a in anchors})
    return {g: math.log(v["factor"]) * 100 for g, v in fit.items()}  # each from its own anchors


def pairings(root: Path):
    """(calibrated profile, its model, GPU uuid prefix) and the live runs under ``root``; a
    calibration that names no GPU, repeats an earlier one's measurements, or was made on
    another GPU model than its base's (an H100 calibrating an H200 profile: a question of its
    own, docs/aiter.md, *On another GPU model*) is left out."""
    from backends.calibrate_prior import other_models

    cals, runs, seen = [], [], set()
    for p in sorted(root.rglob("*calibrated*.parquet")):
        _, meta = read_profile(str(p))
        cal = meta.get("calibration")
        uuid = ((cal or {}).get("machine") or {}).get("uuid") if isinstance(cal, dict) else None
        if not uuid or not cal.get("anchors"):
            continue  # no anchors, or a GPU the calibration did not name (nothing to pair by)
        if other_models(cal.get("base_gpu"), cal.get("machine")):
            continue  # another GPU model than the base's
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
    ap.add_argument("--prefill-anchors", action="store_true",
                    help="per calibration, each prefill anchor's reading beside the live "
                         "prefills at the grid's tokens on its GPU")
    a = ap.parse_args(argv)
    try:
        cals, runs = pairings(a.root)
        by_gpu: dict[tuple[str, str], list] = {}
        tables: dict[str, object] = {}  # each model's shipped profile, loaded once
        grids: dict[str, object] = {}  # and its prefill grid tokens
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
                    grids[path] = grid_tokens(read_profile(path)[0])
                s = residuals(run, tables[path]) if s is None else s
                by_gpu.setdefault((model, gpu), []).append(
                    (run, i + 1, state(s, x, y), on_grid_prefill(s, x, y, grids[path])))
    except SpecschedError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.prefill_anchors:
        return print_prefill_anchors(cals, by_gpu)
    print("Per group: calibration factor / live sitting's median residual, both log %, against "
          "today's shipped profile. Prefill: |live - factor| against |live| (nearer or further); "
          "on grid tokens: the same against the sitting's prefills at the grid's tokens.\n")
    print("| calibration | GPU | live run, sitting | verify graph | draft graph | draft-extend graph "
          "| prefill | prefill after scaling | prefill on grid tokens (prefills) | on grid tokens after scaling |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    nearer = further = 0
    per_model: dict[str, dict[Path, list[tuple[float, float]]]] = {}  # prefill (factor, live)
    on = {"nearer": 0, "further": 0, "gaps": []}
    gaps: dict[str, list[tuple[float, float]]] = {g: [] for g in GROUP_OF.values()}
    for cal, model, gpu in cals:
        live = by_gpu.get((model, gpu), [])
        if not live:
            continue
        fac = refit(cal, str(default_profile(model)))
        for run, sitting, st, og in live:
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
                per_model.setdefault(model, {}).setdefault(cal, []).append((f, v[0]))
                cells.append(f"{after:.2f} vs {before:.2f} ({verdict})")
            else:
                cells.append("-")
            if f is not None and og is not None:
                after, before = abs(og[0] - f), abs(og[0])
                on["nearer" if after < before else "further"] += 1
                on["gaps"].append((after, before))
                cells += [f"{og[0]:+.2f} ({og[1]})",
                          f"{after:.2f} vs {before:.2f} ({'nearer' if after < before else 'further'})"]
            else:
                cells += ["-", "-"]
            print(f"| {cal.parent.name}/{cal.name} | {gpu} | {run.parent.name}/{run.name}, "
                  f"{sitting} | " + " | ".join(cells) + " |")
    print(f"\nPrefill scaled by the calibration's factor: nearer the live sitting in {nearer}, "
          f"further in {further} pairings.")
    print("Mean |live - calibration| against mean |live| (the shipped profile's own offset), "
          "per group: " + "; ".join(
              f"{g} {sum(x for x, _ in v) / len(v):.2f} vs {sum(y for _, y in v) / len(v):.2f} "
              f"({len(v)})" for g, v in gaps.items() if v) + ".")
    print_prefill_by_model(per_model)
    if on["gaps"]:
        g = on["gaps"]
        print(f"Prefill on the grid's tokens: nearer in {on['nearer']}, further in {on['further']}; "
              f"mean |live - calibration| {sum(a for a, _ in g) / len(g):.2f} vs mean |live| "
              f"{sum(b for _, b in g) / len(g):.2f} ({len(g)}).")
    return 0


def print_prefill_by_model(per_model: dict[str, dict[Path, list[tuple[float, float]]]]) -> None:
    """Per model, each calibration's prefill factor against its live sittings' prefill offset
    (means over its sittings): the correlation over calibrations, and the mean distance from the
    live offset scaled by the factor and not (what ``backends.calibrate.settle_prefill`` rests
    on)."""
    print("\nPrefill per model, one point per calibration (its sittings averaged): correlation "
          "of the factor with the live offset; mean |live - factor| against mean |live|.")
    for model, cals in sorted(per_model.items()):
        pts = [(float(np.mean([f for f, _ in v])), float(np.mean([x for _, x in v])))
               for v in cals.values()]
        f, x = np.array(pts).T
        r = float(np.corrcoef(f, x)[0, 1]) if len(pts) > 2 else float("nan")
        print(f"- {model}: {len(pts)} calibrations, correlation {r:+.2f}; "
              f"{np.mean(np.abs(x - f)):.2f} vs {np.mean(np.abs(x)):.2f} points")


def print_prefill_anchors(cals, by_gpu) -> int:
    """Each calibration's prefill anchors, re-fitted to today's profile, beside the live
    prefills at the grid's tokens of the sittings on its GPU (``--prefill-anchors``)."""
    print("Prefill anchors, measured / today's shipped profile (log %), beside the live sittings' "
          "median residual of single-request prefills at the grid's tokens on the same GPU.\n")
    print("| calibration | GPU | anchors: tokens @ prefix: reading | factor | live on grid tokens |")
    print("|---|---|---|---|---|")
    for cal, model, gpu in cals:
        live = [og for _, _, _, og in by_gpu.get((model, gpu), []) if og is not None]
        if not live:
            continue
        base = str(default_profile(model))
        anchors = rebased(cal, base)
        pre = sorted((int(x["tokens"]), int(x["kv_len"]),
                      math.log(float(x["measured_s"]) / float(x["base_s"])) * 100)
                     for x in anchors if x["kind"] == "prefill")
        if not pre:
            continue
        fac = refit(cal, base, anchors).get("prefill")
        cells = ", ".join(f"{t:,} @ {k:,}: {v:+.2f}" for t, k, v in pre)
        print(f"| {cal.parent.name}/{cal.name} | {gpu} | {cells} | {_f(fac)} | "
              + ", ".join(f"{og[0]:+.2f} ({og[1]})" for og in live) + " |")
    return 0


def on_grid_prefill(s, a: int, b: int, grid) -> tuple[float, int] | None:
    """Median residual and count of steps ``a:b``'s single-request prefix-0 prefills within 1%
    of a grid token; ``None`` under ``MIN_NEAR`` of them."""
    m = np.zeros(len(s["kind"]), bool)
    m[a:b] = True
    m &= single_prefills(s)
    m[m] = on_grid(s["tokens"][m], grid)
    return (float(np.median(s["resid"][m])), int(m.sum())) if m.sum() >= MIN_NEAR else None


def _steps(run: Path) -> int:
    import pyarrow.parquet as pq
    return pq.ParquetFile(run / "steps.parquet").metadata.num_rows


def _f(x) -> str:
    return "-" if x is None else f"{x:+.2f}"


if __name__ == "__main__":
    sys.exit(main())
