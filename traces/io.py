"""Reading and writing trace files.

``write_trace`` writes batches through ``traces.atomic`` (nothing half-written), validating them
as they go, with fixed-size row groups and deterministic metadata, so the same rows and metadata
give a byte-identical file whatever the batching of the input.

``iter_trace_batches`` streams a file row group by row group (canonical types, per-batch value
checks).  ``read_trace_arrays`` validates the whole file while streaming it and returns compact
numpy arrays for the engine (``TraceArrays``).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from traces.atomic import atomic_output_file
from traces.errors import SpecschedError
from traces.schema import (
    LIST_COLUMNS,
    META_ACCEPTANCE,
    META_PREFIX_BLOCK,
    TRACE_SCHEMA,
    encode_metadata,
    schema_for,
)
from traces.validate import TraceChecker, open_trace, read_batches

__all__ = ["TraceArrays", "read_trace_arrays", "iter_trace_batches", "write_trace",
           "ROW_GROUP_ROWS", "steps_table"]

#: rows per parquet row group written by ``write_trace``
ROW_GROUP_ROWS = 65536


@dataclass(frozen=True)
class TraceArrays:
    """A validated trace as compact arrays, in arrival order (see docs/ARCHITECTURE.md)."""

    path: str
    request_id: pa.Array            # strings, in arrival order
    arrival_s: np.ndarray           # float64 [n], non-decreasing
    prompt_tokens: np.ndarray       # int32 [n]
    output_tokens: np.ndarray       # int32 [n]
    step_offsets: np.ndarray        # int64 [n+1]; request i's steps are [off[i], off[i+1])
    draft_tokens: np.ndarray        # int16 [total steps]
    accepted_tokens: np.ndarray     # int16 [total steps]
    category: pa.Array | None       # strings or None
    tenant: pa.Array | None
    ttft_slo_s: np.ndarray | None   # float64, NaN where missing
    tpot_slo_s: np.ndarray | None
    acceptance: dict                # specsched.acceptance (position_accept_prob always present)
    metadata: dict                  # all specsched.* metadata, decoded
    notes: tuple[str, ...]
    warnings: tuple[str, ...] = ()  # what the user must know (e.g. repeated Spec-Bench answers)
    # prefix_hashes, flat like the step lists: request i's block ids are
    # prefix_ids[prefix_offsets[i]:prefix_offsets[i+1]]; all three None without the column
    prefix_offsets: np.ndarray | None = None   # int64 [n+1]
    prefix_ids: np.ndarray | None = None       # int64 [total ids]
    prefix_block_tokens: int | None = None     # tokens per block (specsched.prefix_block_tokens)

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    @property
    def n_steps(self) -> int:
        return int(self.step_offsets[-1])

    def head(self, n: int) -> "TraceArrays":
        """The first ``n`` requests (in arrival order), with their step lists."""
        n = int(n)
        if n < 1:
            raise SpecschedError(f"--limit must be >= 1, got {n}")
        if n >= len(self):
            return self
        end = int(self.step_offsets[n])
        cut = lambda a: None if a is None else a[:n]  # noqa: E731
        prefix = {}
        if self.prefix_offsets is not None:
            prefix = {"prefix_offsets": self.prefix_offsets[:n + 1],
                      "prefix_ids": self.prefix_ids[:int(self.prefix_offsets[n])]}
        return dataclasses.replace(
            self, request_id=self.request_id[:n], arrival_s=self.arrival_s[:n],
            prompt_tokens=self.prompt_tokens[:n], output_tokens=self.output_tokens[:n],
            step_offsets=self.step_offsets[:n + 1], draft_tokens=self.draft_tokens[:end],
            accepted_tokens=self.accepted_tokens[:end], category=cut(self.category),
            tenant=cut(self.tenant), ttft_slo_s=cut(self.ttft_slo_s),
            tpot_slo_s=cut(self.tpot_slo_s), **prefix,
            notes=self.notes + (f"the first {n} of {len(self)} requests",))

    def with_rate_scale(self, x: float) -> "TraceArrays":
        """The same trace with arrivals divided by ``x`` (x = 2: twice the request rate)."""
        try:
            xf = float(x)
        except (TypeError, ValueError):
            raise SpecschedError(f"rate scale {x!r} is not a number") from None
        if not np.isfinite(xf) or xf <= 0:
            raise SpecschedError(f"rate scale must be a finite number > 0, got {x!r}")
        if xf == 1.0:
            return self
        return dataclasses.replace(
            self, arrival_s=self.arrival_s / xf,
            notes=self.notes + (f"arrivals divided by {xf:g} (rate scaled x{xf:g})",))


# --------------------------------------------------------------------------------------------
# writing


def _as_batches(data: pa.Table | pa.RecordBatch | Iterable) -> Iterator[pa.RecordBatch]:
    if isinstance(data, pa.Table):
        yield from data.to_batches()
    elif isinstance(data, pa.RecordBatch):
        yield data
    else:
        for item in data:
            if isinstance(item, pa.Table):
                yield from item.to_batches()
            elif isinstance(item, pa.RecordBatch):
                yield item
            else:
                raise TypeError(f"write_trace: expected pyarrow Tables or RecordBatches, got {type(item)}")


def write_trace(table_or_batches: pa.Table | pa.RecordBatch | Iterable, path: str | os.PathLike,
                *, metadata: Mapping[str, Any], row_group_rows: int = ROW_GROUP_ROWS,
                validate: bool = True, inputs: Iterable = ()) -> None:
    """Write a trace atomically: zstd parquet, fixed row groups, ``specsched.*`` metadata.

    ``metadata`` maps keys (with or without the ``specsched.`` prefix) to JSON-serialisable
    values; the format version is added.  The rows are validated while written (unless
    ``validate=False``); on any problem nothing is left at ``path``.  ``path`` may replace a
    parquet file specsched wrote, never one of ``inputs`` (the files the trace is made from) or
    any other file (:func:`traces.atomic.check_output_file`).
    """
    meta = encode_metadata(metadata)
    batches = _as_batches(table_or_batches)
    if os.path.isdir(path):
        raise SpecschedError("is a folder: give a file name for the trace", path=str(path))
    try:
        _write(batches, path, meta, row_group_rows, validate, tuple(inputs))
    except OSError as exc:
        raise SpecschedError(f"cannot write ({exc.strerror or exc})", path=str(path)) from None


def _write(batches, path, meta, row_group_rows: int, validate: bool, inputs: tuple) -> None:
    with atomic_output_file(path, inputs=inputs, kind="parquet") as tmp:
        writer: pq.ParquetWriter | None = None
        checker: TraceChecker | None = None
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        schema: pa.Schema | None = None

        def flush(final: bool) -> None:
            nonlocal pending, pending_rows, writer
            if not pending:
                return
            table = pa.Table.from_batches(pending, schema=schema)
            cut = (pending_rows // row_group_rows) * row_group_rows if not final else pending_rows
            if cut == 0:
                return
            head, tail = table.slice(0, cut), table.slice(cut)
            assert writer is not None
            writer.write_table(head, row_group_size=row_group_rows)
            pending = tail.combine_chunks().to_batches() if tail.num_rows else []
            pending_rows = tail.num_rows

        try:
            for batch in batches:
                if schema is None:
                    names = batch.schema.names
                    unknown = [n for n in names if n not in TRACE_SCHEMA.names]
                    if unknown:
                        raise SpecschedError(f"cannot write unknown columns {unknown}", path=str(path))
                    schema = schema_for(names).with_metadata(meta)
                    checker = TraceChecker(str(path), batch.schema, meta, keep_ids=validate)
                    if validate:
                        checker.raise_if_problems()
                    writer = pq.ParquetWriter(tmp, schema, compression="zstd",
                                              write_statistics=True)
                if batch.schema.names != schema.names and set(batch.schema.names) == set(schema.names):
                    batch = batch.select(schema.names)
                if validate:
                    assert checker is not None
                    batch = checker.feed(batch)
                    checker.raise_if_problems()
                batch = _cast_batch(batch, schema, str(path))
                pending.append(batch)
                pending_rows += batch.num_rows
                if pending_rows >= row_group_rows:
                    flush(final=False)
            if schema is None:
                raise SpecschedError("nothing to write: no batches", path=str(path))
            flush(final=True)
            if validate:
                assert checker is not None
                checker.finish()
        finally:
            if writer is not None:
                writer.close()
        _default_permissions(tmp)


def _default_permissions(path) -> None:
    """Give the file the permissions a plain ``open()`` would (mkstemp makes it 0600)."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def _cast_batch(batch: pa.RecordBatch, schema: pa.Schema, path: str) -> pa.RecordBatch:
    if batch.schema.names != schema.names:
        raise SpecschedError(f"every batch must have the columns {schema.names}, got "
                             f"{batch.schema.names}", path=path)
    arrays = []
    for f, col in zip(schema, batch.columns):
        arrays.append(col if col.type == f.type else col.cast(f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


# --------------------------------------------------------------------------------------------
# reading


def iter_trace_batches(path: str | os.PathLike, *, columns: list[str] | None = None,
                       batch_size: int = ROW_GROUP_ROWS) -> Iterator[pa.RecordBatch]:
    """Stream a trace in batches (row group by row group), in canonical types.

    The file's schema is checked first; each batch's values are checked as it is read (a bad
    batch raises ``TraceValidationError`` naming the rows).  Whole-file checks (duplicate ids,
    arrival order) are ``validate_trace``'s and ``read_trace_arrays``'s.  ``columns`` selects
    columns (all by default); asking for one the file lacks is an error.
    """
    pf = open_trace(path)
    checker = TraceChecker(str(path), pf.schema_arrow, pf.metadata.metadata, keep_ids=False)
    checker.raise_if_problems()
    if columns is not None:
        missing = [c for c in columns if c not in pf.schema_arrow.names]
        if missing:
            raise SpecschedError(f"the trace has no column(s) {missing}", path=str(path))
        read_cols = list(columns)
        if any(c in LIST_COLUMNS for c in columns):
            # the list checks need both lists and output_tokens
            read_cols += [c for c in (*LIST_COLUMNS, "output_tokens") if c in pf.schema_arrow.names]
        if "prefix_hashes" in columns:
            read_cols.append("prompt_tokens")     # the block count is checked against it
        read_cols = list(dict.fromkeys(read_cols))
    else:
        read_cols = None
    for batch in read_batches(pf, str(path), batch_size=batch_size, columns=read_cols):
        out = checker.feed(batch)
        checker.raise_if_problems()
        if columns is not None:
            out = out.select([c for c in TRACE_SCHEMA.names if c in columns])
        yield out


def _list_numpy(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    off = np.asarray(arr.offsets.to_numpy(), dtype=np.int64)
    vals = arr.values.slice(int(off[0]), int(off[-1] - off[0]))
    return off - off[0], np.asarray(vals.to_numpy(zero_copy_only=False), dtype=np.int16)


def check_seed(seed) -> int:
    """Seeds are whole numbers >= 0 (what ``numpy.random.default_rng`` accepts)."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise SpecschedError(f"seed must be a whole number >= 0, got {seed!r}")
    return int(seed)


def _list_capacity(pf: pq.ParquetFile) -> int:
    """Number of list elements in the ``draft_tokens`` column, from the row-group metadata."""
    md = pf.metadata
    try:
        idx = [md.schema.column(i).path for i in range(md.num_columns)].index(
            next(md.schema.column(i).path for i in range(md.num_columns)
                 if md.schema.column(i).path.startswith("draft_tokens.")))
    except StopIteration:
        return 0
    return int(sum(md.row_group(g).column(idx).num_values for g in range(md.num_row_groups)))


def read_trace_arrays(path: str | os.PathLike, *, acceptance: str | None = None,
                      seed: int = 0) -> TraceArrays:
    """Validate and load a trace as compact arrays (see ``TraceArrays``).

    Unsorted arrivals are sorted stably (reported in ``notes``).  A file without per-step lists
    needs ``acceptance`` (a spec string, e.g. ``"geometric:k=4,alpha=0.7"``): the lists are then
    drawn with ``numpy.random.default_rng(seed)``.  Given for a file that has lists, ``acceptance``
    replaces them (noted).  ``acceptance`` metadata always carries ``position_accept_prob``
    (estimated from the lists when the file does not record it).
    """
    from traces.acceptance import estimate_position_accept_prob, parse_acceptance

    check_seed(seed)
    model = parse_acceptance(acceptance) if acceptance is not None else None
    pf = open_trace(path)
    checker = TraceChecker(str(path), pf.schema_arrow, pf.metadata.metadata)
    checker.raise_if_problems()
    names = pf.schema_arrow.names
    ids: list[pa.Array] = []
    prompt: list[np.ndarray] = []
    output: list[np.ndarray] = []
    cat: list[pa.Array] = []
    ten: list[pa.Array] = []
    slo: dict[str, list[np.ndarray]] = {"ttft_slo_s": [], "tpot_slo_s": []}
    lens: list[np.ndarray] = []
    plens: list[np.ndarray] = []
    pids: list[np.ndarray] = []
    # the lists' total length is in the parquet metadata: fill preallocated arrays, so the
    # peak memory is the result, not the result plus a list of pieces to concatenate
    cap = _list_capacity(pf) if checker.has_lists else 0
    drafts_buf = np.empty(cap, np.int16)
    accepts_buf = np.empty(cap, np.int16)
    filled = 0
    for batch in read_batches(pf, str(path), batch_size=ROW_GROUP_ROWS):
        b = checker.feed(batch)
        if checker.fatal:
            continue     # keep counting problems over the whole file, skip the conversion
        ids.append(b.column("request_id"))
        prompt.append(b.column("prompt_tokens").to_numpy())
        output.append(b.column("output_tokens").to_numpy())
        if "category" in names:
            cat.append(b.column("category"))
        if "tenant" in names:
            ten.append(b.column("tenant"))
        for k in slo:
            if k in names:
                slo[k].append(np.asarray(b.column(k).to_numpy(zero_copy_only=False), np.float64))
        if checker.has_prefix:
            pcol = b.column("prefix_hashes")     # list<int64>, offsets from 0 (checker output)
            poff = np.asarray(pcol.offsets.to_numpy(), np.int64)
            plens.append(np.diff(poff))
            pids.append(np.asarray(pcol.values.to_numpy(zero_copy_only=False), np.int64))
        if checker.has_lists:
            doff, dv = _list_numpy(b.column("draft_tokens"))
            _, av = _list_numpy(b.column("accepted_tokens"))
            lens.append(np.diff(doff))
            if filled + dv.size > drafts_buf.size:    # metadata undercounted: grow
                grow = max(dv.size, drafts_buf.size // 2)
                drafts_buf = np.concatenate([drafts_buf, np.empty(grow, np.int16)])
                accepts_buf = np.concatenate([accepts_buf, np.empty(grow, np.int16)])
            drafts_buf[filled:filled + dv.size] = dv
            accepts_buf[filled:filled + av.size] = av
            filled += dv.size
    moved = checker.finish()
    notes: list[str] = []
    n = checker.rows
    arrival = checker.arrivals()
    request_id = pa.chunked_array(ids, type=pa.string()).combine_chunks()
    prompt_a = np.concatenate(prompt).astype(np.int32)
    output_a = np.concatenate(output).astype(np.int32)
    category = pa.chunked_array(cat, type=pa.string()).combine_chunks() if cat else None
    tenant = pa.chunked_array(ten, type=pa.string()).combine_chunks() if ten else None
    slos = {k: (np.concatenate(v) if v else None) for k, v in slo.items()}
    if checker.has_lists:
        steps_len = np.concatenate(lens).astype(np.int64)
        drafts = drafts_buf[:filled]        # views: no copy (empty lists make cap > filled)
        accepts = accepts_buf[:filled]
    else:
        steps_len = drafts = accepts = None
    if checker.has_prefix:
        prefix_len = np.concatenate(plens) if plens else np.zeros(0, np.int64)
        prefix_ids = np.concatenate(pids) if pids else np.zeros(0, np.int64)
    else:
        prefix_len = prefix_ids = None

    if moved:
        order = np.argsort(arrival, kind="stable")
        arrival = arrival[order]
        take = pa.array(order)
        request_id = request_id.take(take)
        prompt_a, output_a = prompt_a[order], output_a[order]
        category = category.take(take) if category is not None else None
        tenant = tenant.take(take) if tenant is not None else None
        slos = {k: (v[order] if v is not None else None) for k, v in slos.items()}
        if steps_len is not None:
            from traces.acceptance import multi_range
            starts = np.concatenate([[0], np.cumsum(steps_len)[:-1]])
            idx = multi_range(starts[order], steps_len[order])
            drafts, accepts = drafts[idx], accepts[idx]
            steps_len = steps_len[order]
        if prefix_len is not None:
            from traces.acceptance import multi_range
            starts = np.concatenate([[0], np.cumsum(prefix_len)[:-1]]).astype(np.int64)
            prefix_ids = prefix_ids[multi_range(starts[order], prefix_len[order])]
            prefix_len = prefix_len[order]
        notes.append(f"arrivals were not sorted: sorted stably ({moved} rows moved)")

    metadata = dict(checker.metadata)
    acc_meta = metadata.get(META_ACCEPTANCE)
    warnings: tuple[str, ...] = ()
    if model is not None:
        warnings = tuple(model.warnings())
        rng = np.random.default_rng(seed)
        cats_np = (np.asarray(category.to_pylist(), dtype=object) if category is not None else None)
        from traces.acceptance import concat_lists, fill_blocks
        lists = concat_lists([b for _, _, b in fill_blocks(model, output_a, rng, cats_np)])
        if steps_len is not None:
            notes.append(f"the file's draft/accept lists were replaced by acceptance model "
                         f"{model.kind} (seed {seed})")
        steps_len = np.diff(lists.offsets)
        drafts, accepts = lists.draft_tokens, lists.accepted_tokens
        acc_meta = model.metadata(seed)
        if lists.category is not None and category is None:
            category = pa.array(lists.category.tolist(), type=pa.string())
            notes.append("category set from the acceptance model (the Spec-Bench category each "
                         "request's steps were drawn from)")
    elif steps_len is None:
        raise SpecschedError("the trace has no draft_tokens/accepted_tokens lists: give an "
                             "acceptance model (e.g. --acceptance geometric:k=4,alpha=0.7 or "
                             "specbench:ANSWERS.jsonl)", path=str(path))
    if not isinstance(acc_meta, dict):
        acc_meta = {"kind": "recorded", "params": {}, "seed": None}
    acc_meta = dict(acc_meta)
    if not acc_meta.get("position_accept_prob"):
        acc_meta["position_accept_prob"] = estimate_position_accept_prob(drafts, accepts)
        notes.append("position_accept_prob estimated from the trace's lists")
    if "speculation" not in acc_meta:  # absent in the file: true unless no step drafts
        acc_meta["speculation"] = bool(np.any(drafts))
    metadata[META_ACCEPTANCE] = acc_meta
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(steps_len, out=offsets[1:])

    def nan_slo(v: np.ndarray | None) -> np.ndarray | None:
        return None if v is None else np.asarray(v, dtype=np.float64)

    prefix_offsets = None
    if prefix_len is not None:
        prefix_offsets = np.zeros(n + 1, np.int64)
        np.cumsum(prefix_len, out=prefix_offsets[1:])
        prefix_ids = np.ascontiguousarray(prefix_ids, dtype=np.int64)

    return TraceArrays(
        path=str(path), request_id=request_id, arrival_s=np.ascontiguousarray(arrival),
        prompt_tokens=prompt_a, output_tokens=output_a, step_offsets=offsets,
        draft_tokens=np.ascontiguousarray(drafts, dtype=np.int16),
        accepted_tokens=np.ascontiguousarray(accepts, dtype=np.int16),
        category=category, tenant=tenant,
        ttft_slo_s=nan_slo(slos["ttft_slo_s"]), tpot_slo_s=nan_slo(slos["tpot_slo_s"]),
        acceptance=acc_meta, metadata=metadata, notes=tuple(notes), warnings=warnings,
        prefix_offsets=prefix_offsets, prefix_ids=prefix_ids,
        prefix_block_tokens=(int(metadata[META_PREFIX_BLOCK]) if prefix_offsets is not None
                             else None))


def steps_table(offsets: np.ndarray, drafts: np.ndarray, accepts: np.ndarray) -> tuple[pa.Array, pa.Array]:
    """``draft_tokens`` and ``accepted_tokens`` list arrays from flat per-step arrays."""
    off = pa.array(np.asarray(offsets, dtype=np.int64).astype(np.int32)) \
        if int(offsets[-1]) < 2**31 - 1 else None
    if off is None:
        raise SpecschedError("too many steps for one batch (over 2^31): write in smaller batches")
    d = pa.ListArray.from_arrays(off, pa.array(np.asarray(drafts, dtype=np.int16)))
    a = pa.ListArray.from_arrays(off, pa.array(np.asarray(accepts, dtype=np.int16)))
    return d, a
