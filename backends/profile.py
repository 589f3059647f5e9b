"""The profile backend: latencies measured on a GPU (``specsched profile``), interpolated.

A profile is a parquet file with one row per measured point; its schema, validation, metadata
and atomic writing and reading are :mod:`backends.profile_file` (whose names this module
re-exports).  :func:`load_profile` turns such a file into a
:class:`~backends.latency_table.LatencyTable`; :class:`ProfileExecutor` is the
``TableExecutor`` named ``"profile"`` over it, so the engine evaluates it in compiled code.

Building the grids (each documented in ``LatencyTable.source``):

- **Axes** are the measured values: verify and draft-extend (padded batch size, width, KV
  length), draft (batch size, KV length), prefill (tokens, prefix).  Measured points are reproduced exactly (unless the
  monotone pass below had to move a noisy one; counted).
- **Holes** (points a sweep skipped, typically large batch x long KV that did not fit) are filled,
  in this order: (1) along KV within the same batch size and width, linearly between measured
  points and, beyond the last one, by extending the last measured segment (latency is affine in
  KV at a fixed shape: the KV read grows linearly) and, below the first one, by extending the
  first measured segment downwards (held where that would reach zero); (2) what is left, along
  the batch axis, linearly, the last segment extended above and the first value held below;
  (3) then along the width axis the same way.  Every fill is counted in
  ``source["holes_filled"]``.
- **Eager** grids cover the union of the eager and graph axes.  Measured eager points are used as
  they are; the others are the graph value plus the *measured eager overhead*: for draft and
  draft-extend the median of ``eager - graph`` over the eager points inside the graph grid, for
  verify that median taken at each measured eager batch size and interpolated in batch size
  (:data:`EAGER_OVERHEAD`; docs/backends.md says why).  A kind with no eager point at
  all borrows the other kind's overhead scaled by the ratio of kernel counts (draft: 1 layer;
  draft-extend borrows the draft's), or, with no eager point anywhere, takes the graph value and
  says so in ``source["warnings"]``.
- **Draft-extend** rows (``kind == "draft_extend"``) are optional: a profile without them (one
  recorded before the pass was profiled) still loads, and its table times a draft-extend launch
  as one draft-decode pass (``LatencyTable``'s fallback), which ``source["draft_extend"]`` and
  ``source["warnings"]`` say.
- **Prefill** rows with the same (tokens, prefix) and different request counts are averaged (the
  table has no request-count axis); the largest spread is reported.
- Values are then made non-decreasing along KV length (verify, draft) and along tokens and
  prefix (prefill) by isotonic regression (``Grid.build``); batch size and width keep what was
  measured (a kernel can be faster at width 4 than at width 3).
- **Beyond the grid** the table extrapolates linearly (never downwards) from the last segment of
  each axis (holds
  the first value below it) and flags the lookup ``out_of_grid``; the simulator counts those and
  warns in its summary.

**Held-out points** (``split == "heldout"`` rows, :mod:`backends.profile_file`) are kept out
of the grids; ``specsched fidelity`` scores the tables on them.  **Prefill-line** rows
(``split == "line"``) become ``LatencyTable.prefill_line``, read at the exact token count
(:mod:`backends.prefill_line`; not made monotone).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from backends.interp import interp2, interp3
from backends.latency_table import EXTEND_FALLBACK_CAVEAT, Grid, LatencyTable, TableExecutor
from backends.moe_prefill import moe_spec
from backends.prefill_waves import wave_spec
from backends.profile_file import (PROFILE_SCHEMA, PROFILE_VERSION, SPLIT_FIELD, SPLITS, _columns,
                                   grid_rows, heldout_rows, line_rows, profile_metadata,
                                   read_profile,
                                   write_profile)
from backends.shipped import (PROFILES_DIR, default_profile, file_sha256, profile_status,
                              shipped_profiles, status_warning)
from traces.errors import SpecschedError

__all__ = ["PROFILE_SCHEMA", "PROFILE_VERSION", "PROFILES_DIR", "SPLIT_FIELD", "SPLITS",
           "write_profile", "read_profile", "grid_rows", "heldout_rows", "line_rows", "load_profile",
           "ProfileExecutor", "default_profile", "shipped_profiles", "profile_metadata"]


# ---- grids ---------------------------------------------------------------------------------
def _fill_axis(v: np.ndarray, axis_vals: np.ndarray, axis: int, filled: np.ndarray, *,
               extend_below: bool = False) -> None:
    """Fill NaNs along ``axis`` in place: linear between known points, the last segment extended
    above; below the first known point the first known value is held, or, with
    ``extend_below`` (the KV axis, along which latency is affine at a fixed shape), the first
    segment is extended downwards (slope clipped at 0; a value it would take to zero or below is
    held instead).  Lines with fewer than two known points keep NaNs."""
    moved = np.moveaxis(v, axis, -1)
    fmoved = np.moveaxis(filled, axis, -1)
    x = axis_vals
    for idx in np.ndindex(moved.shape[:-1]):
        line = moved[idx]
        nan = np.isnan(line)
        if not nan.any() or nan.all():
            continue
        known = np.nonzero(~nan)[0]
        if len(known) < 2:
            continue
        xs, ys = x[known], line[known]
        out = np.interp(x, xs, ys)  # linear inside, held outside
        hi = x > xs[-1]
        if hi.any():
            slope = max(0.0, (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]))
            out[hi] = ys[-1] + slope * (x[hi] - xs[-1])
        lo = x < xs[0]
        if extend_below and lo.any():
            slope = max(0.0, (ys[1] - ys[0]) / (xs[1] - xs[0]))
            down = ys[0] - slope * (xs[0] - x[lo])
            out[lo] = np.where(down > 0, down, ys[0])
        line[nan] = out[nan]
        fmoved[idx][nan] = True


def _grid_from_points(points: dict[tuple, float], axes: tuple[np.ndarray, ...], name: str,
                      where: str, fill_order: tuple[int, ...],
                      kv_axis: int | None = None) -> tuple[np.ndarray, int]:
    """The grid of ``points`` over ``axes``, holes filled along each axis of ``fill_order`` in
    turn (:func:`_fill_axis`; along ``kv_axis`` the first segment is extended below), and the
    number of filled nodes."""
    v = np.full(tuple(len(a) for a in axes), np.nan)
    index = [{float(x): i for i, x in enumerate(a)} for a in axes]
    for key, val in points.items():
        v[tuple(index[d][float(key[d])] for d in range(len(axes)))] = val
    filled = np.zeros(v.shape, dtype=bool)
    for ax in fill_order:
        _fill_axis(v, axes[ax], ax, filled, extend_below=ax == kv_axis)
    if np.isnan(v).any():
        bad = np.argwhere(np.isnan(v))[0]
        at = ", ".join(f"{a[i]:g}" for a, i in zip(axes, bad))
        raise SpecschedError(f"{name}: too few measured points to fill the grid (nothing near "
                             f"({at})); measure at least two KV lengths per batch size and width",
                             path=where)
    return v, int(filled.sum())


def _build(axes, values, name, measured_mask, stats) -> Grid:
    """The grid, monotone along KV length (verify, draft) or tokens and prefix (prefill) only:
    along batch size and width a real kernel need not be monotone, and the profile keeps what
    was measured.  Measured points the isotonic fit moved are counted."""
    monotone = (0, 1) if name == "prefill" else (len(axes) - 1,)
    grid = Grid.build(axes, values, name=name, monotone=monotone)
    moved = measured_mask & (np.abs(grid.values - values) > 1e-12 * values)
    if moved.any():
        rel = float(np.max(np.abs(grid.values[moved] / values[moved] - 1)))
        stats.setdefault("monotone_adjusted", {})[name] = {"points": int(moved.sum()),
                                                           "max_rel": round(rel, 6)}
    return grid


def _lookup(grid: Grid, pt: tuple[float, ...]) -> tuple[float, bool]:
    if len(grid.axes) == 3:
        return interp3(grid.axes[0], grid.axes[1], grid.axes[2], grid.values, *pt)
    return interp2(grid.axes[0], grid.axes[1], grid.values, *pt)


def _inside(grid: Grid, pt) -> bool:
    return all(a[0] <= x <= a[-1] for a, x in zip(grid.axes, pt))


def load_profile(path: "str | Path") -> LatencyTable:
    """A profile file as a LatencyTable (validated; grids built as the module docstring says)."""
    rows, meta = read_profile(path)
    table = grid_rows(rows)
    where = str(path)
    c = _columns(table)
    kind, graph = c["kind"], c["graph"]
    bs, width, kv, tokens = (c[k].astype(np.float64) for k in ("bs", "width", "kv_len", "tokens"))
    lat = c["latency_s"]
    stats: dict[str, Any] = {"holes_filled": {}, "eager_derived": {}, "warnings": []}

    def pts(k, g, cols):
        m = (kind == k) & (graph == g)
        return {tuple(float(col[i]) for col in cols): float(lat[i]) for i in np.nonzero(m)[0]}

    def axes_of(p: dict, n: int):
        return tuple(np.unique(np.asarray([key[d] for key in p], dtype=np.float64)) for d in range(n))

    grids: dict[str, Grid] = {}
    graph_pts = {}
    passes = [("verify", (bs, width, kv), (2, 0, 1)), ("draft", (bs, kv), (1, 0))]
    if np.any(kind == "draft_extend"):
        passes.append(("draft_extend", (bs, width, kv), (2, 0, 1)))
    for k, cols, fill in passes:
        p = pts(k, True, cols)
        graph_pts[k] = p
        axes = axes_of(p, len(cols))
        vals, n = _grid_from_points(p, axes, f"{k}_graph", where, fill, kv_axis=len(cols) - 1)
        stats["holes_filled"][f"{k}_graph"] = n
        mask = ~np.isnan(_grid_from_points_mask(p, axes))
        grids[f"{k}_graph"] = _build(axes, vals, f"{k}_graph", mask, stats)

    # eager overheads measured against the graph grids
    overhead: dict[str, float | None] = {}
    by_bs: dict[str, tuple | None] = {}
    eager_pts = {}
    for k, cols, _ in passes:
        p = pts(k, False, cols)
        eager_pts[k] = p
        g = grids[f"{k}_graph"]
        matched = [(key[0], val - _lookup(g, key)[0]) for key, val in p.items() if _inside(g, key)]
        diffs = [d for _, d in matched]
        overhead[k] = float(np.median(diffs)) if diffs else None
        stats["eager_derived"][k] = {"measured_points": len(p), "matched_for_overhead": len(diffs),
                                     "overhead_s": overhead[k]}
        by_bs[k] = _overhead_by_bs(matched) if k in EAGER_OVERHEAD_BY_BS else None
    for k, other in (("verify", "draft"), ("draft", "verify"), ("draft_extend", "draft")):
        if k not in overhead:
            continue
        if overhead[k] is None and overhead[other] is not None:
            ratio = _kernel_ratio(meta.get("model"), k, other)
            if ratio is not None:
                overhead[k] = overhead[other] * ratio
                stats["eager_derived"][k]["overhead_s"] = overhead[k]
                stats["eager_derived"][k]["overhead_rule"] = (
                    f"{other} eager overhead x kernel-count ratio {ratio:.4f} (none measured for {k})")
        if overhead[k] is None:
            overhead[k] = 0.0
            stats["eager_derived"][k]["overhead_s"] = 0.0
            stats["warnings"].append(
                f"no eager {k} latency was measured: eager {k} launches are taken equal to graph "
                "replays (underestimates eager passes)")
        elif overhead[k] < 0:
            stats["warnings"].append(f"measured eager {k} overhead is negative ({overhead[k]:.3g} s); "
                                     "clipped to 0")
            overhead[k] = 0.0

    for k, cols, fill in passes:
        g = grids[f"{k}_graph"]
        p = eager_pts[k]
        n_axes = len(cols)
        e_axes = axes_of(p, n_axes) if p else tuple(np.empty(0) for _ in range(n_axes))
        axes = tuple(np.unique(np.concatenate([ga, ea])) for ga, ea in zip(g.axes, e_axes))
        full = dict(p)
        derived = 0
        for idx in np.ndindex(*(len(a) for a in axes)):
            key = tuple(float(a[i]) for a, i in zip(axes, idx))
            if key not in full and _inside(g, key):
                full[key] = _lookup(g, key)[0] + _overhead_at(key[0], overhead[k], by_bs.get(k))
                derived += 1
        vals, n = _grid_from_points(full, axes, f"{k}_eager", where, fill, kv_axis=len(cols) - 1)
        stats["eager_derived"][k]["derived_points"] = derived
        stats["holes_filled"][f"{k}_eager"] = n
        mask = ~np.isnan(_grid_from_points_mask(p, axes)) if p else np.zeros(vals.shape, bool)
        grids[f"{k}_eager"] = _build(axes, vals, f"{k}_eager", mask, stats)

    # prefill: (tokens, prefix); average over request counts
    m = kind == "prefill"
    groups: dict[tuple, list[float]] = {}
    for i in np.nonzero(m)[0]:
        groups.setdefault((float(tokens[i]), float(kv[i])), []).append(float(lat[i]))
    spread = max((max(v) / min(v) - 1 for v in groups.values() if len(v) > 1), default=0.0)
    if spread:
        stats["prefill_request_count_spread"] = round(spread, 6)
    p = {key: float(np.mean(v)) for key, v in groups.items()}
    axes = axes_of(p, 2)
    vals, n = _grid_from_points(p, axes, "prefill", where, (1, 0))
    stats["holes_filled"]["prefill"] = n
    grids["prefill"] = _build(axes, vals, "prefill", ~np.isnan(_grid_from_points_mask(p, axes)), stats)

    if "draft_extend_graph" in grids:
        grids["extend_graph"] = grids.pop("draft_extend_graph")
        grids["extend_eager"] = grids.pop("draft_extend_eager")
        stats["draft_extend"] = (f"measured: {int(np.sum((kind == 'draft_extend') & graph))} graph "
                                 f"and {int(np.sum((kind == 'draft_extend') & ~graph))} eager rows")
    else:
        stats["warnings"].append(EXTEND_FALLBACK_CAVEAT + " (the profile has no draft_extend rows)")
    if not stats["warnings"]:
        del stats["warnings"]
    held = heldout_rows(rows).num_rows
    if held:
        stats["heldout_rows"] = held  # not in the grids
    line = line_rows(rows).sort_by("tokens")  # one row a count (the file is validated)
    if line.num_rows:
        grids["prefill_line"] = Grid((line.column("tokens").to_numpy().astype(np.float64),),
                                     line.column("latency_s").to_numpy())
    source = {"backend": "profile", "file": str(path), "sha256": file_sha256(path),
              "rows": table.num_rows, "model": meta.get("model"), "gpu": meta.get("gpu"),
              "versions": meta.get("versions"), "kernels": meta.get("kernels"),
              "command": meta.get("command"), "notes": meta.get("notes"),
              "grid_points": {k: [len(a) for a in g.axes] for k, g in grids.items()},
              "beyond_grid": "linear extrapolation from the last measured segment of each axis "
                             "(first value held below the grid); such lookups are flagged "
                             "out_of_grid and counted in the run's summary",
              **stats}
    if meta.get("calibration") is not None:
        source["calibration"] = meta["calibration"]  # specsched calibrate: anchors and fit
    return LatencyTable(source=source, attention=meta.get("attention"),
                        moe=moe_spec(meta.get("model") or {}),
                        prefill_waves=wave_spec(meta.get("model"), meta.get("attention")), **grids)


#: how an eager point the sweep did not measure is derived from the graph grid: "by_bs" adds the
#: eager-minus-graph overhead measured at the eager batch sizes either side of it (the median over
#: each measured batch size's points, linear in batch size between them, held beyond them, never
#: below 0); "median" adds one overhead, the median over every measured eager point, to all
EAGER_OVERHEAD = "by_bs"
#: the passes whose overhead follows batch size under "by_bs"
EAGER_OVERHEAD_BY_BS = ("verify",)


def _overhead_by_bs(matched: list[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray] | None:
    """(measured eager batch sizes, the median eager-minus-graph overhead at each, clipped at 0)
    from ``(bs, overhead)`` pairs; None without any."""
    if not matched:
        return None
    by: dict[float, list[float]] = {}
    for b, d in matched:
        by.setdefault(float(b), []).append(float(d))
    bss = np.asarray(sorted(by), dtype=np.float64)
    return bss, np.asarray([max(0.0, float(np.median(by[b]))) for b in bss])


def _overhead_at(bs: float, median: float, by_bs: tuple | None) -> float:
    """The eager overhead added to a derived eager point at batch size ``bs``
    (:data:`EAGER_OVERHEAD`)."""
    if EAGER_OVERHEAD == "median" or by_bs is None or median == 0.0:
        return median
    return float(np.interp(bs, by_bs[0], by_bs[1]))


def _grid_from_points_mask(points: dict, axes) -> np.ndarray:
    v = np.full(tuple(len(a) for a in axes), np.nan)
    index = [{float(x): i for i, x in enumerate(a)} for a in axes]
    for key, val in points.items():
        v[tuple(index[d][float(key[d])] for d in range(len(axes)))] = val
    return v


def _kernel_ratio(model_meta: Any, k: str, other: str) -> float | None:
    """Eager kernels of a ``k`` pass over those of an ``other`` pass, from the profile's model."""
    if not isinstance(model_meta, Mapping):
        return None
    try:
        from backends.models import ModelShape
        from backends.roofline import kernel_count

        model = ModelShape.from_dict(model_meta)
    except (SpecschedError, TypeError, ValueError):
        return None
    count = {"verify": kernel_count(model), "draft": kernel_count(model.draft),
             "draft_extend": kernel_count(model.draft, extend=True)}
    return count[k] / count[other]


# ---- executor ------------------------------------------------------------------------------
class ProfileExecutor(TableExecutor):
    """A ``TableExecutor`` named ``"profile"`` over a profile file.

    ``model`` (optional) is checked against the model the profile was recorded for: a profile of
    another model or tensor-parallel degree is refused.  ``describe()["validation"]`` is the
    file's status (``backends.shipped.profile_status``); an experimental one is a caveat, which
    the run's summary lists among its warnings.
    """

    def __init__(self, path: "str | Path", *, model: Any = None):
        table = load_profile(path)
        src = table.source
        recorded = src.get("model") or {}
        if model is not None:
            _check_model(model, recorded, str(path))
        desc = {
            "profile": str(path), "sha256": src["sha256"],
            "model": recorded.get("name") if isinstance(recorded, Mapping) else recorded,
            "gpu": src.get("gpu"), "versions": src.get("versions"), "kernels": src.get("kernels"),
            "accuracy": "interpolates latencies measured on a GPU: exact on measured points, "
                        "multilinear between them, linear extrapolation beyond (flagged)",
            "holes_filled": src.get("holes_filled"), "eager_derived": src.get("eager_derived"),
            "warnings": list(src.get("warnings", [])),
            "validation": profile_status(path, src["sha256"]),
        }
        warn = status_warning(desc["validation"])
        if warn:
            desc["caveats"] = [warn]
        super().__init__("profile", table, desc)
        self.path = Path(path)


_MODEL_KEYS = ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "tp",
               "attention", "kv_lora_rank", "experts", "experts_per_token", "moe_intermediate",
               "draft_kind")


def _check_model(model: Any, recorded: Any, where: str) -> None:
    from backends.models import load_model

    want = load_model(model)
    if not isinstance(recorded, Mapping) or not recorded:
        raise SpecschedError("profile metadata does not record its model (specsched.model)",
                             path=where)
    diffs = [f"{k}: profile {recorded.get(k)!r}, asked {getattr(want, k)!r}" for k in _MODEL_KEYS
             if k in recorded and recorded.get(k) != getattr(want, k)]
    if diffs:
        raise SpecschedError(f"recorded for model {recorded.get('name')!r}, not {want.name!r} "
                             f"(tp {want.tp}): " + "; ".join(diffs), path=where)
