"""Held-out profile points: random shapes off a profile's grid, chosen deterministically from a seed.

``specsched profile --heldout N`` measures, after the grid, ``N`` shapes the grid did not
measure and stores them in the same file with ``split = "heldout"`` (``backends.profile``), so
``specsched fidelity`` can score the tables on points they never saw.  This module chooses them;
``backends.aiter.heldout_sweep`` measures them.  It imports neither torch nor the GPU code.

**The coordinates.**  A point is off the grid in the coordinates the latency table looks it up
by (``backends.latency_table``), one *section* per table:

- ``verify_graph``, ``extend_graph`` (batch size, width, KV) and ``draft_graph`` (batch size,
  KV): a graph replay is looked up at the *padded* batch size, the captured size it replays at.
  A batch of 9 pads to the ladder point 10 and is looked up there, so a held-out graph batch size
  is a point of the capture ladder that the grid did not measure (18, 20, 22 between 16 and 24),
  and the batch is full (every row a real request at the row's KV): a row records one batch size,
  the padded one.
- ``verify_eager``, ``extend_eager``, ``draft_eager``: eager launches are looked up at the real
  batch size, any integer.  Their axes are the union of the eager and the graph rows' axes (the
  eager table is built over that union: graph value plus the measured eager overhead where no
  eager point was measured), so a held-out eager point is off that union.
- ``prefill`` (tokens, prefix): one request per pass, as the grid measures it; for one request
  the table's attention-equivalent prefix is the prefix itself.

**The draw.**  :func:`allocate` spreads ``N`` over the sections present (:data:`SHARES`, by
largest remainder).  For each point, a non-empty subset of the axes that have off-grid values is
drawn uniformly; each axis in it takes an off-grid value (a segment between adjacent grid values
drawn uniformly among those with candidates inside, then a candidate inside it uniformly), every
other axis a measured grid value.  Every value lies strictly inside the grid's span on its axis
(interpolation, never extrapolation).  Widths are restricted to what the kernels take
(``kernel_widths``: MLA models 1, 2, 3, 4) and, for graphs, to the widths graphs are captured
for; batch sizes of graphs to the capture ladder.  A point the GPU cannot hold (``fits``) or
that repeats one already chosen or present (``exclude``) is drawn again, at most
:data:`ATTEMPTS_PER_POINT` times per point; a section that runs out is reported short.  Each
section draws from its own generator, ``PCG64([seed, section index])``, so the points of one
section do not depend on which other sections are present.

**What a row cannot represent.**  A profile row has one ``kv_len`` and one ``bs``: a verify batch
with mixed KV lengths (the straggler-aware lookup keys it by mean and maximum KV) and a graph
replay padded above its real batch size cannot be written as a row, so neither is held out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

__all__ = ["DEFAULT_HELDOUT", "SECTIONS", "SHARES", "ATTEMPTS_PER_POINT", "HeldoutPoint",
           "grid_span", "allocate", "choose_heldout", "is_off_grid"]

#: Held-out points ``specsched profile`` measures unless told otherwise (``--heldout``).
DEFAULT_HELDOUT = 40
#: (kind, graph, axis names) per section, in drawing order.
SECTIONS: dict[str, tuple[str, bool, tuple[str, ...]]] = {
    "verify_graph": ("verify", True, ("bs", "width", "kv_len")),
    "verify_eager": ("verify", False, ("bs", "width", "kv_len")),
    "draft_graph": ("draft", True, ("bs", "kv_len")),
    "draft_eager": ("draft", False, ("bs", "kv_len")),
    "extend_graph": ("draft_extend", True, ("bs", "width", "kv_len")),
    "extend_eager": ("draft_extend", False, ("bs", "width", "kv_len")),
    "prefill": ("prefill", False, ("tokens", "kv_len")),
}
#: Relative share of each section (40 points: exactly these counts).  Verify weighs most: decode
#: steps are most of a run's time.
SHARES: dict[str, int] = {"verify_graph": 12, "verify_eager": 6, "draft_graph": 5,
                          "draft_eager": 3, "extend_graph": 5, "extend_eager": 3, "prefill": 6}
#: Draws allowed per requested point before a section is reported short.
ATTEMPTS_PER_POINT = 50


@dataclass(frozen=True, order=True)
class HeldoutPoint:
    """One shape to measure, in the profile's row coordinates (``backends.profile``)."""

    kind: str
    graph: bool
    bs: int
    width: int
    kv_len: int
    tokens: int

    @property
    def key(self) -> tuple:
        """The profile's duplicate key: (kind, graph, bs, width, kv_len, tokens)."""
        return (self.kind, self.graph, self.bs, self.width, self.kv_len, self.tokens)


Span = dict  # section -> tuple of axes (sorted tuples of ints), in SECTIONS' axis order


def _rows_of(rows: Any) -> list[dict]:
    return rows.to_pylist() if hasattr(rows, "to_pylist") else list(rows)


def grid_span(rows: Any) -> Span:
    """The axes of each section of the grid built from ``rows`` (grid rows only: a pyarrow table
    or row dicts), as ``backends.profile.load_profile`` builds them: graph axes from the graph
    rows, eager axes the union of eager and graph rows' axes, prefill (tokens, prefix).  A kind
    without graph rows (prefill: without rows) has no section."""
    vals: dict[tuple[str, bool], list[set[int]]] = {}
    for r in _rows_of(rows):
        k, g = str(r["kind"]), bool(r["graph"])
        names = ("tokens", "kv_len") if k == "prefill" else (
            ("bs", "kv_len") if k == "draft" else ("bs", "width", "kv_len"))
        sets = vals.setdefault((k, g), [set() for _ in names])
        for s, name in zip(sets, names):
            s.add(int(r[name]))
    span: Span = {}
    for section, (kind, graph, names) in SECTIONS.items():
        if kind == "prefill":
            if (kind, False) in vals:
                span[section] = tuple(tuple(sorted(s)) for s in vals[(kind, False)])
            continue
        if (kind, True) not in vals:
            continue
        sets = [set(s) for s in vals[(kind, True)]]
        if not graph:
            for s, e in zip(sets, vals.get((kind, False), [set() for _ in names])):
                s |= e
        span[section] = tuple(tuple(sorted(s)) for s in sets)
    return span


def allocate(n: int, sections: Iterable[str],
             shares: dict[str, float] | None = None) -> dict[str, int]:
    """``n`` points over ``sections`` in proportion to ``shares`` (default :data:`SHARES`), by
    largest remainder (ties go to the earlier section in :data:`SECTIONS`)."""
    shares = SHARES if shares is None else shares
    names = [s for s in SECTIONS if s in set(sections)]
    if n <= 0 or not names:
        return {s: 0 for s in names}
    total = sum(shares[s] for s in names) or 1.0
    exact = {s: n * shares[s] / total for s in names}
    out = {s: int(exact[s]) for s in names}
    left = n - sum(out.values())
    order = sorted(names, key=lambda s: (-(exact[s] - out[s]), names.index(s)))
    for s in order[:left]:
        out[s] += 1
    return out


def _off_segments(axis: Sequence[int], allowed: Callable[[int], bool] | None,
                  among: Sequence[int] | None) -> list[list[int]]:
    """For each segment between adjacent values of ``axis``: the candidates strictly inside it
    (integers, or the values of ``among``), kept by ``allowed``; segments without any dropped."""
    segs = []
    for lo, hi in zip(axis[:-1], axis[1:]):
        if among is not None:
            cand = [x for x in among if lo < x < hi]
        else:
            cand = range(lo + 1, hi)
        if allowed is not None:
            cand = [x for x in cand if allowed(x)]
        if len(cand):
            segs.append(cand)
    return segs


def _candidates(section: str, axes: tuple, ladder: Sequence[int],
                graph_widths: Sequence[int] | None,
                kernel_widths: Sequence[int] | None) -> list[list[list[int]]]:
    """Off-grid segments per axis of ``section``."""
    kind, graph, names = SECTIONS[section]
    ok_w = None
    if kernel_widths is not None or (graph and graph_widths is not None):
        kw = set(kernel_widths) if kernel_widths is not None else None
        gw = set(graph_widths) if graph and graph_widths is not None else None
        ok_w = lambda w: (kw is None or w in kw) and (gw is None or w in gw)  # noqa: E731
    out = []
    for name, axis in zip(names, axes):
        if name == "bs" and graph:
            out.append(_off_segments(axis, None, sorted(set(int(b) for b in ladder))))
        elif name == "width":
            out.append(_off_segments(axis, ok_w, None))
        else:
            out.append(_off_segments(axis, None, None))
    return out


def _point(section: str, vals: dict[str, int]) -> HeldoutPoint:
    kind, graph, _ = SECTIONS[section]
    if kind == "prefill":
        return HeldoutPoint(kind, False, 1, 0, vals["kv_len"], vals["tokens"])
    w = 1 if kind == "draft" else vals["width"]
    return HeldoutPoint(kind, graph, vals["bs"], w, vals["kv_len"], vals["bs"] * w)


def is_off_grid(point: HeldoutPoint, span: Span) -> bool:
    """Whether ``point`` lies off its section's grid in at least one axis (and so was not
    measured by it)."""
    for section, (kind, graph, names) in SECTIONS.items():
        if kind == point.kind and graph == point.graph and section in span:
            return any(getattr(point, n) not in axis for n, axis in zip(names, span[section]))
    return True


def choose_heldout(span: Span, n: int, seed: int, *, ladder: Sequence[int],
                   graph_widths: Sequence[int] | None = None,
                   kernel_widths: Sequence[int] | None = None,
                   fits: Callable[[HeldoutPoint], bool] | None = None,
                   exclude: Iterable[tuple] = ()) -> tuple[list[HeldoutPoint], dict[str, Any]]:
    """``n`` held-out points off the grid ``span`` (:func:`grid_span`), drawn from ``seed`` as the
    module docstring says; returns (points in measuring order, per-section counts
    ``{"asked": .., "chosen": ..}`` plus ``"none_off_grid"``: sections with no off-grid value)."""
    if n < 0:
        raise ValueError("n must be >= 0")
    cands = {s: _candidates(s, span[s], ladder, graph_widths, kernel_widths)
             for s in SECTIONS if s in span}
    usable = [s for s, c in cands.items() if any(c)]
    quota = allocate(n, usable)
    seen = set(exclude)
    chosen: list[HeldoutPoint] = []
    report: dict[str, Any] = {}
    for idx, section in enumerate(SECTIONS):
        if section not in quota:
            continue
        want = quota[section]
        rng = np.random.Generator(np.random.PCG64([int(seed), idx]))
        axes, segs = span[section], cands[section]
        names = SECTIONS[section][2]
        offable = [i for i, s in enumerate(segs) if s]
        got = 0
        for _ in range(want * ATTEMPTS_PER_POINT):
            if got == want:
                break
            mask = int(rng.integers(1, 2 ** len(offable)))
            off = {offable[b] for b in range(len(offable)) if mask >> b & 1}
            vals = {}
            for i, name in enumerate(names):
                if i in off:
                    seg = segs[i][int(rng.integers(len(segs[i])))]
                    vals[name] = int(seg[int(rng.integers(len(seg)))])
                else:
                    vals[name] = int(axes[i][int(rng.integers(len(axes[i])))])
            p = _point(section, vals)
            if p.key in seen or (fits is not None and not fits(p)):
                continue
            seen.add(p.key)
            chosen.append(p)
            got += 1
        report[section] = {"asked": want, "chosen": got}
    none_off = sorted(s for s in cands if s not in usable)
    if none_off:
        report["none_off_grid"] = none_off
    chosen.sort()
    return chosen, report
