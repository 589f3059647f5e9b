"""Validation of trace files: every problem is named by file, 0-based row and column.

The checks run batch by batch (vectorised with numpy), so a trace of millions of requests is
validated while it streams; only the request ids and arrival times of the whole file are kept
(for the duplicate and ordering checks at the end).

Refused (``TraceValidationError``): a file that is not parquet, an empty file, missing or unknown
columns, wrong column types, an unsupported format version, nulls in required columns,
negative/NaN/inf arrival times, duplicate request ids, prompt or output tokens < 1, draft and
accept lists of different lengths, accepted > drafted, negative counts, lists whose committed
tokens (1 prefill token + sum(accepted + 1)) fall short of ``output_tokens`` or overshoot it by
more than the last step, bad SLO values, malformed acceptance metadata, and ``prefix_hashes``
without a valid ``specsched.prefix_block_tokens``, with null lists or ids, or with more ids than
``ceil(prompt_tokens / block)`` (``traces.prefix``).

Reported, not refused: arrivals out of order (readers sort them stably).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from traces.errors import Problem, ProblemLog, SpecschedError, TraceValidationError
from traces.prefix import check_block_tokens, check_prefix_column
from traces.sniff import expect_parquet
from traces.schema import (
    FORMAT_VERSION,
    LIST_COLUMNS,
    META_ACCEPTANCE,
    META_FORMAT_VERSION,
    META_PREFIX_BLOCK,
    REQUIRED_COLUMNS,
    TRACE_SCHEMA,
    decode_metadata,
    schema_for,
)

__all__ = ["ValidationReport", "validate_trace", "open_trace", "read_batches", "TraceChecker",
           "MAX_PROBLEMS"]

#: problems kept (and counted beyond) before a file is refused
MAX_PROBLEMS = 200

_INT16_MAX = np.iinfo(np.int16).max
_INT32_MAX = np.iinfo(np.int32).max
_LIST_I16 = pa.list_(pa.int16())


@dataclass(frozen=True)
class ValidationReport:
    """What validation found in a trace that passed.

    ``rows_moved`` counts rows whose position changes when arrivals are sorted stably (0 when the
    file is already in arrival order).  ``notes`` holds what was reported but not refused.
    """

    path: str
    rows: int
    steps: int | None            # total verify steps; None when the file has no lists
    columns: tuple[str, ...]
    row_groups: int
    format_version: str | None   # None: the file carries no specsched metadata
    rows_moved: int
    notes: tuple[str, ...]
    metadata: dict = field(default_factory=dict)
    prefix_ids: int | None = None  # block ids in prefix_hashes; None when the column is absent

    @property
    def has_lists(self) -> bool:
        return self.steps is not None

    @property
    def sorted(self) -> bool:
        return self.rows_moved == 0


def _type_kind_ok(name: str, typ: pa.DataType) -> bool:
    """Whether a column's physical type is acceptable for the canonical column ``name``.

    Accepted: the canonical type, or one that converts without loss of meaning: any integer width
    for token counts (range-checked per value), integer or float for times, string / large string /
    dictionary of strings for text, list / large list of any integer width for the step lists.
    """
    canonical = TRACE_SCHEMA.field(name).type
    if pa.types.is_null(typ):
        return True          # an all-null column (its nulls are checked like any others)
    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    if pa.types.is_string(canonical):
        return pa.types.is_string(typ) or pa.types.is_large_string(typ)
    if pa.types.is_floating(canonical):
        return pa.types.is_floating(typ) or pa.types.is_integer(typ)
    if pa.types.is_integer(canonical):
        return pa.types.is_integer(typ)
    if pa.types.is_list(canonical):
        return ((pa.types.is_list(typ) or pa.types.is_large_list(typ))
                and pa.types.is_integer(typ.value_type))
    return typ == canonical


def open_trace(path: str | os.PathLike) -> pq.ParquetFile:
    """Open a trace as a parquet file, turning every way that can fail into a SpecschedError."""
    p = Path(path)
    if not p.exists():
        raise SpecschedError("no such file", path=str(path))
    if p.is_dir():
        raise SpecschedError("is a folder, not a parquet trace", path=str(path))
    if p.stat().st_size == 0:
        raise TraceValidationError(str(path), [Problem("empty file (0 bytes): not a parquet trace")])
    expect_parquet(p)
    try:
        return pq.ParquetFile(p)
    except (pa.ArrowInvalid, pa.ArrowException, OSError) as exc:
        raise TraceValidationError(str(path), [Problem(f"not a parquet file ({exc})")]) from None


def read_batches(pf: pq.ParquetFile, path: str, **kwargs):
    """``pf.iter_batches(**kwargs)``, turning unreadable data into a refusal (not a traceback)."""
    it = pf.iter_batches(**kwargs)
    while True:
        try:
            batch = next(it)
        except StopIteration:
            return
        except (pa.ArrowException, OSError) as exc:
            raise TraceValidationError(str(path), [Problem(f"unreadable parquet data ({exc})")]) from None
        yield batch


class TraceChecker:
    """Checks a trace batch by batch; ``finish()`` runs the whole-file checks and raises.

    Usage: ``c = TraceChecker(path, schema, metadata)``; ``c.feed(batch)`` for each batch in file
    order (returns the batch cast to canonical types); ``c.finish()``.
    """

    def __init__(self, path: str, schema: pa.Schema, raw_metadata: dict | None = None,
                 *, max_problems: int = MAX_PROBLEMS, keep_ids: bool = True) -> None:
        self.path = str(path)
        self.log = ProblemLog(self.path, keep=max_problems)
        self.rows = 0
        self.steps = 0
        self._keep_ids = keep_ids
        self._ids: list[pa.Array] = []
        self._arrivals: list[np.ndarray] = []
        self.metadata = decode_metadata(raw_metadata)
        self.columns = tuple(schema.names)
        self._check_schema(schema)
        self._check_metadata()
        present = [n for n in TRACE_SCHEMA.names if n in schema.names]
        self.target = schema_for(present)
        self.has_lists = all(c in schema.names for c in LIST_COLUMNS)
        self.has_prefix = "prefix_hashes" in schema.names
        self.prefix_ids = 0

    # -- problem bookkeeping -------------------------------------------------------------
    @property
    def problems(self) -> list[Problem]:
        return self.log.items

    @property
    def total(self) -> int:
        return self.log.total

    def _add(self, message: str, row: int | None = None, column: str | None = None) -> None:
        self.log.add(message, row, column)

    def _add_rows(self, mask: np.ndarray, offset: int, column: str | None, message) -> None:
        """One problem per True entry of ``mask``; ``message(i)`` builds the text for local row i."""
        idx = np.flatnonzero(mask)
        if idx.size:
            self.log.add_rows(idx + offset, column, lambda r: message(r - offset))

    @property
    def fatal(self) -> bool:
        return self.total > 0

    def raise_if_problems(self) -> None:
        self.log.raise_if_any()

    # -- file-level checks ---------------------------------------------------------------
    def _check_schema(self, schema: pa.Schema) -> None:
        names = list(schema.names)
        for name in REQUIRED_COLUMNS:
            if name not in names:
                self._add("missing required column", None, name)
        known = set(TRACE_SCHEMA.names)
        for name in names:
            if name not in known:
                self._add(f"unknown column (a trace has only: {', '.join(TRACE_SCHEMA.names)})",
                          None, name)
        if len(set(names)) != len(names):
            for name in sorted({n for n in names if names.count(n) > 1}):
                self._add("column appears more than once", None, name)
        for name in names:
            if name in known and not _type_kind_ok(name, schema.field(name).type):
                self._add(f"wrong type: expected {TRACE_SCHEMA.field(name).type}, "
                          f"found {schema.field(name).type}", None, name)
        has = [c in names for c in LIST_COLUMNS]
        if any(has) and not all(has):
            present = LIST_COLUMNS[0] if has[0] else LIST_COLUMNS[1]
            missing = LIST_COLUMNS[1] if has[0] else LIST_COLUMNS[0]
            self._add(f"'{present}' is present but '{missing}' is not: a trace has both "
                      "per-step lists or neither", None, missing)

    def _check_metadata(self) -> None:
        problem = check_block_tokens(self.metadata, "prefix_hashes" in self.columns)
        self.prefix_block = None if problem else self.metadata.get(META_PREFIX_BLOCK)
        if problem:
            self._add(problem, None, "prefix_hashes")
        version = self.metadata.get(META_FORMAT_VERSION)
        if version is not None and str(version) != FORMAT_VERSION:
            self._add(f"trace format version {version!r} is not supported "
                      f"(this specsched reads version {FORMAT_VERSION})")
        acc = self.metadata.get(META_ACCEPTANCE)
        if acc is not None:
            if not isinstance(acc, dict):
                self._add(f"metadata {META_ACCEPTANCE} is not a JSON object")
                return
            probs = acc.get("position_accept_prob")
            if probs is not None:
                ok = (isinstance(probs, list) and len(probs) > 0
                      and all(isinstance(p, (int, float)) and not isinstance(p, bool)
                              and 0.0 <= float(p) <= 1.0 for p in probs))
                if not ok:
                    self._add(f"metadata {META_ACCEPTANCE}.position_accept_prob must be a "
                              "non-empty list of probabilities in [0, 1]")

    # -- per-batch checks ----------------------------------------------------------------
    def feed(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Check one batch (rows numbered from the rows already fed); return it in canonical types."""
        offset = self.rows
        n = batch.num_rows
        self.rows += n
        cols = {name: batch.column(i) for i, name in enumerate(batch.schema.names)}

        # nulls in required columns
        for name in REQUIRED_COLUMNS:
            if name in cols and cols[name].null_count:
                mask = np.asarray(cols[name].is_null().to_numpy(zero_copy_only=False))
                self._add_rows(mask, offset, name, lambda i: "null in a required column")

        out_cols: dict[str, pa.Array] = {}
        if "request_id" in cols:
            ids = cols["request_id"]
            if pa.types.is_dictionary(ids.type):
                ids = ids.cast(pa.string())
            ids = ids.cast(pa.string())
            out_cols["request_id"] = ids
            if self._keep_ids:
                self._ids.append(ids)

        if "arrival_s" in cols:
            arr = cols["arrival_s"].cast(pa.float64())
            out_cols["arrival_s"] = arr
            a = np.asarray(arr.to_numpy(zero_copy_only=False), dtype=np.float64)
            null = _nullmask(arr)
            self._arrivals.append(np.where(null, 0.0, a))
            with np.errstate(invalid="ignore"):
                self._add_rows(np.isnan(a) & ~null, offset, "arrival_s",
                               lambda i: "arrival time is NaN")
                self._add_rows(np.isinf(a), offset, "arrival_s",
                               lambda i: f"arrival time is {a[i]}")
                self._add_rows(a < 0, offset, "arrival_s",
                               lambda i: f"negative arrival time {a[i]!r}")

        for name in ("prompt_tokens", "output_tokens"):
            if name in cols:
                col = cols[name]
                v = col.to_numpy(zero_copy_only=False)
                v = np.where(_nullmask(col), 1, v).astype(np.int64) if col.null_count else v.astype(np.int64)
                self._add_rows(v < 1, offset, name, lambda i, v=v, name=name: f"{name} is {v[i]} (must be >= 1)")
                self._add_rows(v > _INT32_MAX, offset, name,
                               lambda i, v=v: f"{v[i]} does not fit int32")
                out_cols[name] = pa.array(np.clip(v, 0, _INT32_MAX).astype(np.int32)) \
                    if col.null_count == 0 else col.cast(pa.int32(), safe=False)

        for name in ("ttft_slo_s", "tpot_slo_s"):
            if name in cols:
                col = cols[name].cast(pa.float64())
                out_cols[name] = col
                v = col.to_numpy(zero_copy_only=False)
                null = _nullmask(col)
                with np.errstate(invalid="ignore"):
                    bad = ~null & ~(np.isfinite(v) & (v > 0))
                self._add_rows(bad, offset, name,
                               lambda i, v=v: f"SLO must be a finite number of seconds > 0, found {v[i]!r}")

        for name in ("category", "tenant"):
            if name in cols:
                out_cols[name] = cols[name].cast(pa.string())

        if self.has_lists and all(c in cols for c in LIST_COLUMNS):
            out_cols.update(self._check_lists(cols, offset, n))

        if "prefix_hashes" in cols:
            col = check_prefix_column(
                cols["prefix_hashes"], cols.get("prompt_tokens"), self.prefix_block,
                lambda mask, column, message: self._add_rows(mask, offset, column, message))
            self.prefix_ids += len(col.values)
            out_cols["prefix_hashes"] = col

        target = schema_for([c for c in cols if c in self.target.names])
        arrays = [out_cols[f.name] if f.name in out_cols else cols[f.name].cast(f.type, safe=False)
                  for f in target]
        return pa.RecordBatch.from_arrays(arrays, schema=target)

    def _check_lists(self, cols: dict, offset: int, n: int) -> dict[str, pa.Array]:
        dl, al = cols["draft_tokens"], cols["accepted_tokens"]
        if pa.types.is_null(dl.type) or pa.types.is_null(al.type):
            for name, col in (("draft_tokens", dl), ("accepted_tokens", al)):
                if pa.types.is_null(col.type):
                    self._add_rows(np.ones(n, bool), offset, name,
                                   lambda i: "null list: the column holds no lists at all")
            return {"draft_tokens": dl.cast(_LIST_I16), "accepted_tokens": al.cast(_LIST_I16)}
        for name, col in (("draft_tokens", dl), ("accepted_tokens", al)):
            if col.null_count:
                self._add_rows(_nullmask(col), offset, name,
                               lambda i: "null list: every row needs its per-step list when the "
                                         "column is present (an empty list means no verify steps)")
        d_off, d_val = _list_parts(dl)
        a_off, a_val = _list_parts(al)
        d_len = np.diff(d_off)
        a_len = np.diff(a_off)
        for name, val, off in (("draft_tokens", d_val, d_off), ("accepted_tokens", a_val, a_off)):
            if val.null_count:
                pos = np.flatnonzero(_nullmask(val))
                rows = np.unique(np.searchsorted(off, pos, side="right") - 1)
                mask = np.zeros(n, bool)
                mask[rows] = True
                self._add_rows(mask, offset, name, lambda i: "null inside a per-step list")
        dv = _int_values(d_val)
        av = _int_values(a_val)

        mismatch = d_len != a_len
        self._add_rows(mismatch, offset, "accepted_tokens",
                       lambda i: f"{a_len[i]} accepted counts for {d_len[i]} draft counts "
                                 "(the lists must have the same length)")

        def first_bad_step(bad_elem: np.ndarray, off: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            """Per row: whether any element is bad, and the step index of the first one."""
            pos = np.flatnonzero(bad_elem)
            rows_any = np.zeros(n, bool)
            first = np.full(n, -1, np.int64)
            if pos.size:
                r = np.searchsorted(off, pos, side="right") - 1
                uniq, start = np.unique(r, return_index=True)
                rows_any[uniq] = True
                first[uniq] = pos[start] - off[uniq]
            return rows_any, first

        bad, step = first_bad_step(dv < 0, d_off)
        self._add_rows(bad, offset, "draft_tokens",
                       lambda i: f"step {step[i]}: negative draft count {dv[d_off[i] + step[i]]}")
        bad, step2 = first_bad_step(dv > _INT16_MAX, d_off)
        self._add_rows(bad, offset, "draft_tokens",
                       lambda i: f"step {step2[i]}: draft count {dv[d_off[i] + step2[i]]} does not fit int16")
        bad, step3 = first_bad_step(av < 0, a_off)
        self._add_rows(bad, offset, "accepted_tokens",
                       lambda i: f"step {step3[i]}: negative accepted count {av[a_off[i] + step3[i]]}")

        ok = ~mismatch & ~_nullmask(dl) & ~_nullmask(al)
        # elementwise comparison only where the lists line up
        if ok.all() and np.array_equal(d_off - d_off[0], a_off - a_off[0]):
            over = av > dv
            bad, step4 = first_bad_step(over, a_off)
            self._add_rows(bad, offset, "accepted_tokens",
                           lambda i: f"step {step4[i]}: accepted {av[a_off[i] + step4[i]]} > "
                                     f"drafted {dv[d_off[i] + step4[i]]}")
        else:
            rows = np.flatnonzero(ok)
            for i in rows:  # rare path: only files that already have length mismatches
                dd = dv[d_off[i]:d_off[i + 1]]
                aa = av[a_off[i]:a_off[i + 1]]
                j = np.flatnonzero(aa > dd)
                if j.size:
                    self._add(f"step {int(j[0])}: accepted {int(aa[j[0]])} > drafted {int(dd[j[0]])}",
                              offset + int(i), "accepted_tokens")

        # committed tokens: 1 (prefill) + sum(accepted + 1) must reach output_tokens, and the
        # last step must have been needed to reach it.
        if "output_tokens" in cols:
            out = cols["output_tokens"].to_numpy(zero_copy_only=False)
            out = np.where(_nullmask(cols["output_tokens"]), 1, out).astype(np.int64) \
                if cols["output_tokens"].null_count else out.astype(np.int64)
            cs = np.zeros(av.size + 1, np.int64)
            np.cumsum(av, dtype=np.int64, out=cs[1:])
            committed = 1 + cs[a_off[1:]] - cs[a_off[:-1]] + a_len
            has = a_len > 0
            last = np.zeros(n, np.int64)
            last[has] = av[a_off[1:][has] - 1].astype(np.int64) + 1
            valid = ok & ~_nullmask(cols["output_tokens"])
            short = valid & (committed < out)
            self._add_rows(short, offset, "accepted_tokens",
                           lambda i: f"committed tokens 1 + sum(accepted + 1) = {committed[i]} fall "
                                     f"short of output_tokens {out[i]}")
            over = valid & has & (committed - last >= out)
            self._add_rows(over, offset, "accepted_tokens",
                           lambda i: f"committed tokens 1 + sum(accepted + 1) = {committed[i]} "
                                     f"overshoot output_tokens {out[i]} by more than the last step "
                                     f"(which commits {last[i]})")
        self.steps += int(a_len.sum())
        return {"draft_tokens": _canonical_list(dl, d_off, dv),
                "accepted_tokens": _canonical_list(al, a_off, av)}

    # -- whole-file checks -----------------------------------------------------------------
    def finish(self) -> int:
        """Run the whole-file checks, raise on any problem; return the number of rows moved
        by a stable sort on arrival time (0 when already sorted)."""
        if self.rows == 0 and not self.total:
            self._add("empty trace: the file has no rows")
        if self._keep_ids and self._ids and self.rows:
            ids = pa.chunked_array(self._ids, type=pa.string())
            if pc.count_distinct(ids, mode="all").as_py() != len(ids):
                self._report_duplicates(ids)
        self.raise_if_problems()
        return self.rows_moved()

    def _report_duplicates(self, ids: pa.ChunkedArray) -> None:
        enc = pc.dictionary_encode(ids.combine_chunks())
        codes = np.asarray(enc.indices.to_numpy(zero_copy_only=False))
        null = _nullmask(enc.indices)
        codes = np.where(null, -1, codes)
        _, first = np.unique(codes, return_index=True)
        first_of = np.full(len(enc.dictionary) + 1, -1, np.int64)
        uniq_codes = codes[first]
        first_of[uniq_codes[uniq_codes >= 0]] = first[uniq_codes >= 0]
        rows = np.arange(codes.size)
        dup = (codes >= 0) & (first_of[np.maximum(codes, 0)] != rows)
        values = enc.dictionary
        self._add_rows(dup, 0, "request_id",
                       lambda i: f"duplicate request id {values[codes[i]].as_py()!r} "
                                 f"(first at row {first_of[codes[i]]})")

    def arrivals(self) -> np.ndarray:
        return np.concatenate(self._arrivals) if self._arrivals else np.zeros(0, np.float64)

    def rows_moved(self) -> int:
        a = self.arrivals()
        if a.size < 2 or bool(np.all(a[1:] >= a[:-1])):
            return 0
        order = np.argsort(a, kind="stable")
        return int(np.count_nonzero(order != np.arange(a.size)))


def _nullmask(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.zeros(len(arr), bool)
    return np.asarray(arr.is_null().to_numpy(zero_copy_only=False))


def _list_parts(arr: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """(offsets int64 [n+1] into ``values``, values) of a list array, honouring slices and nulls."""
    if pa.types.is_large_list(arr.type):
        arr = arr.cast(pa.list_(arr.type.value_type))
    offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    values = arr.values
    base = offsets[0]
    values = values.slice(base, offsets[-1] - base)
    return offsets - base, values


def _int_values(val: pa.Array) -> np.ndarray:
    """List values as a numpy integer array (int16 kept as is; nulls read as 0)."""
    if val.null_count:
        return np.nan_to_num(np.asarray(val.to_numpy(zero_copy_only=False), np.float64)).astype(np.int64)
    arr = val.to_numpy(zero_copy_only=False)
    return arr if arr.dtype in (np.int16, np.int8, np.uint8) else arr.astype(np.int64)


def _canonical_list(arr: pa.Array, off: np.ndarray, vals: np.ndarray) -> pa.Array:
    if arr.type == _LIST_I16 and arr.offset == 0 and arr.null_count == 0 and off[0] == 0 \
            and arr.offsets[0].as_py() == 0:
        return arr
    v = np.clip(vals, np.iinfo(np.int16).min, _INT16_MAX).astype(np.int16)
    mask = pa.array(_nullmask(arr)) if arr.null_count else None
    return pa.ListArray.from_arrays(pa.array(off.astype(np.int32)), pa.array(v), mask=mask)


def validate_trace(path: str | os.PathLike) -> ValidationReport:
    """Validate a trace file, streaming its row groups; raise ``TraceValidationError`` on problems.

    Unsorted arrivals are not a problem: the report says how many rows a stable sort moves.
    """
    pf = open_trace(path)
    checker = TraceChecker(str(path), pf.schema_arrow, pf.metadata.metadata)
    if checker.fatal:
        checker.raise_if_problems()
    for batch in read_batches(pf, str(path), batch_size=65536):
        checker.feed(batch)
    moved = checker.finish()
    notes = []
    if moved:
        notes.append(f"arrivals were not sorted: readers sort them stably ({moved} rows moved)")
    if checker.metadata.get(META_FORMAT_VERSION) is None:
        notes.append("no specsched metadata: read as format version "
                     f"{FORMAT_VERSION} (written by another tool)")
    return ValidationReport(
        path=str(path), rows=checker.rows,
        steps=checker.steps if checker.has_lists else None,
        columns=checker.columns, row_groups=pf.metadata.num_row_groups,
        format_version=(None if checker.metadata.get(META_FORMAT_VERSION) is None
                        else str(checker.metadata[META_FORMAT_VERSION])),
        rows_moved=moved, notes=tuple(notes), metadata=dict(checker.metadata),
        prefix_ids=checker.prefix_ids if checker.has_prefix else None)
