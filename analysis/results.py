"""Reading results folders (the engine's output) into memory, checked against the contract.

A results folder (docs/ARCHITECTURE.md, "Results folder") holds ``requests.parquet``,
``steps.parquet``, optionally ``request_steps.parquet``, and ``summary.json``.  Everything in
``analysis`` works from those tables only; :func:`load_run` reads a folder and
:func:`from_tables` wraps tables already in memory (a simulation that was never written), so the
same metrics code serves ``report`` (folders on disk) and ``plan`` (results in memory).

Problems a user can cause (a folder that is not a results folder, a missing file, a missing
column, a column of the wrong type) raise :class:`traces.errors.SpecschedError` naming the file
and the column.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from traces.errors import SpecschedError

__all__ = ["RunResults", "load_run", "from_tables", "REQUEST_COLUMNS", "STEP_COLUMNS",
           "REQUEST_STEP_COLUMNS"]

#: Columns of requests.parquet the analysis reads, and the kind of values each must hold.
REQUEST_COLUMNS: dict[str, str] = {
    "arrival_s": "float",
    "admit_s": "float",
    "first_token_s": "float",
    "finish_s": "float",
    "prompt_tokens": "int",
    "output_tokens": "int",
    "steps": "int",
    "drafted_tokens": "int",
    "verified_drafts": "int",
    "accepted_tokens": "int",
    "truncated_drafts": "int",
    "padded_slots": "int",
    "retractions": "int",
    "max_gap_s": "float",
}
#: Optional columns of requests.parquet (read when present).
REQUEST_OPTIONAL: dict[str, str] = {
    "replica": "int",
    "ttft_slo_s": "float",
    "tpot_slo_s": "float",
    "category": "string",
    "tenant": "string",
    "request_id": "string",
    "cached_tokens": "int",
}
STEP_COLUMNS: dict[str, str] = {
    "replica": "int",
    "iteration": "int",
    "launch": "int",
    "kind": "string",
    "start_s": "float",
    "latency_s": "float",
    "bs": "int",
    "bs_padded": "int",
    "width": "int",
    "distinct_widths": "int",
    "iter_distinct_widths": "int",
    "tokens": "int",
    "padded_slots": "int",
    "graph_pad_slots": "int",
    "graph": "bool",
    "committed_tokens": "int",
    "violations": "int",
}
STEP_OPTIONAL: dict[str, str] = {
    "kv_pages_cached": "int",
    "min_width": "int",
    "max_width": "int",
    "passes": "int",
    "kv_mean": "float",
    "kv_max": "int",
    "out_of_grid": "bool",
    "kv_pages_used": "int",
}
REQUEST_STEP_COLUMNS: dict[str, str] = {
    "request": "int",
    "time_s": "float",
    "tokens": "int",
}

_CHECKS = {
    "float": lambda t: pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_null(t),
    "int": lambda t: pa.types.is_integer(t) or pa.types.is_null(t),
    "bool": lambda t: pa.types.is_boolean(t) or pa.types.is_null(t),
    "string": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)
    or pa.types.is_dictionary(t) or pa.types.is_null(t),
}


@dataclass(frozen=True)
class RunResults:
    """One run's result tables.  ``name`` labels the run in reports (the folder name by default)."""

    name: str
    requests: pa.Table
    steps: pa.Table
    request_steps: pa.Table | None
    summary: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None


def _check_columns(table: pa.Table, required: dict[str, str], optional: dict[str, str],
                   where: str) -> None:
    names = set(table.column_names)
    for col, kind in required.items():
        if col not in names:
            raise SpecschedError(f"missing column (a results folder needs {', '.join(required)})",
                                 path=where, column=col)
    for col, kind in {**required, **optional}.items():
        if col in names and not _CHECKS[kind](table.schema.field(col).type):
            raise SpecschedError(f"expected {kind} values, found {table.schema.field(col).type}",
                                 path=where, column=col)


def from_tables(name: str, requests: pa.Table, steps: pa.Table,
                request_steps: pa.Table | None = None, summary: dict | None = None,
                path: Path | None = None) -> RunResults:
    """Wrap tables already in memory (e.g. a ``SimResult``) after checking their columns."""
    base = str(path) if path is not None else name
    _check_columns(requests, REQUEST_COLUMNS, REQUEST_OPTIONAL, f"{base}/requests.parquet")
    _check_columns(steps, STEP_COLUMNS, STEP_OPTIONAL, f"{base}/steps.parquet")
    if request_steps is not None:
        _check_columns(request_steps, REQUEST_STEP_COLUMNS, {}, f"{base}/request_steps.parquet")
        n = requests.num_rows
        if request_steps.num_rows:
            import pyarrow.compute as pc
            lo, hi = pc.min(request_steps["request"]).as_py(), pc.max(request_steps["request"]).as_py()
            if lo is None or lo < 0 or hi >= n:
                bad = lo if (lo is None or lo < 0) else hi
                idx = pc.index(request_steps["request"], bad).as_py()
                raise SpecschedError(f"request index {bad} is outside requests.parquet's "
                                     f"{n} rows", path=f"{base}/request_steps.parquet",
                                     row=idx, column="request")
    return RunResults(name=name, requests=requests, steps=steps, request_steps=request_steps,
                      summary=dict(summary or {}), path=path)


def _read_parquet(path: Path) -> pa.Table:
    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as err:
        raise SpecschedError(f"cannot read as parquet ({err})", path=str(path)) from None


def load_run(path: str | Path, *, name: str | None = None) -> RunResults:
    """Read one results folder.  Raises SpecschedError for anything that is not a results folder."""
    p = Path(path)
    summary = read_summary(p)
    rs_path = p / "request_steps.parquet"
    request_steps = _read_parquet(rs_path) if rs_path.is_file() else None
    return from_tables(name or p.name or str(p), _read_parquet(p / "requests.parquet"),
                       _read_parquet(p / "steps.parquet"), request_steps, summary, path=p)


def read_summary(path: str | Path) -> dict[str, Any]:
    """A results folder's summary.json (``{}`` when it has none), without reading its tables;
    the folder is refused as :func:`load_run` refuses it."""
    p = Path(path)
    if not p.exists():
        raise SpecschedError("no such results folder", path=str(p))
    if not p.is_dir():
        raise SpecschedError("is not a folder (pass a results folder written by `specsched "
                             "simulate`)", path=str(p))
    for needed in ("requests.parquet", "steps.parquet"):
        if not (p / needed).is_file():
            raise SpecschedError(f"not a results folder: {needed} is missing", path=str(p))
    summary: dict[str, Any] = {}
    sj = p / "summary.json"
    if sj.is_file():
        try:
            summary = json.loads(sj.read_text())
        except (ValueError, UnicodeDecodeError) as err:
            raise SpecschedError(f"not valid JSON ({err})", path=str(sj)) from None
        if not isinstance(summary, dict):
            raise SpecschedError("expected a JSON object", path=str(sj))
    return summary
