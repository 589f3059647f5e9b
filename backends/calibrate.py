"""Calibrating a profile to another machine: choose anchor shapes, fit a scale per pass group.

``specsched calibrate`` re-measures a few of a base profile's own grid points (the *anchors*) on
this machine's GPU and scales the base's grid to it.  This module chooses the anchors and fits
the scale; ``backends.aiter.calibrate_sweep`` measures them.  It imports neither torch nor the
GPU code.

**Groups.**  A group is a (kind, graph) pair, the sections of ``backends.heldout.SECTIONS``:
verify graph and eager, draft graph and eager, draft-extend graph and eager, prefill.

**Anchors** (:func:`choose_anchors`) are grid rows of the base (measured points, never filled
ones), so each has a base value to compare with.  ``n`` is spread over the groups present by
``backends.heldout.allocate`` (verify weighs most), at least :data:`MIN_PER_GROUP` each.  Only rows
``fits`` accepts (the GPU can hold the batch) are candidates.  Within a graph group the anchors
share few captured graphs (a capture costs far more than a replay): the (batch size, width) keys
are sorted by tokens and ``ceil(q / 3)`` of them (at least 2) are taken evenly from the smallest to
the largest; each key's share of the anchors is spread evenly over its KV lengths, smallest to
largest.  An eager or prefill group takes its anchors evenly over its rows sorted by (tokens, batch
size, width, KV).  The choice is a pure function of the base rows, ``n`` and ``fits``.  With a
workload's ``weights`` (``specsched calibrate --trace``, ``backends.calibrate_workload``) the
anchors go where that workload spends its time instead (:func:`_weighted`).

**The fit** (:func:`fit_factors`): per group, the factor is the median of measured / base over
that group's anchors (the median: one disturbed point does not move it).  A group without a
measured anchor takes the median ratio over all anchors, and the fit says so (``"source":
"all anchors"``); against a prior (another GPU model, below) it takes the prior alone.
:func:`calibrated_rows` multiplies ``latency_s``, ``p10_s`` and ``p90_s`` of every base grid
row by its group's factor, and :func:`calibrated_copy` a prefill line's rows
by the prefill factor.  A per-group scale is all it can fix: a difference
between machines that depends on the shape (one kernel slower at long KV only) stays.  On
another GPU model, whose ratio to the base's does depend on the shape (bandwidth- against
compute-bound passes), the fit is against the roofline's ratio between the two GPUs' sheets
(``backends.calibrate_prior``).

**Prefill on MoE models** (:func:`settle_prefill`).  The prefill group's factor is fitted and
recorded always, but applied by default only on dense models.  On DeepSeek-V2-Lite the prefill
anchors did not predict the live prefills that followed on the same GPU: over six calibrations
on six H200s (2026-12-03 to 2026-12-05) the anchors' factor and the live runs' prefill offset
correlate at -0.38, and the profile sat 3.15 points from the live prefills on average with the
factor applied against 2.19 without.  On Llama-3.1-8B (ten calibrations) they correlate at 0.65
and the factor brings the profile nearer (0.47 against 0.72 points); on the 70B shard (eight)
it is neutral (0.74 against 0.70).  The cause on the MoE model is not known (docs/aiter.md,
"What calibration tracks"; ``python benchmarks/calibration_vs_live.py benchmarks/results``).
That evidence is of GPUs of the base's model, where the anchors' factor is within a few percent
of 1.  On another GPU model it is the two GPUs' difference: DeepSeek-V2-Lite's prefill anchors on
an H100 measured 1.08-1.10 times the H200 rows (2026-12-06, ``h100-2026-12-06b``), which keeping
the base's rows would drop, so there ``auto`` scales on MoE models too (chosen before any live
V2-Lite run on an H100).  ``specsched calibrate --prefill scale`` or ``keep`` decides it either
way.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from backends.heldout import SECTIONS, HeldoutPoint, allocate

__all__ = ["DEFAULT_ANCHORS", "MIN_PER_GROUP", "GROUPS", "SHAPE", "group_name",
           "choose_anchors", "fit_factors", "calibrated_rows", "calibrated_copy",
           "anchor_record", "FIT_RULE", "factor_text", "factors_text", "PREFILL_MODES",
           "settle_prefill", "prefill_summary", "own_measured", "calibrated_metadata",
           "DECODE_KINDS", "decode_kv_reach", "kv_reach_note",
           "prefill_tokens_reach"]

#: Anchors ``specsched calibrate`` measures unless told otherwise (``--anchors``).
DEFAULT_ANCHORS = 24
#: Fewest anchors asked of each group present.
MIN_PER_GROUP = 2
#: The columns that name a grid point's shape (an anchor's, in ``specsched.calibration``).
SHAPE = ("kind", "graph", "bs", "width", "kv_len", "tokens")
#: ``specsched calibrate --prefill``: scale the prefill rows by their anchors' factor, keep the
#: base's, or ``auto`` (keep on a MoE model calibrated on a GPU of the base's model, scale
#: otherwise: :func:`settle_prefill`).
PREFILL_MODES = ("auto", "scale", "keep")
#: The fit as a calibrated file's metadata states it (``specsched.calibration.rule``), written
#: by ``specsched calibrate`` and by a re-fit (``--anchors-from``) alike.
FIT_RULE = ("per (kind, graph) group: factor = median of measured / base over the group's "
            "anchors (base grid points re-measured here with the grid's protocol); a group "
            "without an anchor takes the median over all anchors (against another GPU model's "
            "roofline prior: the prior alone); every base grid row's latency_s, p10_s and "
            "p90_s is multiplied by its group's factor (and by the prior where there is one), "
            "the prefill group's only where it is applied (by default on dense models, and on "
            "MoE ones only on another GPU model than the base's: its `applied`). "
            "Shape-dependent differences between the machines beyond the prior are not "
            "corrected (one scale per group)")
#: (kind, graph) -> group name (the section names of ``backends.heldout``).
GROUPS: dict[tuple[str, bool], str] = {(k, g): s for s, (k, g, _) in SECTIONS.items()}


def group_name(kind: str, graph: bool) -> str:
    """The group of a row: ``verify_graph``, ``draft_eager``, ``prefill``, ..."""
    return GROUPS[(str(kind), bool(graph))]


def _rows_of(rows: Any) -> list[dict]:
    return rows.to_pylist() if hasattr(rows, "to_pylist") else list(rows)


def _point(r: dict) -> HeldoutPoint:
    return HeldoutPoint(str(r["kind"]), bool(r["graph"]), int(r["bs"]), int(r["width"]),
                        int(r["kv_len"]), int(r["tokens"]))


def _spread(items: Sequence, m: int) -> list:
    """``m`` items taken evenly from ``items`` (sorted), first and last included; the middle one
    for ``m == 1``; all of them when ``m`` reaches their number."""
    if m >= len(items):
        return list(items)
    if m <= 0:
        return []
    if m == 1:
        return [items[(len(items) - 1) // 2]]
    idx = sorted({round(i * (len(items) - 1) / (m - 1)) for i in range(m)})
    return [items[i] for i in idx]


def choose_anchors(grid: Any, n: int = DEFAULT_ANCHORS, *,
                   fits: Callable[[HeldoutPoint], bool] | None = None,
                   graph_bs: Iterable[int] | None = None,
                   kernel_widths: Iterable[int] | None = None,
                   weights: dict[HeldoutPoint, float] | None = None
                   ) -> tuple[list[HeldoutPoint], dict[str, dict]]:
    """Anchors among the grid rows of ``grid`` (a pyarrow table or row dicts; rows whose
    ``split`` is not ``"grid"`` are never anchors), as
    the module docstring says; returns (points sorted, a graph's points adjacent; per group
    ``{"asked", "chosen", "graphs"}``).  ``graph_bs``: the batch sizes graphs can be captured at
    (others dropped); ``kernel_widths``: the widths the model's kernels take.  ``weights``
    (seconds a workload spends nearest each row, ``backends.calibrate_workload``): anchors where
    the workload runs instead, :func:`_weighted`."""
    if n < 0:
        raise ValueError("n must be >= 0")
    ladder = None if graph_bs is None else set(int(b) for b in graph_bs)
    widths = None if kernel_widths is None else set(int(w) for w in kernel_widths)
    by_group: dict[str, list[HeldoutPoint]] = {}
    for r in _rows_of(grid):
        key = (str(r["kind"]), bool(r["graph"]))
        if key not in GROUPS or r.get("split", "grid") != "grid":
            continue
        p = _point(r)
        if p.graph and ladder is not None and p.bs not in ladder:
            continue
        if widths is not None and p.kind != "prefill" and p.kind != "draft" and p.width not in widths:
            continue
        if fits is not None and not fits(p):
            continue
        by_group.setdefault(GROUPS[key], []).append(p)
    if weights is not None:
        return _weighted(by_group, n, weights)
    quota = allocate(n, by_group)
    report: dict[str, dict] = {}
    chosen: list[HeldoutPoint] = []
    for group in SECTIONS:
        if group not in by_group:
            continue
        pts = sorted(set(by_group[group]), key=lambda p: (p.tokens, p.bs, p.width, p.kv_len))
        q = max(MIN_PER_GROUP, quota[group]) if n > 0 else 0
        if group.endswith("_graph"):
            keys = sorted({(p.bs, p.width) for p in pts}, key=lambda k: (k[0] * k[1], k))
            use = _spread(keys, max(2, math.ceil(q / 3)))
            got: list[HeldoutPoint] = []
            for i, k in enumerate(use):
                share = q // len(use) + (1 if i < q % len(use) else 0)
                kvs = sorted(p for p in pts if (p.bs, p.width) == k)
                got += _spread(sorted(kvs, key=lambda p: p.kv_len), share)
            graphs = len({(p.bs, p.width) for p in got})
        else:
            got = _spread(pts, q)
            graphs = 0
        chosen += got
        report[group] = {"asked": q, "chosen": len(got), "graphs": graphs}
    chosen.sort()
    return chosen, report


def _median(xs: Sequence[float]) -> float:
    return float(np.median(np.asarray(xs, dtype=np.float64)))


def fit_factors(anchors: Iterable[dict], groups: Iterable[str],
                prior: Callable[[dict], float] | None = None) -> dict[str, dict]:
    """The scale per group from ``anchors`` (dicts with ``kind``, ``graph``, ``base_s`` and
    ``measured_s``), for every group in ``groups``: ``{"factor", "n", "source",
    "ratio_min", "ratio_max"}``; ``source`` is ``"group"`` (median over its own anchors) or
    ``"all anchors"`` (it had none).  With ``prior`` (``backends.calibrate_prior``: a ratio per
    shape, for another GPU model) the ratios are ``measured / (base x prior(anchor))``, and a
    group without anchors takes the prior alone (factor 1, ``source`` ``"prior alone"``): a
    residual over the prior belongs to its group, and the other groups' median would carry the
    verify graph's into eager passes.  No anchor at all is a ValueError."""
    ratios: dict[str, list[float]] = {}
    for a in anchors:
        ratios.setdefault(group_name(a["kind"], a["graph"]), []).append(
            float(a["measured_s"]) / float(a["base_s"]) / (prior(a) if prior else 1.0))
    every = [x for rs in ratios.values() for x in rs]
    if not every:
        raise ValueError("no anchor was measured: nothing to fit")
    overall = _median(every)
    wanted = set(groups) | set(ratios)  # once: ``groups`` may be a one-pass iterable
    out: dict[str, dict] = {}
    for g in [s for s in SECTIONS if s in wanted]:
        rs = ratios.get(g, [])
        if rs:
            out[g] = {"factor": _median(rs), "n": len(rs), "source": "group",
                      "ratio_min": min(rs), "ratio_max": max(rs)}
        else:
            out[g] = {"factor": 1.0 if prior else overall, "n": 0,
                      "source": "prior alone" if prior else "all anchors",
                      "ratio_min": None, "ratio_max": None}
    return out


def settle_prefill(factors: dict[str, dict], mode: str, *, moe: bool,
                   other_model: bool = False) -> dict[str, dict]:
    """``factors`` (:func:`fit_factors`) with the prefill group's use decided by ``mode``
    (:data:`PREFILL_MODES`; ``auto`` is ``keep`` when ``moe`` on a GPU of the base's model,
    else ``scale``; ``other_model``: the calibrating GPU is of another model than the base's,
    :func:`backends.calibrate_prior.other_models`): its entry gains ``measured`` (the fitted
    median), ``applied`` and ``mode``; when kept, its ``factor`` (what :func:`calibrated_rows`
    multiplies by) is 1 and ``why`` says so.  Other groups as given."""
    if mode not in PREFILL_MODES:
        raise ValueError(f"prefill mode {mode!r}: choose one of {', '.join(PREFILL_MODES)}")
    if "prefill" not in factors:
        return dict(factors)
    p = dict(factors["prefill"])
    measured = p.pop("measured", p["factor"])
    keep = mode == "keep" or (mode == "auto" and moe and not other_model)
    p.update(measured=measured, applied=not keep, mode=mode, factor=1.0 if keep else measured)
    if keep:
        p["why"] = ("kept the base's prefill rows (--prefill keep)" if mode == "keep" else
                    "kept the base's prefill rows: on a MoE model the prefill anchors did not "
                    "predict live prefills on the same GPU (--prefill auto; --prefill scale "
                    "applies them)")
    elif mode == "auto" and moe:
        p["why"] = ("applied on a MoE model: on another GPU model than the base's the anchors "
                    "measure the difference between the two GPUs, which the base's rows would "
                    "drop (--prefill auto; --prefill keep keeps them)")
    return {g: (p if g == "prefill" else f) for g, f in factors.items()}


def prefill_summary(factors: dict[str, dict]) -> dict | None:
    """The prefill group's use in a command's printed summary: ``{"measured", "applied"}``
    (None without a prefill group; ``measured`` None when no prefill anchor was measured)."""
    p = factors.get("prefill")
    if p is None:
        return None
    own = own_measured(p)
    return {"measured": None if own is None else round(float(own), 6),
            "applied": bool(p.get("applied", True))}


#: the pass kinds whose anchors have a KV length of their own (a prefill's is its cached prefix)
DECODE_KINDS = ("verify", "draft", "draft_extend")


def decode_kv_reach(anchors: Iterable[dict]) -> int | None:
    """The longest KV length among a calibration's decode anchors (None without one): rows at
    longer KV take factors, and on another GPU model an attention power, that no anchor there
    measured (``analysis/fidelity/reach.py`` splits a live run's error at it)."""
    kv = [int(a["kv_len"]) for a in anchors if a.get("kind") in DECODE_KINDS]
    return max(kv) if kv else None


def prefill_tokens_reach(anchors: Iterable[dict]) -> int | None:
    """The most new tokens among a calibration's prefill anchors (None without one): prefills
    of more are predicted past what any anchor measured (``analysis/fidelity/reach.py`` splits a
    live run's prefill error at it)."""
    tokens = [int(a["tokens"]) for a in anchors if a.get("kind") == "prefill" and "tokens" in a]
    return max(tokens) if tokens else None


def kv_reach_note(reach: int | None) -> str:
    """What ``specsched calibrate`` prints of :func:`decode_kv_reach`."""
    if reach is None:
        return "no decode anchor measured: decode rows take the factors of other anchors"
    return (f"decode anchors measured KV up to {reach:,}: rows at longer KV take these factors "
            "untested (a fidelity report on the output splits a run's error there)")


def calibrated_rows(grid: Any, factors: dict[str, dict],
                    prior: Callable[[dict], float] | None = None) -> list[dict]:
    """The grid rows ``grid`` with ``latency_s``, ``p10_s`` and ``p90_s`` multiplied by their
    group's factor, and by ``prior(row)`` when given (every other column, and ``split``,
    dropped or kept as given). A group whose factor is not applied (``applied`` false, the
    prefill on a MoE model) keeps the base's rows, prior or not."""
    out = []
    for r in _rows_of(grid):
        fit = factors[group_name(r["kind"], r["graph"])]
        f = fit["factor"] * (prior(r) if prior and fit.get("applied", True) else 1.0)
        out.append(dict(r, latency_s=r["latency_s"] * f, p10_s=r["p10_s"] * f,
                        p90_s=r["p90_s"] * f))
    return out


def calibrated_copy(grid: Any, line: Any, factors: dict[str, dict],
                    held: Sequence[dict] = (),
                    prior: Callable[[dict], float] | None = None) -> list[dict]:
    """A calibrated copy's rows: the base's ``grid`` rows scaled by their groups' factors
    (:func:`calibrated_rows`) and its prefill-``line`` rows (``split == "line"``,
    :mod:`backends.prefill_line`) by the prefill factor, so the line stays at the grid's level,
    then ``held`` (held-out rows measured on this machine). With line or held-out rows each row
    says its ``split``; without, the grid alone and no ``split`` column. ``prior``: as for
    :func:`calibrated_rows`."""
    grid, line = calibrated_rows(grid, factors, prior), calibrated_rows(line, factors, prior)
    if line or held:
        return ([dict(r, split="grid") for r in grid] + [dict(r, split="line") for r in line]
                + list(held))
    return [{k: v for k, v in r.items() if k != "split"} for r in grid]


def anchor_record(shape: dict, base_s: float, measured_s: float, reps: Any) -> dict:
    """An anchor as ``specsched.calibration`` keeps it: its shape (:data:`SHAPE`), the base's
    latency there, the measured one, their ratio and the timed repetitions."""
    return {k: shape[k] for k in SHAPE} | {"base_s": base_s, "measured_s": measured_s,
                                           "ratio": measured_s / base_s, "reps": reps}


def factor_text(group: str, factor: float, not_applied: float | None = None, *,
                applied: bool | None = None) -> str:
    """``verify_graph 1.0012``, or for a group whose fitted factor was not applied
    ``prefill 1.0000 (anchors 1.0303, not applied)``, and ``(no anchors, not applied)`` when
    ``applied`` is False with no figure (the group had no anchor of its own).  ``applied``
    defaults to whether ``not_applied`` is None."""
    if applied is None:
        applied = not_applied is None
    if applied:
        return f"{group} {factor:.4f}"
    return f"{group} {factor:.4f} (" + ("no anchors" if not_applied is None
                                         else f"anchors {not_applied:.4f}") + ", not applied)"


def own_measured(f: dict) -> float | None:
    """A group's fitted median from its own anchors; None when it had none (its factor came
    from the other groups or the prior, :func:`fit_factors`)."""
    return None if f.get("n") == 0 else f.get("measured", f["factor"])


def factors_text(factors: dict[str, dict]) -> str:
    """``verify_graph 1.0012, prefill 0.9870, ...``: a fit in one line (:func:`factor_text`)."""
    return ", ".join(factor_text(g, f["factor"], own_measured(f),
                                 applied=f.get("applied") is not False)
                     for g, f in factors.items())


def calibrated_metadata(meta: dict, machine: Any, calibration: dict, notes: list) -> dict:
    """The metadata of a calibrated copy of a profile whose metadata is ``meta``: its model,
    versions, kernels and attention kept; ``machine`` as its GPU; the base's notes without its
    held-out note (its held-out rows are not carried over), then ``notes``; ``calibration``."""
    kept = meta.get("notes") or []
    kept = [n for n in (kept if isinstance(kept, list) else [kept])
            if not (isinstance(n, dict) and "heldout" in n)]
    out = {k: meta.get(k) for k in ("model", "versions", "kernels", "attention")}
    out.update(gpu=machine, command=meta.get("command") or "", notes=kept + list(notes),
               calibration=calibration)
    return out


def _weighted(by_group: dict[str, list[HeldoutPoint]], n: int,
              weights: dict[HeldoutPoint, float]) -> tuple[list[HeldoutPoint], dict[str, dict]]:
    """Anchors by a workload's weights: the groups the workload uses (a candidate row with
    weight > 0) share ``n`` in proportion to their weight by largest remainder, at least
    :data:`MIN_PER_GROUP` each; an eager or prefill group takes its heaviest rows (only rows the
    workload uses), a graph group its heaviest ``max(2, ceil(q / 3))`` captured graphs (by their
    rows' summed weight), each graph its share of its rows, heaviest first, then its other KV
    lengths (smallest first: the graph is captured anyway).  Ties go to the row that sorts
    first."""
    used = {g: pts for g, pts in by_group.items() if any(weights.get(p, 0.0) > 0 for p in pts)}
    total = {g: sum(weights.get(p, 0.0) for p in pts) for g, pts in used.items()}
    names = [g for g in SECTIONS if g in used]
    grand = sum(total.values()) or 1.0
    quota = allocate(n, names, shares=total)
    heavy = lambda p: (-weights.get(p, 0.0), p)  # noqa: E731
    chosen: list[HeldoutPoint] = []
    report: dict[str, dict] = {}
    for g in names:
        pts = sorted(set(used[g]), key=heavy)
        q = max(MIN_PER_GROUP, quota[g]) if n > 0 else 0
        if g.endswith("_graph"):
            w_key: dict[tuple, float] = {}
            for p in pts:
                w_key[(p.bs, p.width)] = w_key.get((p.bs, p.width), 0.0) + weights.get(p, 0.0)
            keys = sorted((k for k in w_key if w_key[k] > 0), key=lambda k: (-w_key[k], k))
            keys = keys[:max(2, math.ceil(q / 3))]
            got: list[HeldoutPoint] = []
            for i, k in enumerate(keys):  # a captured graph's other KV lengths cost a replay each
                share = q // len(keys) + (1 if i < q % len(keys) else 0)
                got += [p for p in pts if (p.bs, p.width) == k][:share]
            graphs = len({(p.bs, p.width) for p in got})
        else:
            got = [p for p in pts if weights.get(p, 0.0) > 0][:q]
            graphs = 0
        chosen += got
        report[g] = {"asked": q, "chosen": len(got), "graphs": graphs,
                     "weight_share": round(total[g] / grand, 4)}
    chosen.sort()
    return chosen, report
