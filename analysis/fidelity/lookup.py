"""Where a recorded step lands in a profile: its lookup point, its prediction, its grid position.

A live run records each pass's shape (``steps.parquet``), not a table coordinate.  This module
turns a step into the coordinate the engine would look it up at (the rule of
``backends.latency_table``: padded batch for graph replays, launch width or tokens / batch for
ragged launches, the straggler-aware KV when the profile carries its attention metadata, the
attention-equivalent prefix for prefill), predicts its latency from a ``LatencyTable``, and says
where that coordinate sits on the profile's grid, axis by axis.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pyarrow as pa

from backends.attention_kv import (ATT_DLAYERS, ATT_LAYERS, ATT_MLA, ATT_ON, attention_rows,
                                   effective_kv, resolve_kv_lookup, table_attention, verify_kv)

__all__ = ["col", "kinds_present", "lookup_points", "predict", "predict_steps",
           "measured_points", "grid_position", "AXES", "GRIDS", "KIND_ORDER"]

#: the order kinds are reported in; kinds not listed follow, sorted
KIND_ORDER = ("verify", "draft", "draft_extend", "prefill")

#: what each kind's prediction is, from its lookup point (``p``: :func:`lookup_points`, ``i``:
#: the step).  A kind missing here is not predicted: its steps are counted, not scored.
_LOOKUPS: dict[str, Callable] = {
    "prefill": lambda t, p, i: t.prefill_s(p["tokens"][i], p["kv"][i]),
    "draft": lambda t, p, i: _times(t.draft_pass_s(p["bs"][i], p["kv"][i], bool(p["graph"][i])),
                                    p["passes"][i]),
    "verify": lambda t, p, i: t.verify_s(p["bs"][i], p["width"][i], p["kv"][i],
                                         bool(p["graph"][i])),
    "draft_extend": lambda t, p, i: t.extend_s(p["bs"][i], p["width"][i], p["kv"][i],
                                               bool(p["graph"][i])),
}

#: the grid (per graph / eager) each kind is looked up on, and its axes in order (a new kind
#: needs a line here and one in _LOOKUPS)
GRIDS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "verify": ("verify_graph", "verify_eager", ("bs", "width", "kv")),
    "draft": ("draft_graph", "draft_eager", ("bs", "kv")),
    "draft_extend": ("extend_graph", "extend_eager", ("bs", "width", "kv")),
    "prefill": ("prefill", "prefill", ("tokens", "kv")),
}

#: the ways a step can be off the profile's measured grid, with the words the report uses
AXES = {
    "batch": "batch size between grid points (prefill: tokens)",
    "width": "width between grid points (verify)",
    "kv": "KV between grid lines (prefill: equivalent prefix)",
    "mixed_kv": "mixed KV in the batch, or padded rows (prefill: several requests)",
    "unmeasured": "on grid lines, at a node the profile filled or derived",
}


def _times(vo: tuple[float, bool], n: float) -> tuple[float, bool]:
    return vo[0] * n, vo[1]


def col(t: pa.Table, name: str) -> np.ndarray:
    """A column as numpy (strings as an object array)."""
    c = t.column(name)
    if pa.types.is_dictionary(c.type):
        c = c.cast(pa.string())
    return np.asarray(c.to_pylist() if pa.types.is_string(c.type) else c.to_numpy(zero_copy_only=False))


def kinds_present(kind: np.ndarray) -> list[str]:
    """The kinds in ``kind``, known ones in :data:`KIND_ORDER`, the others after, sorted."""
    have = set(str(k) for k in np.unique(kind)) if len(kind) else set()
    return [k for k in KIND_ORDER if k in have] + sorted(have - set(KIND_ORDER))


def lookup_points(steps: pa.Table, table=None, kv_lookup: str = "straggler"
                  ) -> dict[str, np.ndarray]:
    """The table coordinates of every step: the engine's lookup rule (latency_table module).

    When ``table`` carries the attention metadata, the KV coordinate of draft, verify and
    draft-extend steps is recomputed as the engine would look them up
    (``backends.attention_kv.effective_kv``, and ``verify_kv`` on the grid a verify or
    draft-extend step is looked up on), so a live run (recorded without a table, at mean KV) is
    predicted at the coordinate a profile run uses.  ``mixed``: the batch's requests differ in KV, or a graph pads it (prefill: several
    requests in the pass); a run without ``kv_max`` counts every batch of several as mixed.

    ``kv_lookup = "fluid"`` (``backend.kv_lookup``; ``auto`` is fluid on an MLA table, the
    straggler rule otherwise): on an MLA profile, verify and draft-extend
    steps of a run that recorded each pass's members (``member_kv``) are then looked up as the
    engine's fluid lookup does (:func:`fluid_points`); ``fluid`` in the result says which."""
    kind = col(steps, "kind")
    graph = col(steps, "graph").astype(bool)
    bs = col(steps, "bs").astype(np.float64)
    bs_pad = col(steps, "bs_padded").astype(np.float64)
    width = col(steps, "width").astype(np.float64)
    tokens = col(steps, "tokens").astype(np.float64)
    kv_mean = col(steps, "kv_mean").astype(np.float64)
    mode = (col(steps, "mode") if "mode" in steps.column_names
            else np.full(len(kind), "uniform", dtype=object))
    bs_ax = np.where(graph, bs_pad, bs)
    with np.errstate(invalid="ignore", divide="ignore"):
        at_mean = np.where(kind == "prefill", kv_mean, kv_mean * bs / np.maximum(bs_ax, 1))
        if "lookup_kv" in steps.column_names:  # the coordinate the engine itself looked up
            kv_ax = col(steps, "lookup_kv").astype(np.float64)
        else:
            kv_ax = at_mean.copy()
        uniform = np.array([m is None or m == "uniform" for m in mode], dtype=bool)
        w_ax = np.where(uniform, width, tokens / np.maximum(bs, 1))
    has_max = "kv_max" in steps.column_names
    kv_max = col(steps, "kv_max").astype(np.float64) if has_max else kv_mean.copy()
    spread = (kv_max > kv_mean * (1 + 1e-9) + 1e-9) if has_max else (bs > 1)
    mixed = np.where(kind == "prefill", bs > 1, spread | (graph & (bs_pad > bs)))
    att = table_attention(table)
    if att[ATT_ON] and has_max:
        for i in np.flatnonzero((kind == "verify") | (kind == "draft") | (kind == "draft_extend")):
            k = str(kind[i])
            rows = attention_rows(k == "draft", bool(graph[i]), bs_ax[i], width[i], tokens[i])
            if k == "draft":
                kv_ax[i] = effective_kv(kv_mean[i] * bs[i], kv_max[i], bs_ax[i], bs[i], rows,
                                        True, att)
                continue
            grid = getattr(table, GRIDS[k][0] if graph[i] else GRIDS[k][1])
            layers = att[ATT_LAYERS] if k == "verify" else att[ATT_DLAYERS]
            kv_ax[i] = verify_kv(kv_mean[i] * bs[i], kv_max[i], bs_ax[i], bs[i], rows, layers, att,
                                 *grid.axes, grid.values, bs_ax[i], w_ax[i])
    kv_lookup = resolve_kv_lookup(kv_lookup, bool(att[ATT_ON] and att[ATT_MLA]))  # as the engine
    fluid = (fluid_points(steps, table, att, kind, graph, bs_ax, w_ax, kv_ax)
             if kv_lookup == "fluid" else np.zeros(len(kind), dtype=bool))
    return {"kind": kind, "graph": graph, "bs": bs_ax, "width": w_ax, "kv": kv_ax,
            "tokens": tokens, "passes": col(steps, "passes").astype(np.float64),
            "kv_at_mean": at_mean, "kv_mean": kv_mean, "mixed": mixed, "fluid": fluid}


def fluid_points(steps: pa.Table, table, att: np.ndarray, kind: np.ndarray, graph: np.ndarray,
                 bs_ax: np.ndarray, w_ax: np.ndarray, kv_ax: np.ndarray) -> np.ndarray:
    """Set ``kv_ax`` of each MLA verify and draft-extend step to the fluid lookup's coordinate.

    The engine's ``backend.kv_lookup = fluid`` (``simulator.timing._fluid_lookups``) takes every
    member's KV in launch order; a recorded run holds them in ``member_kv`` (runs written since
    2026-12-03). Returns which steps were set: none without that column or on a non-MLA profile
    (their coordinate stays the straggler rule's), none where the fluid form does not apply."""
    from backends.mla_fluid import FLUID_NSAT, FLUID_OVERHEAD, fluid_kv
    from backends.mla_waves import kernel_rows

    done = np.zeros(len(kind), dtype=bool)
    if att[ATT_MLA] == 0.0 or "member_kv" not in steps.column_names or not len(kind):
        return done
    members = steps.column("member_kv").combine_chunks()
    offs = np.asarray(members.offsets)
    vals = np.asarray(members.values, dtype=np.int64)
    widest = int(max(np.max(bs_ax), np.max(np.diff(offs)), 1))
    scratch = np.zeros(2 * (16 * widest + 2), np.float64)  # as the engine sizes it
    for i in np.flatnonzero((kind == "verify") | (kind == "draft_extend")):
        g = GRIDS[str(kind[i])]
        grid = getattr(table, g[0] if graph[i] else g[1])
        kv = vals[offs[i]:offs[i + 1]]
        w = float(w_ax[i])
        k = fluid_kv(kv, len(kv), float(bs_ax[i]), w, kernel_rows(w), att, FLUID_NSAT,
                     FLUID_OVERHEAD, *grid.axes, grid.values, scratch)
        if k >= 0.0:
            kv_ax[i] = k
            done[i] = True
    return done


def predict(p: dict[str, np.ndarray], table) -> tuple[np.ndarray, np.ndarray]:
    """Latency the table predicts at lookup points already computed (:func:`lookup_points`), and
    whether each was outside the grid; NaN for a kind the table has no lookup for."""
    n = len(p["kind"])
    pred = np.full(n, np.nan)
    oog = np.zeros(n, dtype=bool)
    for i in range(n):
        f = _LOOKUPS.get(str(p["kind"][i]))
        if f is not None:
            pred[i], oog[i] = f(table, p, i)
    return pred, oog


def predict_steps(steps: pa.Table, table, kv_lookup: str = "straggler"
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Latency the table predicts for every step of a run, and whether it was outside the grid."""
    return predict(lookup_points(steps, table, kv_lookup), table)


def measured_points(table) -> dict[str, set]:
    """The profile's measured lookup points (its grid rows; empty when the table is not a
    profile's), per kind."""
    path = table.source.get("file") if isinstance(table.source, dict) else None
    if not path:
        return {}
    from backends.profile import grid_rows, read_profile

    rows = grid_rows(read_profile(path)[0])
    c = {k: col(rows, k) for k in ("kind", "graph", "bs", "width", "kv_len", "tokens")}
    out: dict[str, set] = {}
    for i in range(rows.num_rows):
        out.setdefault(str(c["kind"][i]), set()).add(_key(
            str(c["kind"][i]), bool(c["graph"][i]), float(c["bs"][i]), float(c["width"][i]),
            float(c["kv_len"][i]), float(c["tokens"][i])))
    return out


def _key(kind: str, graph: bool, bs: float, width: float, kv: float, tokens: float) -> tuple:
    kv = round(kv, 6)
    if kind in ("verify", "draft_extend"):  # both grids are (bs, width, KV), graph and eager
        return (graph, bs, round(width, 6), kv)
    if kind == "draft":
        return (graph, bs, kv)
    return (tokens, kv)


def _on_axis(axis: np.ndarray, x: float) -> bool:
    j = int(np.searchsorted(axis, x))
    return any(0 <= k < len(axis) and abs(axis[k] - x) <= 1e-6 * max(1.0, abs(x))
               for k in (j - 1, j))


def grid_position(p: dict[str, np.ndarray], table, measured: dict[str, set] | None = None
                  ) -> dict[str, np.ndarray]:
    """Where each step's lookup point sits on the profile: one boolean array per entry of
    :data:`AXES` (true: off the grid that way), and ``on_grid``: on a grid line in every axis,
    KV uniform in the batch, at a measured node (the prediction replays a measurement).  Steps of
    a kind the table has no grid for are false everywhere.  A prefill of one request at prefix 0
    at a count of the table's prefill line (``backends.prefill_line``) is on a measured point."""
    measured = measured_points(table) if measured is None else measured
    line = {float(t) for t in getattr(table, "_pl_tok", ())}
    n = len(p["kind"])
    out = {a: np.zeros(n, dtype=bool) for a in AXES}
    on = np.zeros(n, dtype=bool)
    for i in range(n):
        k = str(p["kind"][i])
        if k not in GRIDS:
            continue
        if (k == "prefill" and not p["mixed"][i] and float(p["kv"][i]) == 0.0
                and float(p["tokens"][i]) in line):
            on[i] = True  # one request at prefix 0 at a count of the prefill line: measured
            continue
        graph = bool(p["graph"][i])
        g_graph, g_eager, names = GRIDS[k]
        grid = getattr(table, g_graph if graph else g_eager)
        off = {}
        for name, axis in zip(names, grid.axes):
            x = float(p["tokens" if name == "tokens" else name][i])
            label = {"bs": "batch", "tokens": "batch"}.get(name, name)
            off[label] = not _on_axis(axis, x)
        for label, v in off.items():
            out[label][i] = v
        out["mixed_kv"][i] = bool(p["mixed"][i])
        if not any(off.values()) and not p["mixed"][i]:
            key = _key(k, graph, float(p["bs"][i]), float(p["width"][i]), float(p["kv"][i]),
                       float(p["tokens"][i]))
            if measured and key in measured.get(k, ()):
                on[i] = True
            else:
                out["unmeasured"][i] = True
    out["on_grid"] = on
    return out
