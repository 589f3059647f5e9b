"""Re-fitting an earlier calibration's anchors to another version of its profile, on a CPU.

``specsched calibrate`` measures a few of a base profile's grid points (the *anchors*) on one
GPU and keeps them, with the machine and the time, in the calibrated file's metadata
(``specsched.calibration``).  When the base is re-recorded (a shipped profile gains rows), those
measurements still describe that GPU: ``specsched calibrate --anchors-from CALIBRATED`` re-fits
them to the new base (``backends.calibrate.fit_factors``: the median of measured / base per
pass group) instead of measuring again, so a live run recorded on that GPU can be judged against
the new base calibrated to its machine.  An anchor whose shape is not a grid row of the new base
is left out and listed (``refit.anchors_missing``); with none left it is an error.

The anchors must have been timed as the base's rows were: a base re-recorded under a changed
timing protocol needs a new calibration, and the re-fit cannot tell (the 70B tp-8 anchors of
2026-12-02b, measured before verify graphs were timed after a draft-extend capture, re-fit to
today's 70B profile at 0.98 for every graph group, as the protocol change predicts).  Nothing
here imports torch.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from backends.calibrate import (FIT_RULE, GROUPS, SHAPE, anchor_record, calibrated_metadata,
                                calibrated_copy, decode_kv_reach, factors_text, group_name,
                                prefill_summary)
from backends.calibrate_prior import fit_with_prior, prior_summary, prior_text
from backends.calibrate_residual import apply_residual, residual_text
from backends.shipped import file_sha256

__all__ = ["refit_calibration", "rebase_anchors", "check_anchors"]


def _key(r: dict) -> tuple:
    return (str(r["kind"]), bool(r["graph"]), int(r["bs"]), int(r["width"]), int(r["kv_len"]),
            int(r["tokens"]))


def check_anchors(kept: Any, source: str) -> list[dict]:
    """``kept`` (a calibration's ``anchors``) when every one has a known (kind, graph), integer
    shape fields and a finite ``measured_s`` > 0; else ``SpecschedError`` naming ``source`` and
    the first bad anchor (its position, from 0)."""
    from traces.errors import SpecschedError

    if not isinstance(kept, list):
        raise SpecschedError("specsched.calibration.anchors is not a list", path=str(source))
    for i, a in enumerate(kept):
        where = f"specsched.calibration.anchors[{i}]"
        if not isinstance(a, dict):
            raise SpecschedError(f"{where} is not an object", path=str(source))
        lacking = [k for k in (*SHAPE, "measured_s") if k not in a]
        if lacking:
            raise SpecschedError(f"{where} lacks {', '.join(lacking)}", path=str(source))
        if (str(a["kind"]), bool(a["graph"])) not in GROUPS or not isinstance(a["graph"], bool):
            raise SpecschedError(f"{where}: no pass group is kind {a['kind']!r} with graph "
                                 f"{a['graph']!r}", path=str(source))
        bad = [k for k in ("bs", "width", "kv_len", "tokens")
               if isinstance(a[k], bool) or not isinstance(a[k], int) or a[k] < 0]
        if bad:
            raise SpecschedError(f"{where}: {bad[0]} must be an integer >= 0, got {a[bad[0]]!r}",
                                 path=str(source))
        m = a["measured_s"]
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not math.isfinite(m) \
                or m <= 0:
            raise SpecschedError(f"{where}: measured_s must be a finite number > 0, got {m!r}",
                                 path=str(source))
    return kept


def rebase_anchors(kept: list[dict], grid: list[dict]) -> tuple[list[dict], list[dict]]:
    """The anchors ``kept`` (a calibration's) against the grid rows ``grid`` of another base:
    each one whose shape is a row there, its ``measured_s`` over that row's latency; and the
    shapes of those that are not."""
    base_of = {_key(r): r for r in grid}
    anchors, missing = [], []
    for a in kept:
        b = base_of.get(_key(a))
        if b is None:
            missing.append({k: a[k] for k in SHAPE})
            continue
        anchors.append(anchor_record(a, b["latency_s"], a["measured_s"], a.get("reps")))
    return anchors, missing


def refit_calibration(model: Any, source: str, base: str, out: str, *,
                      prefill: str = "auto", prior: str = "fitted",
                      residual: str = "group") -> dict[str, Any]:
    """Write ``base`` calibrated by the anchors measured for ``source`` (a calibrated profile)
    to ``out``; returns a summary.  ``prefill``: whether the prefill factor is applied
    (``backends.calibrate.settle_prefill``; the source's choice is not carried over);
    ``prior``: whether the fit is against the roofline's ratio between the anchors' GPU and the
    base's when their sheets differ, and how (``backends.calibrate_prior.PRIOR_MODES``).  Raises
    ``SpecschedError`` when ``source`` holds no calibration, is of another model, or none of
    its anchors is a grid row of ``base``.  ``residual``: ``group`` (one factor per group) or
    another of ``backends.calibrate_residual.RESIDUAL_FORMS`` (``tokens``: times each group's
    anchor residual by token count); recorded as the calibration's ``residual``."""
    from backends.profile import (_check_model, grid_rows, heldout_rows, line_rows, read_profile,
                                  write_profile)
    from traces.errors import SpecschedError

    _, smeta = read_profile(source)
    cal = smeta.get("calibration")
    if not isinstance(cal, dict) or not cal.get("anchors"):
        raise SpecschedError("holds no anchors of `specsched calibrate` (specsched.calibration)",
                             path=str(source))
    _check_model(model, smeta.get("model"), str(source))
    check_anchors(cal["anchors"], source)
    base_rows, meta = read_profile(base)
    _check_model(model, meta.get("model"), str(base))
    grid = grid_rows(base_rows).to_pylist()
    anchors, missing = rebase_anchors(cal["anchors"], grid)
    if not anchors:
        raise SpecschedError(f"none of the {len(cal['anchors'])} anchors of {Path(source).name} "
                             "is a grid row of this profile: nothing to fit", path=str(base))
    machine = cal.get("machine") or {}
    shape_prior, prior_note, factors = fit_with_prior(
        model, anchors, sorted({group_name(r["kind"], r["graph"]) for r in grid}),
        meta.get("gpu"), machine, prior=prior, prefill=prefill)
    shape_prior, residual_note = apply_residual(residual, anchors, factors, shape_prior)
    at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    calibration = {k: v for k, v in cal.items()
                   if k not in ("anchors", "factors", "refit", "prior", "rule", "residual")}
    if prior_note:
        calibration["prior"] = prior_note
    if residual_note is not None:
        calibration["residual"] = residual_note
    calibration.update(
        rule=FIT_RULE, base=Path(base).name, base_sha256=file_sha256(base),
        base_gpu=meta.get("gpu"), anchors=anchors, factors=factors,
        base_heldout_rows_dropped=heldout_rows(base_rows).num_rows,
        refit={"from": Path(source).name,
               "from_sha256": file_sha256(source),
               "from_base_sha256": cal.get("base_sha256"), "at": at,
               "anchors_used": len(anchors), "anchors_missing": missing,
               "rule": "the anchors' measured_s from the source's calibration, each divided by "
                       "this base's row of the same shape; fit as `specsched calibrate` fits, "
                       f"prefill {prefill}, prior {prior}, residual {residual}"})
    note = (f"calibrated by `specsched calibrate --anchors-from {Path(source).name}` at {at}: "
            f"{len(anchors)} anchors measured on {machine.get('name')} "
            f"{str(machine.get('uuid', ''))[:8]} at {cal.get('at')}, factors "
            + factors_text(factors) + prior_text(prior_note) + residual_text(residual_note))
    rows = calibrated_copy(grid, line_rows(base_rows).to_pylist(), factors, prior=shape_prior)
    out_meta = calibrated_metadata(meta, machine or meta.get("gpu"), calibration, [note])
    write_profile(rows, out, out_meta, inputs=(base, source))
    return {"rows": len(rows), "out": str(out), "anchors": len(anchors),
            "anchors_missing": len(missing),
            "factors": {g: round(f["factor"], 6) for g, f in factors.items()},
            "prefill": prefill_summary(factors),
            "prior": prior_summary(prior_note), "residual": residual,
            "decode_kv_reach": decode_kv_reach(anchors)}
