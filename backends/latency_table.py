"""Latency tables: forward-pass latency as a function of shape, on grids, evaluated fast.

A :class:`LatencyTable` holds one grid per kind of forward pass:

========================  ======================================================  ============
grid                      axes (in this order)                                    value
========================  ======================================================  ============
``verify_graph``          padded batch size, width (query rows per request),      seconds
                          KV length per request
``verify_eager``          batch size, width, KV length per request                seconds
``draft_graph``           padded batch size, KV length per request                seconds/pass
``draft_eager``           batch size, KV length per request                       seconds/pass
``extend_graph``          padded batch size, width (query rows per request),      seconds
                          KV length per request before the pass
``extend_eager``          batch size, width, KV length per request                seconds
``prefill``               tokens in the pass, attention-equivalent prefix         seconds
========================  ======================================================  ============

The draft-extend grids (the draft model over each request's accepted tokens after a verify,
:class:`~backends.protocol.DraftExtendBatch`) are optional: a table built without them (a
profile recorded before the pass was profiled, a hand-made table) times a draft-extend launch as
one draft-decode pass at the same batch size and KV length -- an underestimate, since the pass
computes ``width`` rows per request -- and says so in ``source["draft_extend"]`` and in
:data:`EXTEND_FALLBACK_CAVEAT`, which :meth:`TableExecutor.describe` lists among its caveats.

Evaluation is multilinear between grid points, exact on them, and beyond the grid it
extrapolates linearly from the last segment of each axis, never downwards (below the first point
it holds the first value); any evaluation outside the grid is flagged so the summary can warn.
A table may declare axes along which latency must not decrease (a profile: KV length and prefill
tokens): values along those are made monotone when the table is built, by isotonic regression
(pool-adjacent-violators, which averages a noisy pair instead of raising one to the other), so
interpolation along them is monotone.  Other axes keep what was measured: a real kernel can be
faster at width 4 than at width 3.

How a batch maps onto the axes (the same rule for every table executor, and for the engine's
compiled fast path, which calls the same functions):

- verify: width = the launch width for uniform launches, ``sum(widths) / bs`` (fractional)
  for ragged and unsafe-derived ones; KV = ``sum(kv_lens) / bs_padded`` -- padded rows carry
  SGLang's fill length, which is negligible, so this keeps the total KV read equal -- or, when
  the table carries the attention kernel's occupancy (``LatencyTable.attention``), the
  straggler-aware KV between that mean and the longest request: on AITER's 2D kernel the KV at
  which the launch's uniform latency line equals the lone-straggler form ``max(T_u(mean),
  T_0 + a x kv_max)`` (:func:`lone_straggler_kv`, when the table's model is known), otherwise
  the waves and tail rule (:func:`effective_kv`).
- draft: KV by the waves and tail rule (its 2D decode kernel included); the phase costs ``passes`` times the per-pass value.
- draft-extend: the batch's ``width`` (uniform: every request, padded ones too, holds ``width``
  rows); KV as for verify, with ``width`` query rows per request in the attention launch.
- prefill: tokens T = the pass's total; prefix = the *attention-equivalent prefix*
  ``A / T - T / 2`` with ``A = sum_i t_i (p_i + t_i / 2)`` the query-key pairs the pass attends
  (request i computes t_i tokens after p_i cached ones).  A profile measures one request per
  pass, whose pairs are ``T (p + T / 2)``; a pass of several requests attends far fewer pairs
  than one request of the same total length, and this maps it onto the single-request prefill
  with the same tokens and the same attention work.  Below the grid's first prefix (a negative
  equivalent prefix: less attention than one causal request of T tokens), latency follows the
  first segment's slope down to the no-attention cost at ``-T / 2`` (prefill attention is linear
  in the keys attended); this is a rule, not an extrapolation, and is not flagged.  On a MoE
  model (``LatencyTable.moe``) the lookup between two grid tokens follows the fused-MoE
  kernel's block count rather than a line (:mod:`backends.moe_prefill`); on any model with the
  attention metadata, at a prefix, it follows the attention launch's waves
  (``LatencyTable.prefill_waves``, :mod:`backends.prefill_waves`).  With a prefill line
  (``LatencyTable.prefill_line``) the line's time at the exact token count replaces the grid's
  prefix-0 value, the grid adding the prefix's cost (:mod:`backends.prefill_line`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from backends.attention_kv import (ATT_BSW, ATT_DLAYERS, ATT_LAYERS, ATT_MLA, ATT_ON,
                                   attention_rows, bs_waves, effective_kv, resolve_kv_lookup,
                                   table_attention, verify_kv)
from backends.moe_prefill import block_costs, describe, moe_params
from backends import prefill_waves as pw
from backends.prefill_line import _grid_prefill, line_arrays, prefill_lookup
from backends import prefill_line as pl
from backends.mla_waves import interp2_waves, interp3_waves
from backends.protocol import DraftBatch, DraftExtendBatch, PrefillBatch, VerifyBatch, VerifyTiming

__all__ = ["Grid", "LatencyTable", "TableExecutor", "verify_axes", "draft_axes", "extend_axes",
           "prefill_axes", "prefill_lookup", "extend_arrays", "isotonic", "EXTEND_FALLBACK_CAVEAT",
           "EXTEND_FALLBACK_WIDTHS"]

#: What a table without measured draft-extend latencies says about the pass (``source`` and caveats).
EXTEND_FALLBACK_CAVEAT = ("draft-extend not measured: each draft-extend pass is timed as one "
                          "draft-decode pass at the same batch size and KV length (an "
                          "underestimate: the pass computes `width` rows per request)")
#: The width axis of a fallback draft-extend grid: both points hold the draft-decode value, so
#: every width up to the last maps to it without being flagged as outside the grid.
EXTEND_FALLBACK_WIDTHS = (1.0, 1024.0)


@dataclass(frozen=True)
class Grid:
    """Values on a rectilinear grid.  ``axes[i]`` strictly increasing float64; ``values.shape``
    equals ``tuple(len(a) for a in axes)``."""

    axes: tuple[np.ndarray, ...]
    values: np.ndarray

    @staticmethod
    def build(axes, values, *, name: str = "grid",
              monotone: tuple[int, ...] | None = None) -> "Grid":
        """Validate and store a grid; ``monotone`` lists the axes along which latency may not
        decrease (default: every axis)."""
        ax = tuple(np.ascontiguousarray(np.asarray(a, dtype=np.float64)) for a in axes)
        v = np.array(values, dtype=np.float64)
        shape = tuple(len(a) for a in ax)
        if v.shape != shape:
            raise ValueError(f"{name}: values have shape {v.shape}, axes give {shape}")
        for i, a in enumerate(ax):
            if len(a) == 0 or (len(a) > 1 and np.any(np.diff(a) <= 0)):
                raise ValueError(f"{name}: axis {i} must be non-empty and strictly increasing")
        if not np.all(np.isfinite(v)) or np.any(v <= 0):
            raise ValueError(f"{name}: latencies must be finite and > 0")
        axes_m = tuple(range(v.ndim)) if monotone is None else tuple(monotone)
        for i in axes_m:
            v = _isotonic_along(v, i)
        for i in axes_m:  # isotonic along one axis can dent another by rounding: settle it
            v = np.maximum.accumulate(v, axis=i)
        return Grid(ax, np.ascontiguousarray(v))


def _isotonic_along(v: np.ndarray, axis: int) -> np.ndarray:
    """:func:`isotonic` applied to every line along ``axis`` that is not already monotone."""
    moved = np.moveaxis(v, axis, -1).copy()
    flat = moved.reshape(-1, moved.shape[-1])
    for row in np.flatnonzero(np.any(np.diff(flat, axis=1) < 0, axis=1)):
        flat[row] = isotonic(flat[row])
    return np.moveaxis(flat.reshape(moved.shape), -1, axis)


def isotonic(y: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence closest to ``y`` in least squares (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [mean, weight]
    for x in np.asarray(y, dtype=np.float64):
        blocks.append([float(x), 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2 = blocks.pop()
            m1, w1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2])
    return np.concatenate([np.full(int(w), m) for m, w in blocks])


def _batch_kv(kv_lens, nseq: int, rows: float, decode: bool, att: np.ndarray | None,
              lone: tuple | None = None) -> float:
    """The KV coordinate of a batch; ``lone``: ``(layers, grid, bs, width)`` of a verify or
    draft-extend launch, for :func:`verify_kv` (:func:`effective_kv` without)."""
    kv = np.asarray(kv_lens, dtype=np.float64)
    if att is None or not len(kv):
        return float(kv.sum()) / nseq
    args = (float(kv.sum()), float(kv.max()), float(nseq), float(len(kv)), float(rows))
    if lone is None or lone[1] is None:
        return float(effective_kv(*args, decode, att))
    layers, grid, bs, width = lone
    a0, a1, a2 = grid.axes
    return float(verify_kv(*args, float(layers), att, a0, a1, a2, grid.values, float(bs),
                           float(width)))


def verify_axes(batch: VerifyBatch, att: np.ndarray | None = None, grid: Grid | None = None
                ) -> tuple[float, float, float]:
    """(batch size, width, KV length) at which a verify launch is looked up.

    ``att``: :func:`attention_params` for the straggler-aware KV (the mean without); ``grid``:
    the verify grid the launch is looked up on (graph or eager), which a launch on the 2D kernel
    needs for the lone-straggler form (:func:`verify_kv`; without it, :func:`effective_kv`)."""
    bs = batch.bs_padded if batch.graph else batch.bs_real
    if batch.mode == "uniform":
        width = float(batch.launch_width)
    else:
        width = float(np.sum(batch.widths)) / batch.bs_real
    rows = attention_rows(False, batch.graph, float(bs), float(batch.launch_width),
                          float(np.sum(batch.widths)))
    lone = None if att is None else (att[ATT_LAYERS], grid, bs, width)
    return float(bs), width, _batch_kv(batch.kv_lens, bs, rows, False, att, lone)


def draft_axes(batch: DraftBatch, att: np.ndarray | None = None) -> tuple[float, float]:
    """(batch size, KV length) at which one draft pass is looked up (``att`` as for
    :func:`verify_axes`)."""
    bs = batch.bs_padded if batch.graph else batch.bs_real
    rows = attention_rows(True, batch.graph, float(bs), 1.0, float(batch.bs_real))
    return float(bs), _batch_kv(batch.kv_lens, bs, rows, True, att)


def extend_axes(batch: DraftExtendBatch, att: np.ndarray | None = None,
                grid: Grid | None = None) -> tuple[float, float, float]:
    """(batch size, width, KV length) at which a draft-extend launch is looked up: the padded
    batch for a graph, ``batch.width`` rows per request, and the KV rule of :func:`verify_axes`
    (the attention launch has ``width`` query rows per request; ``att`` as there, ``grid`` the
    draft-extend grid, the draft model's layers for the lone-straggler form)."""
    bs = batch.bs_padded if batch.graph else batch.bs_real
    width = float(batch.width)
    rows = attention_rows(False, batch.graph, float(bs), width, float(batch.bs_real) * width)
    lone = None if att is None else (att[ATT_DLAYERS], grid, bs, width)
    return float(bs), width, _batch_kv(batch.kv_lens, bs, rows, False, att, lone)


def prefill_axes(batch: PrefillBatch) -> tuple[float, float]:
    """(tokens, attention-equivalent prefix) at which a prefill pass is looked up."""
    t = np.asarray(batch.tokens, dtype=np.float64)
    p = np.asarray(batch.prefix, dtype=np.float64)
    tokens = float(t.sum())
    if not tokens:
        return 0.0, 0.0
    pairs = float(np.sum(t * (p + t / 2.0)))
    return tokens, pairs / tokens - tokens / 2.0


@dataclass(frozen=True)
class LatencyTable:
    """Every kind of forward pass's latency on grids (see the module docstring)."""

    verify_graph: Grid
    verify_eager: Grid
    draft_graph: Grid
    draft_eager: Grid
    prefill: Grid
    source: dict[str, Any] = field(default_factory=dict)
    #: the attention kernel's grid and residency as profiled (``backends.aiter.occupancy``):
    #: lets lookups use a batch's straggler-aware KV (:func:`effective_kv`)
    attention: dict[str, Any] | None = None
    #: draft-extend passes (both or neither); without them, fallback grids are built from the
    #: draft-decode grids (see the module docstring) and ``extend_measured`` is false
    extend_graph: Grid | None = None
    extend_eager: Grid | None = None
    #: the routed experts of a MoE model (``backends.moe_prefill.moe_spec``): prefill lookups
    #: then follow the fused-MoE kernel's block count between grid tokens; ``None``: bilinear
    moe: dict[str, Any] | None = None
    #: the prefill attention launch (``backends.prefill_waves.wave_spec``): prefill lookups at a
    #: prefix then follow its waves between grid tokens; ``None``: no wave term
    prefill_waves: dict[str, Any] | None = None
    #: a prefill line (:mod:`backends.prefill_line`): one request's prefill at prefix 0 at
    #: consecutive token counts, 1 axis (tokens), read at the exact count; ``None``: the grid only
    prefill_line: Grid | None = None

    def __post_init__(self) -> None:
        if (self.extend_graph is None) != (self.extend_eager is None):
            raise ValueError("LatencyTable: give both extend_graph and extend_eager, or neither")
        if self.extend_graph is None:
            for name, draft in (("extend_graph", self.draft_graph), ("extend_eager", self.draft_eager)):
                object.__setattr__(self, name, _fallback_extend(draft, name))
            object.__setattr__(self, "source", {**self.source, "draft_extend": EXTEND_FALLBACK_CAVEAT})
        for name, ndim in (("verify_graph", 3), ("verify_eager", 3), ("draft_graph", 2),
                           ("draft_eager", 2), ("prefill", 2), ("extend_graph", 3),
                           ("extend_eager", 3)):
            g = getattr(self, name)
            if len(g.axes) != ndim:
                raise ValueError(f"LatencyTable.{name} needs {ndim} axes, got {len(g.axes)}")
        # the attention vector the batch-size lookups read (backends.mla_waves), derived once
        object.__setattr__(self, "_att_vec", table_attention(self))
        # the prefill lookup's terms between grid tokens, fitted from this grid: the attention's
        # waves at a prefix (backends.prefill_waves), then the MoE block staircase
        # (backends.moe_prefill) on the values without the waves' share
        a0, a1 = self.prefill.axes
        wprm = pw.wave_params(self.prefill_waves)
        wfit: dict = {}
        wcost = pw.wave_costs(a0, a1, self.prefill.values, wprm, wfit)
        prm = moe_params(self.moe)
        fit: dict = {}
        cost = block_costs(a0, self.prefill.values - pw.wave_staircase(a0, wcost, wprm), prm, fit)
        object.__setattr__(self, "_pf_moe", prm)
        object.__setattr__(self, "_pf_cost", cost)
        object.__setattr__(self, "_pf_wprm", wprm)
        object.__setattr__(self, "_pf_wave", wcost)
        extra = {}
        if self.moe:
            extra["prefill_moe_blocks"] = describe(self.moe, cost, fit)
        if self.prefill_waves:
            extra["prefill_attention_waves"] = pw.describe(self.prefill_waves, a1, wcost, wfit)
        line = self.prefill_line
        if line is not None and len(line.axes) != 1:
            raise ValueError(f"LatencyTable.prefill_line needs 1 axis, got {len(line.axes)}")
        lt, lv = line_arrays(*(line.axes[0], line.values) if line is not None else ((), ()))
        if lt.size:
            at0 = np.array([_grid_prefill(a0, a1, self.prefill.values, cost, prm, wcost, wprm,
                                          float(t), 0.0)[0] for t in a0])
            lv, extra["prefill_line"] = pl.leveled(lt, lv, a0, at0)
        object.__setattr__(self, "_pl_tok", lt)
        object.__setattr__(self, "_pl_val", lv)
        if extra:
            object.__setattr__(self, "source", {**self.source, **extra})

    def set_bs_interp(self, bs_interp: str) -> None:
        """Place batch sizes between grid points as ``backend.bs_interp`` says
        (``backends.attention_kv.bs_waves``); in place, so an executor holding this table's
        attention vector follows. A table without attention occupancy keeps the line."""
        att = self._att_vec
        if att[ATT_ON]:
            att[ATT_BSW] = bs_waves(bs_interp, bool(att[ATT_MLA]))

    def verify_s(self, bs: float, width: float, kv: float, graph: bool) -> tuple[float, bool]:
        g = self.verify_graph if graph else self.verify_eager
        value, outside = interp3_waves(g.axes[0], g.axes[1], g.axes[2], g.values, bs, width, kv,
                                       width, self._att_vec)
        return float(value), bool(outside)

    def draft_pass_s(self, bs: float, kv: float, graph: bool) -> tuple[float, bool]:
        g = self.draft_graph if graph else self.draft_eager
        value, outside = interp2_waves(g.axes[0], g.axes[1], g.values, bs, kv, self._att_vec)
        return float(value), bool(outside)

    @property
    def extend_measured(self) -> bool:
        """False when the draft-extend grids are the draft-decode fallback (``source`` says so)."""
        return self.source.get("draft_extend") != EXTEND_FALLBACK_CAVEAT

    def extend_s(self, bs: float, width: float, kv: float, graph: bool) -> tuple[float, bool]:
        """Seconds of one draft-extend launch at (batch size, width, KV), and whether the lookup
        left the grid."""
        g = self.extend_graph if graph else self.extend_eager
        value, outside = interp3_waves(g.axes[0], g.axes[1], g.axes[2], g.values, bs, width, kv,
                                       width, self._att_vec)
        return float(value), bool(outside)

    def prefill_s(self, tokens: float, prefix: float) -> tuple[float, bool]:
        g = self.prefill
        value, outside = prefill_lookup(g.axes[0], g.axes[1], g.values, self._pf_cost,
                                        self._pf_moe, self._pf_wave, self._pf_wprm,
                                        self._pl_tok, self._pl_val, float(tokens), float(prefix))
        return float(value), bool(outside)


def _fallback_extend(draft: Grid, name: str) -> Grid:
    """A draft-extend grid that is the draft-decode grid at every width (the fallback)."""
    if len(draft.axes) != 2:
        raise ValueError(f"LatencyTable.draft grids need 2 axes to derive {name}")
    widths = np.asarray(EXTEND_FALLBACK_WIDTHS, dtype=np.float64)
    values = np.repeat(draft.values[:, None, :], len(widths), axis=1)
    return Grid((draft.axes[0], widths, draft.axes[1]), np.ascontiguousarray(values))


def extend_arrays(table: LatencyTable) -> tuple[np.ndarray, ...]:
    """The draft-extend grids as the compiled engine reads them: ``(graph bs, graph width,
    graph KV, graph values, eager bs, eager width, eager KV, eager values)``, contiguous float64
    (the fallback grids when the table has no measured draft-extend latencies), for
    :func:`interp3`."""
    out = []
    for g in (table.extend_graph, table.extend_eager):
        out.extend(np.ascontiguousarray(a, dtype=np.float64) for a in g.axes)
        out.append(np.ascontiguousarray(g.values, dtype=np.float64))
    return tuple(out)


class TableExecutor:
    """An :class:`~backends.protocol.Executor` whose every latency comes from a LatencyTable."""

    def __init__(self, name: str, table: LatencyTable, description: dict[str, Any] | None = None):
        self.name = name
        self._table = table
        self._description = dict(description or {})
        att = table._att_vec
        self._att = att if att[ATT_ON] else None  # the same lookups as the engine's fast path
        self._fluid = False
        self.set_kv_lookup("auto")

    def set_kv_lookup(self, kv_lookup: str) -> None:
        """Look batches up as the engine's ``backend.kv_lookup`` does when it calls this executor
        per pass (a wrapper that hides the table): ``auto`` and ``fluid`` take the MLA fluid
        lookup for verify and draft-extend launches on a table with the MLA decode's occupancy
        (``fluid`` on any other table is the engine's error to raise); ``straggler`` and ``mean``
        the straggler rule (``mean`` switches off the engine's compiled lookups only)."""
        mla = self._att is not None and bool(self._att[ATT_MLA])
        self._fluid = mla and resolve_kv_lookup(kv_lookup, mla) == "fluid"

    def set_bs_interp(self, bs_interp: str) -> None:
        """The engine's ``backend.bs_interp``, on this executor's table."""
        self._table.set_bs_interp(bs_interp)

    def _fluid_kv(self, kv_lens, bs: float, width: float, grid: Grid, kv: float) -> float:
        """The fluid lookup's KV of a launch (``kv`` where it does not apply), as
        ``simulator.timing._fluid_lookups`` computes it on the fast path."""
        if not self._fluid or not len(kv_lens):
            return kv
        from backends.mla_fluid import FLUID_NSAT, FLUID_OVERHEAD, fluid_kv, scratch_size
        from backends.mla_waves import kernel_rows

        rows = kernel_rows(float(width))
        scratch = np.zeros(scratch_size(int(16 * max(bs, len(kv_lens)))), np.float64)
        k = fluid_kv(np.asarray(kv_lens, np.int64), len(kv_lens), float(bs), float(width), rows,
                     self._att, FLUID_NSAT, FLUID_OVERHEAD, *grid.axes, grid.values, scratch)
        return float(k) if k >= 0.0 else kv

    def latency_table(self) -> LatencyTable:
        return self._table

    def prefill(self, batch: PrefillBatch) -> float:
        return self._table.prefill_s(*prefill_axes(batch))[0]

    def draft(self, batch: DraftBatch) -> float:
        bs, kv = draft_axes(batch, self._att)
        return batch.passes * self._table.draft_pass_s(bs, kv, batch.graph)[0]

    def verify(self, batch: VerifyBatch) -> VerifyTiming:
        grid = self._table.verify_graph if batch.graph else self._table.verify_eager
        bs, width, kv = verify_axes(batch, self._att, grid)
        kv = self._fluid_kv(batch.kv_lens, batch.bs_padded, width, grid, kv)
        value, outside = self._table.verify_s(bs, width, kv, batch.graph)
        return VerifyTiming(latency_s=value, out_of_grid=outside)

    def draft_extend(self, batch: DraftExtendBatch) -> float:
        grid = self._table.extend_graph if batch.graph else self._table.extend_eager
        bs, width, kv = extend_axes(batch, self._att, grid)
        kv = self._fluid_kv(batch.kv_lens, batch.bs_padded, width, grid, kv)
        return self._table.extend_s(bs, width, kv, batch.graph)[0]

    def describe(self) -> dict[str, Any]:
        out = {"backend": self.name, **self._description, "table": dict(self._table.source)}
        if not self._table.extend_measured:
            out["caveats"] = list(out.get("caveats", [])) + [EXTEND_FALLBACK_CAVEAT]
        return out
