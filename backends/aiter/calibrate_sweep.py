"""``specsched calibrate`` on the GPU: measure a base profile's anchors here and write it scaled.

:func:`run_calibrate` opens the live executor, measures the anchors ``backends.calibrate``
chooses among the base's grid rows with the grid's protocol (``measure_points``: a graph captured
per (batch size, width), ``settle_s`` untimed, ``warmup`` untimed and ``reps`` timed replays;
eager and prefill ``eager_reps`` timed launches), fits one factor per (kind, graph) group and
writes the base's grid rows scaled by it, with the anchors and the fit in the metadata key
``specsched.calibration``.  The base's held-out rows are not carried over (they were measured on
another occasion); ``heldout`` > 0 measures new ones here.

**The time budget.**  Anchors are measured in *chunks* (the points of one captured graph, or of
one eager or prefill group), taken round-robin over the groups so that a cut-off budget still
leaves every group its first chunk.  Before each chunk its cost is estimated (1.5 times the last
chunk of the same category, graph, eager or prefill, per point; a category not yet measured: 1.5
times the last chunk of any) and the chunk is skipped when the elapsed time plus that plus
:data:`RESERVE_S` would pass the budget; the fit uses what was measured.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from backends.calibrate import (FIT_RULE, SHAPE, anchor_record, calibrated_metadata,
                                calibrated_copy, choose_anchors, factors_text, group_name,
                                decode_kv_reach, kv_reach_note, prefill_summary)
from backends.calibrate_prior import fit_with_prior, prior_summary, prior_text
from backends.calibrate_residual import apply_residual, residual_line, residual_text
from backends.heldout import SECTIONS, HeldoutPoint, choose_heldout, grid_span
from backends.aiter.heldout_sweep import _graph_key, _kernel_widths, measure_points
from backends.aiter.profiling import ProfileSpec, open_runner
from backends.shipped import file_sha256

__all__ = ["RESERVE_S", "run_calibrate", "chunks_round_robin"]

#: Seconds kept free at the end of the budget (writing the file, releasing the GPU).
RESERVE_S = 8.0


def _chunk_key(p: HeldoutPoint) -> tuple:
    if p.kind == "prefill":
        return ("prefill",)
    return _graph_key(p) if p.graph else ("eager", p.kind)


def chunks_round_robin(points: list[HeldoutPoint]) -> list[list[HeldoutPoint]]:
    """``points`` (sorted) cut into chunks (one graph's points, one eager kind's, prefill's),
    ordered round-robin over the (kind, graph) groups in ``SECTIONS`` order (verify graph first):
    every group's first chunk, then every group's second, ..."""
    per_group: dict[str, list[list[HeldoutPoint]]] = {}
    last: dict[str, tuple] = {}
    for p in points:
        g = group_name(p.kind, p.graph)
        k = _chunk_key(p)
        if last.get(g) != k:
            per_group.setdefault(g, []).append([])
            last[g] = k
        per_group[g][-1].append(p)
    order = [per_group[g] for g in SECTIONS if g in per_group]
    out = []
    for i in range(max((len(c) for c in order), default=0)):
        out += [c[i] for c in order if i < len(c)]
    return out


def _category(chunk: list[HeldoutPoint]) -> str:
    p = chunk[0]
    return "prefill" if p.kind == "prefill" else ("graph" if p.graph else "eager")


def _measure_in_budget(runner: Any, points: list[HeldoutPoint], spec: ProfileSpec, *,
                       deadline: float, progress, what: str) -> tuple[list[dict], list[dict]]:
    """Measure ``points`` chunk by chunk while the estimated cost fits before ``deadline``
    (a ``time.perf_counter()`` value); returns (rows measured, points skipped)."""
    rows: list[dict] = []
    skipped: list[dict] = []
    per_point: dict[str, float] = {}
    last_any: float | None = None
    done = 0
    for chunk in chunks_round_robin(points):
        cat = _category(chunk)
        rate = per_point.get(cat, last_any)
        est = 0.0 if rate is None else 1.5 * rate * len(chunk)
        if time.perf_counter() + est > deadline:
            skipped += [dict(zip(("kind", "graph", "bs", "width", "kv_len", "tokens"), p.key))
                        for p in chunk]
            continue
        t0 = time.perf_counter()
        rows += measure_points(runner, chunk, spec)
        rate = (time.perf_counter() - t0) / len(chunk)
        per_point[cat] = last_any = rate
        done += len(chunk)
        if progress:
            progress(f"{what} {chunk[0].kind} {'graph' if chunk[0].graph else 'eager'}",
                     done, len(points))
    return rows, skipped


def run_calibrate(model: Any, out: str, base: str, spec: ProfileSpec, *, anchors: int,
                  heldout: int = 0, seed: int = 0, budget_s: float = 120.0,
                  t_start: float | None = None, executor_opts: dict | None = None,
                  command: str = "", progress: Callable[[str, int, int], None] | None = None,
                  log: Callable[[str], None] | None = None,
                  workload: Callable[[list], tuple[dict, dict]] | None = None,
                  prefill: str = "auto", prior: str = "fitted",
                  residual: str = "group") -> dict[str, Any]:
    """Calibrate the profile ``base`` to this machine and write it to ``out`` (never ``base``);
    returns a summary.  ``t_start``: when the command started (``time.perf_counter()``), so
    the budget covers its start-up too.  ``workload(grid) -> (weights, info)``: anchors where a
    workload spends its time (``backends.calibrate_workload``), recorded as ``workload``.
    ``prefill``: whether the prefill group's factor is applied
    (``backends.calibrate.settle_prefill``). ``prior``: ``fitted`` (the default) fits against
    the roofline's ratio between this GPU's sheet and the base's when they differ, attention's
    part to the power the anchors choose; ``roofline`` that power at 1; ``none`` one scale per
    group (``backends.calibrate_prior``).  ``residual``: ``group`` (one factor per group) or
    another of ``backends.calibrate_residual.RESIDUAL_FORMS`` (``tokens``: times each group's
    anchor residual by token count); recorded as the calibration's ``residual``."""
    from backends.aiter import bridge
    from backends.aiter.executor import gpu_info
    from backends.profile import (_check_model, grid_rows, heldout_rows, line_rows, read_profile,
                                  write_profile)

    t_start = time.perf_counter() if t_start is None else t_start
    deadline = t_start + budget_s - RESERVE_S
    say = log or (lambda s: None)
    base_rows, meta = read_profile(base)
    _check_model(model, meta.get("model"), str(base))
    grid = grid_rows(base_rows).to_pylist()
    dropped_heldout = heldout_rows(base_rows).num_rows
    widths = sorted({int(r["width"]) for r in grid if r["kind"] == "verify" and r["graph"]})
    runner, shape, cap, fits = open_runner(model, widths, dict(executor_opts or {}), say)

    def ok(p: HeldoutPoint) -> bool:
        return fits(p.bs, p.kv_len, p.tokens if p.kind == "prefill" else p.width)

    weights, wl_info = workload(grid) if workload is not None else (None, None)
    if wl_info is not None:
        say(f"anchors weighted by {wl_info.get('trace')} ({wl_info.get('requests')} requests, "
            f"{wl_info.get('simulated_s')} s simulated)")
    points, asked = choose_anchors(grid, anchors, fits=ok, graph_bs=runner.capture_bs,
                                   kernel_widths=_kernel_widths(shape), weights=weights)
    rows, skipped = _measure_in_budget(runner, points, spec, deadline=deadline,
                                       progress=progress, what="anchor")
    base_of = {tuple(r[k] for k in SHAPE): r for r in grid}
    measured = [anchor_record(r, base_of[tuple(r[k] for k in SHAPE)]["latency_s"], r["latency_s"],
                              r["reps"]) for r in rows]
    if not measured:
        from traces.errors import SpecschedError

        raise SpecschedError(f"no anchor could be measured within --budget-s {budget_s:g} "
                             f"(elapsed {time.perf_counter() - t_start:.1f} s); nothing written")
    groups = sorted({group_name(r["kind"], r["graph"]) for r in grid})
    machine = gpu_info()
    shape_prior, prior_note, factors = fit_with_prior(model, measured, groups, meta.get("gpu"),
                                                      machine, prior=prior, prefill=prefill)
    if prior_note:
        say(f"another GPU model than the base's: factors{prior_text(prior_note)}")
    say("factors: " + factors_text(factors))
    shape_prior, residual_note = apply_residual(residual, measured, factors, shape_prior)
    if residual_note is not None:
        say(residual_line(residual_note))
    reach = decode_kv_reach(measured)
    say(kv_reach_note(reach))

    held: list[dict] = []
    held_note: dict[str, Any] = {}
    if heldout > 0:
        span = grid_span(grid)
        hpoints, hreport = choose_heldout(
            span, heldout, seed, ladder=runner.capture_bs, graph_widths=runner.capture_widths,
            kernel_widths=_kernel_widths(shape), fits=ok, exclude=set(base_of))
        held, hskipped = _measure_in_budget(runner, hpoints, spec, deadline=deadline,
                                            progress=progress, what="held-out")
        held_note = {"points": len(held), "asked": int(heldout), "seed": int(seed),
                     "sections": hreport, "skipped_for_budget": len(hskipped)}

    at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    elapsed = time.perf_counter() - t_start
    calibration = {
        "base": Path(base).name, "base_sha256": file_sha256(base),
        "base_gpu": meta.get("gpu"), "machine": machine, "at": at, "command": command,
        "versions": bridge.versions(), "budget_s": float(budget_s),
        "elapsed_s_before_write": round(elapsed, 3), "kv_capacity_tokens": cap,
        "spec": {"reps": spec.reps, "warmup": spec.warmup, "eager_reps": spec.eager_reps,
                 "settle_s": spec.settle_s, "protocol": "the grid's (measure_points)"},
        "rule": FIT_RULE, "anchors_asked": int(anchors), "groups": asked,
        "anchors": measured, "skipped_for_budget": skipped, "factors": factors,
        "base_heldout_rows_dropped": int(dropped_heldout)}
    if held_note:
        calibration["heldout"] = held_note
    if wl_info is not None:
        calibration["workload"] = wl_info
    if prior_note:
        calibration["prior"] = prior_note
    if residual_note is not None:
        calibration["residual"] = residual_note
    scaled = calibrated_copy(grid, line_rows(base_rows).to_pylist(), factors, held, shape_prior)
    notes: list = [f"calibrated by `specsched calibrate` on {machine.get('name')} at {at}: "
                   f"{len(measured)} anchors from {Path(base).name}, factors "
                   + factors_text(factors)
                   + prior_text(prior_note) + residual_text(residual_note)
                   + (f"; {dropped_heldout} held-out rows of the base dropped" if dropped_heldout
                      else "") + (f"; {len(held)} held-out rows measured here" if held else "")]
    if held_note:
        notes.append({"heldout": dict(held_note, recorded="by specsched calibrate, on the "
                                      "calibrating machine", command=command)})
    write_profile(scaled, out, calibrated_metadata(meta, machine, calibration, notes),
                  inputs=(base,))
    summary = {"rows": len(scaled), "out": str(out), "anchors": len(measured),
               "skipped": len(skipped), "heldout": len(held),
               "factors": {g: round(f["factor"], 6) for g, f in factors.items()},
               "prefill": prefill_summary(factors),
               "prior": prior_summary(prior_note), "residual": residual,
               "decode_kv_reach": reach,
               "wall_s": round(time.perf_counter() - t_start, 3)}
    say(f"wrote {summary['rows']} rows to {out} in {summary['wall_s']:.1f} s")
    return summary
