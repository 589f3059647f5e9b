"""The profile file: its schema, validation, metadata, and atomic writing and reading.

A profile is a parquet file with one row per measured point (schema in docs/ARCHITECTURE.md,
:data:`PROFILE_SCHEMA` here).  :func:`write_profile` validates rows and writes such a file
atomically (the profile command writes through it); :func:`read_profile` reads one back,
validated, with its metadata.  Turning the rows into latency grids is
:mod:`backends.profile`'s part.

**Held-out points.**  A file may carry an optional ``split`` column (:data:`SPLIT_FIELD`):
``"grid"`` rows build the tables, ``"heldout"`` rows are measured shapes kept out of them, so
``specsched fidelity`` can score the tables on points they never saw, and ``"line"`` rows are a
prefill line: one request's prefill at prefix 0 at consecutive token counts (every count from 1
to about 1,536), which the prefill lookup reads at the exact count (:mod:`backends.prefill_line`:
a dense model's prefill time is a staircase in the count that no coarse grid follows).  A file
without the column is all grid.  Held-out and line rows are validated like the others (a line
row must be a one-request prefill at ``kv_len`` 0, and may repeat a grid row's shape: the same
pass, measured for both); only grid rows must cover the kinds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from traces.atomic import atomic_output_file
from traces.errors import ProblemLog, SpecschedError

__all__ = ["PROFILE_SCHEMA", "PROFILE_VERSION", "SPLIT_FIELD", "SPLITS", "write_profile",
           "read_profile", "grid_rows", "heldout_rows", "line_rows", "profile_metadata"]

PROFILE_VERSION = "1"

PROFILE_SCHEMA = pa.schema([
    pa.field("kind", pa.string(), nullable=False),
    pa.field("graph", pa.bool_(), nullable=False),
    pa.field("bs", pa.int32(), nullable=False),
    pa.field("width", pa.int16(), nullable=False),
    pa.field("kv_len", pa.int32(), nullable=False),
    pa.field("tokens", pa.int32(), nullable=False),
    pa.field("latency_s", pa.float64(), nullable=False),
    pa.field("p10_s", pa.float64(), nullable=False),
    pa.field("p90_s", pa.float64(), nullable=False),
    pa.field("reps", pa.int32(), nullable=False),
])
#: optional column: "grid" (builds the tables), "heldout" (kept out, scored by fidelity) or
#: "line" (a prefill line at exact token counts, read beside the prefill grid)
SPLIT_FIELD = pa.field("split", pa.string(), nullable=False)
SPLITS = ("grid", "heldout", "line")
_KINDS = ("verify", "draft", "prefill", "draft_extend")
_META_KEYS = ("model", "gpu", "versions", "command", "kernels", "notes", "attention")
#: optional metadata, written only when given: ``calibration`` (``specsched calibrate``: the
#: anchors, the fit and the machine; ``backends.calibrate``)
_OPTIONAL_META_KEYS = ("calibration",)
_MAX_PROBLEMS = 200


# ---- validation ----------------------------------------------------------------------------
def _as_table(rows: Any, where: str) -> pa.Table:
    """Rows as a table of PROFILE_SCHEMA (a Table, a list of row dicts or a dict of columns)."""
    if isinstance(rows, pa.Table):
        table = rows
    elif isinstance(rows, Mapping):
        table = pa.table({k: list(v) for k, v in rows.items()})
    else:
        rows = list(rows)
        table = pa.Table.from_pylist(rows) if rows else PROFILE_SCHEMA.empty_table()
    missing = [f.name for f in PROFILE_SCHEMA if f.name not in table.column_names]
    if missing:
        raise SpecschedError(f"missing column(s) {missing}", path=where,
                             column=missing[0])
    fields = list(PROFILE_SCHEMA)
    if SPLIT_FIELD.name in table.column_names:
        fields.append(SPLIT_FIELD)
    cols = []
    for f in fields:
        col = table.column(f.name)
        if col.null_count:
            row = int(np.nonzero(col.is_null().to_numpy(zero_copy_only=False))[0][0])
            raise SpecschedError("is empty (null)", path=where, row=row, column=f.name)
        try:
            cols.append(col.cast(f.type, safe=True))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SpecschedError(f"cannot be read as {f.type}: {exc}", path=where,
                                 column=f.name) from None
    return pa.Table.from_arrays(cols, schema=pa.schema(fields))


def _columns(table: pa.Table) -> dict[str, np.ndarray]:
    out = {}
    for f in PROFILE_SCHEMA:
        col = table.column(f.name)
        out[f.name] = (np.asarray(col.to_pylist(), dtype=object) if f.name == "kind"
                       else col.to_numpy())
    out["split"] = (np.asarray(table.column("split").to_pylist(), dtype=object)
                    if "split" in table.column_names else np.full(table.num_rows, "grid", object))
    return out


def _validate(table: pa.Table, where: str) -> None:
    c = _columns(table)
    log = ProblemLog(where, keep=_MAX_PROBLEMS)

    def bad(i: int, col: str | None, msg: str) -> None:
        log.add(msg, int(i), col)

    n = table.num_rows
    if n == 0:
        raise SpecschedError("has no rows", path=where)
    kind, graph, bs, width = c["kind"], c["graph"], c["bs"].astype(np.int64), c["width"].astype(np.int64)
    kv, tokens = c["kv_len"].astype(np.int64), c["tokens"].astype(np.int64)
    lat, p10, p90, reps = c["latency_s"], c["p10_s"], c["p90_s"], c["reps"]
    split = c["split"]
    seen: dict[tuple, int] = {}
    for i in range(n):
        if split[i] not in SPLITS:
            bad(i, "split", f"{split[i]!r} is not one of {', '.join(SPLITS)}")
        k = kind[i]
        if k not in _KINDS:
            bad(i, "kind", f"{k!r} is not one of {', '.join(_KINDS)}")
            continue
        if bs[i] < 1:
            bad(i, "bs", f"must be >= 1, got {bs[i]}")
        if kv[i] < 0:
            bad(i, "kv_len", f"must be >= 0, got {kv[i]}")
        if k in ("verify", "draft_extend"):
            if width[i] < 1:
                bad(i, "width", f"{k} width must be >= 1, got {width[i]}")
            elif tokens[i] != bs[i] * width[i]:
                bad(i, "tokens", f"{k} tokens must be bs*width = {bs[i] * width[i]}, got {tokens[i]}")
        elif k == "draft":
            if width[i] != 1:
                bad(i, "width", f"draft width must be 1, got {width[i]}")
            if tokens[i] != bs[i]:
                bad(i, "tokens", f"draft tokens must equal bs = {bs[i]}, got {tokens[i]}")
        else:
            if width[i] != 0:
                bad(i, "width", f"prefill width must be 0, got {width[i]}")
            if tokens[i] < bs[i]:
                bad(i, "tokens", f"prefill tokens must be >= bs (one per request), got {tokens[i]}")
            if graph[i]:
                bad(i, "graph", "prefill passes are eager (graph must be false)")
        if not (math.isfinite(lat[i]) and lat[i] > 0):
            bad(i, "latency_s", f"must be finite and > 0, got {lat[i]}")
        if not (math.isfinite(p10[i]) and p10[i] > 0):
            bad(i, "p10_s", f"must be finite and > 0, got {p10[i]}")
        elif p10[i] > lat[i] * (1 + 1e-9):
            bad(i, "p10_s", f"{p10[i]} exceeds the median latency_s {lat[i]}")
        if not math.isfinite(p90[i]):
            bad(i, "p90_s", f"must be finite, got {p90[i]}")
        elif p90[i] < lat[i] * (1 - 1e-9):
            bad(i, "p90_s", f"{p90[i]} is below the median latency_s {lat[i]}")
        if reps[i] < 1:
            bad(i, "reps", f"must be >= 1, got {reps[i]}")
        if split[i] == "line" and (k != "prefill" or bs[i] != 1 or kv[i] != 0):
            bad(i, "split", "a line row must be a prefill of one request (bs 1) at kv_len 0, "
                f"got {k} bs {bs[i]} kv_len {kv[i]}")
        key = (k, bool(graph[i]), int(bs[i]), int(width[i]), int(kv[i]), int(tokens[i]),
               split[i] == "line")
        if key in seen:
            bad(i, None, f"duplicates row {seen[key]} (same kind, graph, bs, width, kv_len, tokens)")
        else:
            seen[key] = i
    log.raise_if_any()
    for k, g in (("verify", True), ("draft", True), ("prefill", False)):
        if not np.any((kind == k) & (graph == g) & (split == "grid")):
            what = "graph-replayed " if g else ""
            raise SpecschedError(f"has no {what}{k} rows: a profile needs verify and draft graph "
                                 "replays and prefill passes", path=where)
    ext = kind == "draft_extend"
    if np.any(ext) and not np.any(ext & graph):
        row = int(np.nonzero(ext)[0][0])
        raise SpecschedError("eager draft_extend rows without graph-replayed ones: the eager grid "
                             "is built on the graph grid; record draft_extend graph rows too",
                             path=where, row=row, column="graph")


def profile_metadata(model: Any, gpu: Any, *, versions: Any = None, command: str = "",
                     kernels: Any = None, notes: Any = None) -> dict[str, Any]:
    """The metadata dict :func:`write_profile` expects (a ModelShape is turned into its dict)."""
    return {"model": model, "gpu": gpu, "versions": versions or {}, "command": command,
            "kernels": kernels or {}, "notes": notes or []}


def _encode_metadata(metadata: Mapping[str, Any], where: str) -> dict[bytes, bytes]:
    # metadata as read_profile returns it carries the version it was read at, which is the one
    # written here (the reader refuses any other); a different one is the caller's mistake
    if "profile_version" in metadata and metadata["profile_version"] != PROFILE_VERSION:
        raise SpecschedError(f"profile metadata has profile_version "
                             f"{metadata['profile_version']!r}; this version writes "
                             f"{PROFILE_VERSION!r}", path=where)
    unknown = sorted(set(metadata) - set(_META_KEYS) - set(_OPTIONAL_META_KEYS)
                     - {"profile_version"})
    if unknown:
        raise SpecschedError(f"unknown profile metadata key(s) {unknown}; valid: "
                             f"{', '.join(_META_KEYS + _OPTIONAL_META_KEYS)}", path=where)
    for key in ("model", "gpu"):
        if not metadata.get(key):
            raise SpecschedError(f"profile metadata needs '{key}'", path=where)
    out = {b"specsched.profile_version": json.dumps(PROFILE_VERSION).encode()}
    keys = _META_KEYS + tuple(k for k in _OPTIONAL_META_KEYS if metadata.get(k) is not None)
    for key in keys:
        value = metadata.get(key, {} if key in ("versions", "kernels") else
                             None if key == "attention" else "")
        if hasattr(value, "as_dict"):
            value = value.as_dict()
        try:
            out[f"specsched.{key}".encode()] = json.dumps(value, sort_keys=True).encode()
        except TypeError as exc:
            raise SpecschedError(f"profile metadata '{key}' is not JSON: {exc}", path=where) from None
    return out


# ---- writing and reading -------------------------------------------------------------------
def write_profile(rows: Any, path: "str | Path", metadata: Mapping[str, Any], *,
                  inputs: tuple = ()) -> Path:
    """Validate profile rows and write them to ``path`` atomically (sorted, zstd, deterministic).

    ``rows``: a pyarrow Table, a list of row dicts or a dict of columns with the columns of
    :data:`PROFILE_SCHEMA`, and optionally ``split`` (:data:`SPLIT_FIELD`: ``"grid"`` or
    ``"heldout"``; written only when given).  ``metadata``: ``model`` (a ModelShape or its dict)
    and ``gpu`` (required), ``versions``, ``command``, ``kernels``, ``notes`` (see
    :func:`profile_metadata`); metadata as :func:`read_profile` returns it is taken as it is.
    Problems raise a SpecschedError naming ``path``, the row (0-based, in ``rows``) and the column.
    """
    path = Path(path)
    where = str(path)
    table = _as_table(rows, where)
    _validate(table, where)
    meta = _encode_metadata(metadata, where)
    order = pc.sort_indices(table, sort_keys=[
        ("kind", "ascending"), ("graph", "ascending"), ("bs", "ascending"),
        ("width", "ascending"), ("kv_len", "ascending"), ("tokens", "ascending")])
    table = table.take(order).replace_schema_metadata(meta)
    # may replace a parquet specsched wrote (an earlier profile), never an input or other file
    with atomic_output_file(path, inputs=inputs, kind="parquet") as tmp:
        pq.write_table(table, tmp, compression="zstd")
    return path


def read_profile(path: "str | Path") -> tuple[pa.Table, dict[str, Any]]:
    """Read and validate a profile file: (rows as PROFILE_SCHEMA, plus ``split`` when the file
    has it; decoded metadata).  :func:`grid_rows` and :func:`heldout_rows` pick the two sets."""
    where = str(path)
    if not Path(path).is_file():
        raise SpecschedError("no such profile file", path=where)
    from traces.sniff import expect_parquet

    expect_parquet(path, "a profile parquet",
                   hint="profiles are written by `specsched profile` or `specsched calibrate` on a "
                        "GPU (the shipped ones are in backends/profiles/)")
    try:
        raw = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise SpecschedError(f"not a readable parquet file: {exc}", path=where) from None
    meta_raw = raw.schema.metadata or {}
    meta: dict[str, Any] = {}
    for k, v in meta_raw.items():
        key = k.decode(errors="replace")
        if key.startswith("specsched."):
            try:
                meta[key[len("specsched."):]] = json.loads(v)
            except json.JSONDecodeError:
                raise SpecschedError(f"metadata {key} is not JSON", path=where) from None
    version = meta.get("profile_version")
    if version != PROFILE_VERSION:
        raise SpecschedError(f"specsched.profile_version is {version!r}, this version reads "
                             f"{PROFILE_VERSION!r} (not a specsched profile?)", path=where)
    table = _as_table(raw, where)
    _validate(table, where)
    return table, meta


def _split_rows(table: pa.Table, which: str) -> pa.Table:
    if "split" not in table.column_names:
        return table if which == "grid" else table.slice(0, 0)
    keep = pc.equal(table.column("split"), which)
    return table.filter(keep)


def grid_rows(table: pa.Table) -> pa.Table:
    """The rows of a profile table that build its grids (all of them without a ``split``)."""
    return _split_rows(table, "grid")


def heldout_rows(table: pa.Table) -> pa.Table:
    """The held-out rows of a profile table (``split == "heldout"``; none without the column)."""
    return _split_rows(table, "heldout")


def line_rows(table: pa.Table) -> pa.Table:
    """The prefill-line rows of a profile table (``split == "line"``; none without the column)."""
    return _split_rows(table, "line")
