"""Calibration anchors where a workload spends its time: ``specsched calibrate --trace``.

The default anchors are spread over a profile's whole grid (``backends.calibrate``), so a
factor per pass group is fitted mostly at shapes a given workload never runs; measured against
live runs, that factor tracks the draft groups but not verify or prefill (docs/aiter.md, *What
calibration tracks*). With ``--trace`` the anchors are chosen by the time the workload spends
near each grid point instead:

1. The trace (its first ``--limit`` requests, under the configuration ``--config`` / ``--set``
   give, as ``simulate`` would run it) is simulated on the base profile, in memory.
2. Every simulated pass is assigned to the nearest measured grid row of its group (the same
   (kind, graph) pair; nearest in log space over the row's lookup axes: batch size, width and
   KV for verify and draft-extend, batch size and KV for draft, tokens and prefix for prefill,
   the padded batch size for a graph), and its simulated latency is added to that row's weight
   (:func:`grid_time_weights`).
3. ``backends.calibrate.choose_anchors(weights=...)`` then gives each group a share of the
   anchors in proportion to its weight (at least ``MIN_PER_GROUP`` for a group the workload
   uses, none for one it does not: those take the median of all anchors, or on another GPU
   model the roofline prior alone, as the fit says) and
   takes the heaviest rows, in a graph group from the heaviest few captured graphs.

It imports neither torch nor the GPU code; the calibration records what it was weighted by
(``specsched.calibration.workload``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from backends.calibrate import GROUPS, _point
from backends.heldout import HeldoutPoint

__all__ = ["grid_time_weights", "workload_config", "workload_weights"]


def _coords(kind: str, bs: float, width: float, kv: float, tokens: float) -> tuple[float, ...]:
    """A pass's lookup coordinates in log space (``log1p`` so that 0 is allowed)."""
    if kind == "prefill":
        return (math.log1p(tokens), math.log1p(kv))
    if kind == "draft":
        return (math.log1p(bs), math.log1p(kv))
    return (math.log1p(bs), math.log1p(width), math.log1p(kv))


def grid_time_weights(grid: list[dict], passes: list[dict]) -> dict[HeldoutPoint, float]:
    """Seconds of ``passes`` (dicts with ``kind``, ``graph``, ``bs``, ``width``, ``kv``,
    ``tokens``, ``latency_s``) nearest each measured row of ``grid`` (row dicts; rows whose
    ``split`` is not ``"grid"`` are skipped), by group; a pass of a group with no row is left
    out.  Ties go to the row that sorts first."""
    rows: dict[tuple[str, bool], list[HeldoutPoint]] = {}
    for r in grid:
        key = (str(r["kind"]), bool(r["graph"]))
        if key in GROUPS and r.get("split", "grid") == "grid":
            rows.setdefault(key, []).append(_point(r))
    coords = {k: np.asarray([_coords(p.kind, p.bs, p.width, p.kv_len, p.tokens)
                             for p in sorted(set(v))]) for k, v in rows.items()}
    ordered = {k: sorted(set(v)) for k, v in rows.items()}
    out: dict[HeldoutPoint, float] = {}
    for s in passes:
        key = (str(s["kind"]), bool(s["graph"]))
        if key not in coords:
            continue
        c = np.asarray(_coords(key[0], s["bs"], s["width"], s["kv"], s["tokens"]))
        i = int(np.argmin(np.abs(coords[key] - c).sum(axis=1)))
        p = ordered[key][i]
        out[p] = out.get(p, 0.0) + float(s["latency_s"])
    return out


def _passes(steps) -> list[dict]:
    """The passes of a simulated run's steps table, in :func:`grid_time_weights`' form: a graph
    at its padded batch size, every pass at the KV its latency was looked up at (``lookup_kv``;
    a prefill's attention-equivalent prefix, below 0 for several requests without one, taken
    as 0, the grid's lowest prefix)."""
    c = {k: steps.column(k).to_pylist() for k in ("kind", "graph", "bs", "bs_padded", "width",
                                                  "lookup_kv", "tokens", "latency_s")}
    out = []
    for i in range(steps.num_rows):
        kind, graph = c["kind"][i], bool(c["graph"][i])
        out.append({"kind": kind, "graph": graph,
                    "bs": float(c["bs_padded"][i] if graph else c["bs"][i]),
                    "width": float(c["width"][i]), "kv": max(0.0, float(c["lookup_kv"][i])),
                    "tokens": float(c["tokens"][i]), "latency_s": float(c["latency_s"][i])})
    return out


def workload_config(model: str, tp: int | None, base: str | Path, *,
                    config_path: str | None = None, overrides: dict[str, Any] | None = None):
    """The configuration a workload is simulated under for ``calibrate --trace``: ``config_path``
    and ``overrides`` (as ``simulate`` takes them) on the profile ``base`` of ``model``."""
    from simulator.config import SimConfig

    ov = dict(overrides or {})
    ov.update({"model.name": model, "backend.name": "profile", "backend.profile": str(base)})
    if tp:
        ov["model.tp"] = tp
    return SimConfig.load(config_path, ov)


def workload_weights(trace, cfg, grid: list[dict], *, trace_name: str) -> tuple[dict, dict]:
    """(weights per grid row, what they came from) for the loaded ``trace`` (``trace_name``, its
    file's name) simulated under ``cfg`` (:func:`workload_config`)."""
    from specsched.setup import prepare, simulate_to

    prep = prepare(cfg)
    run = simulate_to(trace, cfg, None, executor=prep.executor)
    weights = grid_time_weights(grid, _passes(run.steps))
    by_group: dict[str, float] = {}
    for p, w in weights.items():
        g = GROUPS[(p.kind, p.graph)]
        by_group[g] = by_group.get(g, 0.0) + w
    total = sum(by_group.values()) or 1.0
    info = {"trace": trace_name, "requests": len(trace), "policy": cfg.engine.policy,
            "simulated_s": round(float(run.summary["duration_s"]), 3),
            "share_by_group": {g: round(w / total, 4) for g, w in sorted(by_group.items())},
            "rows_weighted": len(weights)}
    return weights, info
