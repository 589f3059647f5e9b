"""The fidelity report: the statistics assembled into checks, with the noise floor beside each.

:func:`build_report` turns the reference run's steps and summary, the profile run's summary and
the profile's table into the JSON-able report: per-step statistics (``steps``), the profile's
held-out points (``heldout``), whole runs side by side (``runs``), the checks against
:data:`TARGETS` (``checks``, ``all_pass``), the recorded repeats of the reference and the floor
they put under every figure (``reference_repeats``, ``repeat_pct``), and what the profile model
does not capture (``not_captured``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from analysis.fidelity.lookup import GRIDS, col, kinds_present
from analysis.fidelity.reach import kv_reach
from analysis.fidelity.stats import (compare_runs, run_diff, heldout_errors, matched_shape_ratio,
                                     shape_floor, step_errors, summarize)
from backends.calibrate import own_measured
from backends.journal import gpu_name, gpu_uuid, sittings_used

__all__ = ["TARGETS", "BAND_MIN_STEPS", "NOT_CAPTURED", "build_report", "debiased_table",
           "gpu_models", "not_captured", "sitting_errors", "WHOLE_RUN_CHECKS"]

#: targets, in percent: per-step MAPE (overall, off the grid, per kind, the worst shape band,
#: the held-out points) and whole-run differences (absolute)
TARGETS = {"step_mape_pct": 3.0, "whole_run_pct": 3.0}

#: a shape band enters the worst-band check from this many steps: with per-step scatter of about
#: 1%, the MAPE of 30 steps is known to a few tenths of a percent, well inside the 3% target
BAND_MIN_STEPS = 30

#: whole-run checks: name -> (summary metric, quantile or None)
WHOLE_RUN_CHECKS = {
    "ttft_p50": ("ttft_s", "p50"), "ttft_p90": ("ttft_s", "p90"), "ttft_p99": ("ttft_s", "p99"),
    "tpot_p50": ("tpot_s", "p50"), "tpot_p90": ("tpot_s", "p90"), "tpot_p99": ("tpot_s", "p99"),
    "e2e_p50": ("e2e_s", "p50"), "e2e_p99": ("e2e_s", "p99"),
    "throughput": ("throughput_tok_s", None),
}

NOT_CAPTURED = (
    "run-to-run GPU variation: the profile holds one median per shape, a live pass varies "
    "(the profile's p10..p90 spread is reported below)",
    "per-request KV-length spread inside a batch: the profile measures uniform batches; a batch "
    "is looked up at its straggler-aware KV (the attention kernel's programs in waves over the "
    "resident slots the profile measured, the longest request's tail faster alone; on the 2D "
    "verify kernel, the longest request's own attention time, a fitted constant per KV token "
    "and layer; one straggler assumed, from kv_mean and kv_max), which leaves out where the GPU "
    "places each program and how the other requests' lengths spread",
    "ragged launches are interpolated between uniform widths (tokens / batch)",
    "prefill passes are looked up by total tokens and the attention-equivalent prefix (the same "
    "query-key pairs as one request); a profile measures one request per pass, so how several "
    "requests' GEMM and attention kernels differ from one request's is not captured",
    "the host's time to launch eager passes (prefill, widths or batches beyond the captured "
    "ones): the live executor and the profile both time the kernels queued, i.e. the GPU's time "
    "alone; an engine's own launch cost belongs in engine.scheduler_overhead_s",
    "host-side time between passes (scheduling, sampling, metadata building) beyond the engine's "
    "configured scheduler overhead",
    "clock and thermal state of the GPU while the profile was recorded versus now",
    "shapes outside the measured grid are extrapolated linearly",
)

#: the table grids of each kind (what the debiased what-if scales)
_GRIDS_OF_KIND = {k: tuple(dict.fromkeys((g, e))) for k, (g, e, _) in GRIDS.items()}


def _check(value: float | None, target: float, **extra) -> dict[str, Any]:
    """A check: passes when ``|value| <= target``; ``pass`` is None when there is no value."""
    return {"value_pct": value, "target_pct": target,
            "pass": None if value is None else bool(abs(value) <= target), **extra}


def _checks(steps: dict, runs: dict, heldout: dict | None) -> dict[str, dict]:
    t = TARGETS["step_mape_pct"]
    checks = {"step_mape_off_grid": _check(steps["mape_off_grid_pct"], t, steps=steps["off_grid_steps"]),
              "step_mape_all": _check(steps["mape_all_pct"], t, steps=steps["steps"])}
    for k, d in steps["by_kind"].items():
        checks[f"step_mape_{k}"] = _check(d["mape_pct"], t, steps=d["steps"])
    bands = [b for b in steps["by_shape"] if b["steps"] >= BAND_MIN_STEPS]
    if bands:
        b = max(bands, key=lambda b: b["mape_pct"])
        checks["step_mape_worst_band"] = _check(b["mape_pct"], t, band=b["shape"], steps=b["steps"])
    if heldout:
        checks["heldout_mape"] = _check(heldout["mape_pct"], t, points=heldout["points"])
    for name, (metric, q) in WHOLE_RUN_CHECKS.items():
        checks[name] = _check(run_diff(runs, metric, q), TARGETS["whole_run_pct"])
    return checks


def _step_floors(report: dict, full: dict, floors: list[np.ndarray]) -> None:
    """Put ``repeat_pct`` (the largest over the repeats of the mean shape floor,
    :func:`~analysis.fidelity.stats.shape_floor`) on every per-step figure and check."""
    a = full["_arrays"]

    def floor(mask: np.ndarray) -> float | None:
        vals = []
        for f in floors:
            x = f[mask]
            x = x[np.isfinite(x)]
            if len(x):
                vals.append(float(np.mean(x)))
        return max(vals) if vals else None

    s = report["steps"]
    s["repeat_off_grid_pct"] = floor(a["off"])
    s["repeat_all_pct"] = floor(a["ok"])
    for k, d in s["by_kind"].items():
        d["repeat_pct"] = floor(a["off"] & (a["kind"] == k))
    for ax, d in s["off_grid_axes"].items():
        d["repeat_pct"] = floor(a["off"] & a["pos"][ax])
    n = len(a["ok"])
    for b in s["by_shape"]:
        m = np.zeros(n, dtype=bool)
        m[a["bands"][b["shape"]]] = True
        b["repeat_pct"] = floor(m)
    if s.get("stragglers") and s["stragglers"]["steps"]:
        s["stragglers"]["repeat_pct"] = floor(a["stragglers"])
    c = report["checks"]
    c["step_mape_off_grid"]["repeat_pct"] = s["repeat_off_grid_pct"]
    c["step_mape_all"]["repeat_pct"] = s["repeat_all_pct"]
    for k, d in s["by_kind"].items():
        c[f"step_mape_{k}"]["repeat_pct"] = d["repeat_pct"]
    if "step_mape_worst_band" in c:
        band = c["step_mape_worst_band"]["band"]
        c["step_mape_worst_band"]["repeat_pct"] = next(
            b["repeat_pct"] for b in s["by_shape"] if b["shape"] == band)


def _whole_run_floors(report: dict, repeats: list[dict]) -> None:
    for name, (metric, q) in WHOLE_RUN_CHECKS.items():
        diffs = [run_diff(r["runs"], metric, q) for r in repeats]
        diffs = [abs(d) for d in diffs if d is not None]
        report["checks"][name]["repeat_pct"] = max(diffs) if diffs else None


def build_report(reference_steps: pa.Table, reference_summary: dict, profile_summary: dict,
                 table, *, worst: int = 20,
                 repeats: tuple | list = ()) -> dict[str, Any]:
    """The fidelity report (a JSON-able dict) from the two runs and the profile's table.

    ``repeats``: ``(path, summary, steps)`` of further recorded runs of the reference (same trace
    and configuration): each one's whole-run differences from the reference and matched-shape
    ratio go in ``reference_repeats``, and every figure and check gets ``repeat_pct``, the
    largest difference a repeat shows there (whole runs: the metric's difference; per-step
    figures: the mean, over the figure's steps, of how far the repeat moves the median pass of
    each step's shape)."""
    lookup = str(profile_summary.get("kv_lookup") or "straggler")
    full = step_errors(reference_steps, table, worst=worst, _full=True, kv_lookup=lookup)
    arrays = full.pop("_arrays")
    runs = compare_runs(reference_summary, profile_summary)
    heldout = heldout_errors(table)
    checks = _checks(full, runs, heldout)
    spread = _spread(table)
    src = table.source if isinstance(table.source, dict) else {}
    nc = not_captured(table, full) + starved_notes(src, reference_summary)
    if lookup == "fluid" and full.get("fluid_steps"):
        nc.insert(0, f"per-step figures look {full['fluid_steps']} MLA verify and draft-extend "
                     f"steps up as the simulated run did (backend.kv_lookup fluid, an MLA "
                     f"profile's default): from every request's KV in launch order, which the "
                     f"reference run recorded (steps.parquet member_kv; backends/mla_fluid.py)")
    elif lookup == "fluid":
        nc.insert(0, "per-step figures look the live steps up by the straggler rule: this "
                     "reference run's steps keep each pass's mean and longest KV only (runs "
                     "recorded before 2026-12-03 have no member_kv), while the simulated "
                     "run (backend.kv_lookup fluid, an MLA profile's default) looked its MLA "
                     "verify and draft-extend launches up from every request's KV in launch order "
                     "(backends/mla_fluid.py), so only the whole-run checks measure that lookup")
    if spread is not None:
        nc.insert(1, f"median p10..p90 spread of the profile's measurements: {spread:.2f}%")
    report = {"steps": full, "heldout": heldout, "runs": runs, "checks": checks,
              "not_captured": nc,
              "profile": {k: table.source.get(k) for k in ("file", "sha256", "gpu", "versions", "kernels")}
              if isinstance(table.source, dict) else {}}
    cal = table.source.get("calibration") if isinstance(table.source, dict) else None
    if isinstance(cal, dict):  # a `specsched calibrate` output: where, when, the fit
        report["profile"]["calibration"] = {
            "gpu": (cal.get("machine") or {}).get("name"), "at": cal.get("at"),
            "base": cal.get("base"), "anchors": len(cal.get("anchors") or []),
            "factors": {g: f.get("factor") for g, f in (cal.get("factors") or {}).items()}}
        kept = {g: own_measured(f)  # None: no anchor of its own
                for g, f in (cal.get("factors") or {}).items() if f.get("applied") is False}
        if kept:  # fitted but not applied (backends.calibrate.settle_prefill)
            report["profile"]["calibration"]["not_applied"] = kept
        reach = kv_reach(cal, reference_steps, arrays)
        if reach is not None:  # how much of the run lies past the anchors' KV
            report["profile"]["calibration"]["kv_reach"] = reach
        res = cal.get("residual")
        if isinstance(res, dict):  # calibrate --residual tokens (backends.calibrate_residual)
            report["profile"]["calibration"]["residual"] = res
        ref = cal.get("refit")
        if isinstance(ref, dict):  # calibrate --anchors-from (backends.calibrate_refit)
            report["profile"]["calibration"]["refit_from"] = ref.get("from")
        rec = cal.get("recentred")
        if isinstance(rec, dict):  # calibrate --from-run (backends.calibrate_from_run)
            report["profile"]["calibration"]["recentred"] = {
                "run": rec.get("run"), "factors": {g: f.get("factor") for g, f in
                                                   (rec.get("groups") or {}).items()}}
    report["machines"] = recording_machines(src, reference_summary)
    models = gpu_models(src, reference_summary)
    if models:
        report["gpu_models"] = models
    sittings = sitting_errors(arrays, reference_summary)
    if sittings:
        report["by_sitting"] = sittings
    if repeats:
        reps = [{"run": path, "runs": compare_runs(reference_summary, summary),
                 "matched_shape_ratio": matched_shape_ratio(reference_steps, steps)}
                for path, summary, steps in repeats]
        report["reference_repeats"] = reps
        _whole_run_floors(report, reps)
        _step_floors(report, {**full, "_arrays": arrays},
                     [shape_floor(reference_steps, steps) for _, _, steps in repeats])
    report["all_pass"] = all(c["pass"] for c in checks.values() if c["pass"] is not None)
    return report


def starved_notes(source: dict, reference_summary: dict) -> list[str]:
    """A line for each side whose timed runs outran their hold on every attempt (their times
    include gaps where the GPU waited for the host: docs/aiter.md, *Timing*)."""
    out = []
    detail = reference_summary.get("backend_detail")
    timing = (((detail.get("runner") or {}).get("timing") or {})
              if isinstance(detail, dict) else {})
    n = timing.get("timed_runs_still_starved")
    if n:
        out.append(f"the reference run has {n} timed runs that outran their hold on every "
                   f"attempt ({timing.get('still_starved_by_kind')}): their times include host "
                   "gaps, so they are not the GPU's alone")
    for note in source.get("notes") or []:
        held = note.get("held_timing") if isinstance(note, dict) else None
        if held and held.get("timed_runs_still_starved"):
            out.append(f"the profile has {held['timed_runs_still_starved']} timed runs that "
                       f"outran their hold on every attempt ({held.get('still_starved_by_kind')})"
                       ": the medians of those points may include host gaps")
    return out


def _profile_gpus(source: dict) -> list[str | None]:
    """The GPUs a profile's rows come from: the calibrating GPU for a calibrated profile, every
    sitting's GPU for one grown from a journal, else the GPU it names."""
    cal = source.get("calibration")
    if isinstance(cal, dict) and cal.get("machine"):
        return [gpu_uuid(cal["machine"])]
    for note in source.get("notes") or []:
        j = note.get("journal") if isinstance(note, dict) else None
        if isinstance(j, dict) and j.get("gpus"):
            return sorted(str(g) for g in j["gpus"])
    return [gpu_uuid(source.get("gpu"))]


def _journal_sittings(summary: dict) -> tuple[list[dict], int] | None:
    """The sittings of a recorded run's journal that added calls, and its calls in all; None
    for a run recorded without a journal."""
    detail = summary.get("backend_detail")
    j = detail.get("journal") if isinstance(detail, dict) else None
    if not isinstance(j, dict) or not j.get("segments"):
        return None
    total = int(j.get("replayed_calls") or 0) + int(j.get("live_calls") or 0)
    return sittings_used(j["segments"], total), total


def _run_gpus(summary: dict) -> list[str | None]:
    """The GPUs a recorded run's executor calls come from: every sitting of its journal that
    added calls, else the GPU it names."""
    detail = summary.get("backend_detail")
    if not isinstance(detail, dict):
        return [None]
    sittings = _journal_sittings(summary)
    if sittings is not None:
        return sorted({gpu_uuid(s.get("gpu")) for s in sittings[0]}, key=str) or [None]
    return [gpu_uuid(detail.get("gpu"))]


def sitting_errors(arrays: dict, summary: dict) -> list[dict] | None:
    """Per-step error over each sitting of a reference run resumed from its journal (the steps
    each sitting's GPU measured: the journal's calls are the run's steps, in order), overall and
    by kind; None for a run recorded in one sitting. A machine's offset shows as a sitting whose
    every kind is off by about the same amount."""
    sittings = _journal_sittings(summary)
    n = len(arrays["ok"])
    if sittings is None or len(sittings[0]) < 2 or sittings[1] != n:
        return None
    used = sittings[0]
    firsts = [int(s.get("first_call", 0)) for s in used] + [n]
    err, ok, kind = arrays["err"], arrays["ok"], arrays["kind"]
    out = []
    for s, a, b in zip(used, firsts, firsts[1:]):
        m = np.zeros(n, dtype=bool)
        m[a:b] = True
        m &= ok
        out.append({"gpu": gpu_name(s.get("gpu")), "at": s.get("at"), "first_step": a,
                    **summarize(err[m]),
                    "by_kind": {k: summarize(err[m & (kind == k)])
                                for k in kinds_present(kind[m])}})
    return out


def recording_machines(source: dict, reference_summary: dict) -> dict[str, Any]:
    """Which GPUs recorded the profile (for a calibrated one, the GPU it was calibrated on;
    for one grown over several sittings, each sitting's) and which the reference run, by the
    GPUs' own UUIDs. ``same_gpu`` is True when both sides are one and the same GPU, False
    when they have none in common (``shared_gpus`` names any they have), ``None`` when a side
    predates UUIDs (before 2026-12-01e)."""
    pg, rg = _profile_gpus(source), _run_gpus(reference_summary)
    if None in pg or None in rg:
        same, shared = None, []
    else:
        shared = sorted(set(pg) & set(rg))
        same = set(pg) == set(rg) and len(pg) == 1

    def ids(g: list) -> str | None:
        return None if None in g else ", ".join(g)

    return {"profile_gpu": ids(pg), "reference_gpu": ids(rg), "same_gpu": same,
            "shared_gpus": shared}


def gpu_models(source: dict, reference_summary: dict) -> dict[str, str] | None:
    """``{"profile": name, "reference": name}`` when the profile's GPU (for a calibrated one,
    the calibrating GPU) and the reference run's are different models (by their GPU sheets,
    ``backends.calibrate_prior.sheet_of``, else by name); None when they are one model or a
    side does not name its GPU."""
    from backends.calibrate_prior import sheet_of

    detail = reference_summary.get("backend_detail")
    ref = (detail.get("gpu") if isinstance(detail, dict) else None) or {}
    prof = source.get("gpu") or {}
    names = [g.get("name") if isinstance(g, dict) else None for g in (prof, ref)]
    if not all(names):
        return None
    a, b = (sheet_of(n) or n for n in names)
    return None if a == b else {"profile": str(names[0]), "reference": str(names[1])}


def not_captured(table, steps_report: dict) -> list[str]:
    """What the profile model leaves out, in general and as found in this profile and run."""
    items = list(NOT_CAPTURED)
    if not getattr(table, "attention", None):
        items[1] = ("per-request KV-length spread inside a batch: this profile carries no "
                    "attention-kernel occupancy, so batches are looked up at their mean KV "
                    "length, while the attention kernel's time follows the longest sequence when "
                    "its grid fits in one wave")
    src = table.source if isinstance(table.source, dict) else {}
    notes = src.get("notes")
    if notes and not any(isinstance(n, str) and "queued" in n for n in notes):
        items.append("this profile was recorded before queued timing: its eager and prefill rows "
                     "include the recording host's launch rate (about 30-60 us per kernel "
                     "launch), which a live run today does not; re-record it with `specsched profile`")
    holes = {k: v for k, v in (src.get("holes_filled") or {}).items() if v}
    if holes:
        items.append(f"grid points not measured, filled by rule: {holes}")
    for k, d in (src.get("eager_derived") or {}).items():
        if d.get("derived_points"):
            items.append(f"eager {k}: {d['derived_points']} points derived as graph + "
                         f"{d.get('overhead_s', 0) * 1e6:.1f} us overhead"
                         + (f" ({d['overhead_rule']})" if d.get("overhead_rule") else ""))
    for w in src.get("warnings", []) or []:
        items.append(w)
    if steps_report.get("out_of_grid_steps"):
        items.append(f"{steps_report['out_of_grid_steps']} reference steps lie outside the "
                     "profile's grid (extrapolated)")
    for k, n in (steps_report.get("not_predicted") or {}).items():
        items.append(f"{n} reference {k} steps: the profile has no lookup for kind {k!r}, so "
                     "they are counted, not scored")
    if src.get("monotone_adjusted"):
        items.append("measured points moved by the isotonic fit along KV / prefill tokens: "
                     f"{src['monotone_adjusted']}")
    return items


def _spread(table) -> float | None:
    path = table.source.get("file") if isinstance(table.source, dict) else None
    if not path:
        return None
    from backends.profile import grid_rows, read_profile

    rows = grid_rows(read_profile(path)[0])
    lat = col(rows, "latency_s")
    return float(np.median((col(rows, "p90_s") - col(rows, "p10_s")) / lat) * 100)


def debiased_table(table, by_kind: dict[str, dict]):
    """``table`` with each kind's values divided by ``1 + its time-weighted signed error`` (the
    kind's summed predicted over summed measured time, minus 1: ``time_signed_pct``; reports
    written before it carry only ``mean_signed_pct``, used then), for every kind in ``by_kind``
    the table has grids for: the same profile without its per-kind bias in total time against
    the reference.  Returns ``(table, factors)``.

    Time-weighted, not the mean of per-step errors: when a kind's error grows with its pass
    length (prefills of many tokens), the mean understates the bias a queue sees."""
    from dataclasses import replace

    from backends.latency_table import Grid

    factors = {}
    for kind in by_kind:
        if kind in _GRIDS_OF_KIND:
            d = by_kind.get(kind) or {}
            bias = d.get("time_signed_pct", d.get("mean_signed_pct"))
            factors[kind] = 1.0 if bias is None else 1.0 / (1.0 + bias / 100.0)
    grids = {}
    for kind, f in factors.items():
        for name in _GRIDS_OF_KIND[kind]:
            g = getattr(table, name)
            grids[name] = Grid(axes=g.axes, values=g.values * f)
    return replace(table, **grids, source={**table.source, "debiased": factors}), factors
