"""Deliberately wrong copies of a profile: what the fidelity checks must catch.

Each degradation rewrites a profile's rows the way a broken profile or lookup would be wrong, and
:func:`write_degraded` writes the result as an ordinary profile file (same metadata), so
``specsched fidelity --profile`` judges it like any other:

- ``kv_ignored``: every verify and draft latency replaced by its value at one KV length (each
  batch size and width keeps its own curve's value there): a lookup blind to KV.
- ``width_ignored``: every verify latency replaced by its value at one width.
- ``bs_ignored``: every verify and draft latency replaced by its value at one batch size.
- ``graph_eager_swapped``: verify and draft graph rows marked eager and eager rows graph.
- ``scaled``: every latency (and its p10/p90) multiplied by one factor.

A replacement value is read off the row's own curve along the ignored axis, linearly between the
measured points around it (held beyond them); p10 and p90 move with the median.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from backends.calibrate import DECODE_KINDS

__all__ = ["DEGRADATIONS", "degrade_rows", "scale_rows", "write_degraded",
           "write_rows_changed"]


def _pin(rows: list[dict], axis: str, value: float, kinds: tuple[str, ...]) -> list[dict]:
    """Rows of ``kinds`` with each latency replaced by its curve's value at ``axis = value``."""
    keys = [a for a in ("bs", "width", "kv_len") if a != axis]
    curves: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        if r["kind"] in kinds:
            curves.setdefault((r["kind"], r["graph"], *(r[a] for a in keys)), []).append(i)
    out = [dict(r) for r in rows]
    for ix in curves.values():
        x = np.array([rows[i][axis] for i in ix], dtype=np.float64)
        y = np.array([rows[i]["latency_s"] for i in ix])
        order = np.argsort(x)
        v = float(np.interp(value, x[order], y[order]))
        for i in ix:
            _scale(out[i], v / rows[i]["latency_s"])
    return out


def _scale(r: dict, f: float) -> None:
    r["latency_s"] *= f
    r["p10_s"] *= f
    r["p90_s"] *= f


def _swap(rows: list[dict]) -> list[dict]:
    return [dict(r, graph=not r["graph"]) if r["kind"] in DECODE_KINDS else dict(r)
            for r in rows]


def scale_rows(rows: list[dict], factor: float) -> list[dict]:
    """Copies of ``rows`` with every latency (and its p10/p90) multiplied by ``factor``."""
    out = [dict(r) for r in rows]
    for r in out:
        _scale(r, factor)
    return out


#: name -> (what it does, function of the rows); the values are the ones fidelity's test and
#: ``benchmarks/bench_fidelity_degraded.py`` use: KV 2,048 (a grid line, inside the KV range of
#: the conversation sample), width 4 (the fixed policy's start-up width), batch size 8 (the
#: largest of the dense 1-8 ladder), and +5%
DEGRADATIONS: dict[str, tuple[str, Callable[[list[dict]], list[dict]]]] = {
    "kv_ignored": ("verify and draft latency at KV 2,048 whatever the KV",
                   lambda rows: _pin(rows, "kv_len", 2048, DECODE_KINDS)),
    "width_ignored": ("verify latency at width 4 whatever the width",
                      lambda rows: _pin(rows, "width", 4, ("verify",))),
    "bs_ignored": ("verify and draft latency at batch size 8 whatever the batch",
                   lambda rows: _pin(rows, "bs", 8, DECODE_KINDS)),
    "graph_eager_swapped": ("verify and draft graph rows read as eager and eager as graph", _swap),
    "scaled": ("every latency x 1.05", lambda rows: scale_rows(rows, 1.05)),
}


def degrade_rows(rows: list[dict], name: str) -> list[dict]:
    """``rows`` (profile rows as dicts) degraded by :data:`DEGRADATIONS` ``[name]``."""
    from traces.errors import SpecschedError

    if name not in DEGRADATIONS:
        raise SpecschedError(f"unknown degradation {name!r} (choose from {', '.join(DEGRADATIONS)})")
    return DEGRADATIONS[name][1](rows)


def write_rows_changed(src: str | Path, dst: str | Path,
                       change: Callable[[list[dict]], list[dict]], note: str) -> Path:
    """Write ``src`` with its rows passed through ``change`` to ``dst`` (a profile file,
    atomically), its metadata kept and ``note`` added to its notes."""
    from backends.profile import read_profile, write_profile

    table, meta = read_profile(src)
    keep: dict[str, Any] = dict(meta)
    keep["notes"] = [*(keep.get("notes") or []), note]
    return write_profile(change(table.to_pylist()), dst, keep)


def write_degraded(src: str | Path, dst: str | Path, name: str) -> Path:
    """Write ``src`` degraded by ``name`` to ``dst`` (a profile file, atomically)."""
    note = f"degraded copy of {Path(src).name}: {DEGRADATIONS[name][0]}" if name in DEGRADATIONS else ""
    return write_rows_changed(src, dst, lambda rows: degrade_rows(rows, name), note)
