"""Converters from public request-log formats to the trace format.

Formats (column layouts as published by each project; ``docs/traces.md`` has examples):

``azure``     Azure LLM inference trace CSV: ``TIMESTAMP,ContextTokens,GeneratedTokens``
              (TIMESTAMP a date-time such as ``2023-11-16 18:15:46.6805900``).
``mooncake``  Mooncake JSONL: ``{"timestamp": ms, "input_length": n, "output_length": n,
              "hash_ids": [...]}`` per line.  ``hash_ids`` (one id per 512-token block of the
              prompt, chained) become ``prefix_hashes`` with ``prefix_block_tokens`` 512.
``burstgpt``  BurstGPT CSV: ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``
              (Timestamp in seconds).  Failed requests (``Response tokens`` = 0) are dropped and
              counted.  ``Model`` becomes ``tenant``, ``Log Type`` becomes ``category``.
``vidur``     Vidur processed trace CSV: ``arrived_at,num_prefill_tokens,num_decode_tokens``
              (seconds); other columns are ignored.

Every problem in the input is reported with the file, the 0-based data row (CSV: header not
counted; JSONL: line) and the column, and the conversion writes nothing.  ``request_id`` is the
request's 0-based data row in the input; ``arrival_s`` counts from the earliest request kept.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from traces.errors import Problem, ProblemLog, SpecschedError, TraceValidationError
from traces.schema import META_ACCEPTANCE, META_NOTES, META_PREFIX_BLOCK, META_SOURCE
from traces.sniff import expect_csv, expect_jsonl, json_lines

__all__ = ["FORMATS", "SourceRequests", "read_source", "convert", "ConvertResult"]


@dataclass
class SourceRequests:
    """Requests read from an input file, in file order (before sorting and limits)."""

    path: str
    format: str
    arrival_s: np.ndarray            # float64, seconds from the earliest request
    prompt_tokens: np.ndarray        # int64
    output_tokens: np.ndarray        # int64
    source_row: np.ndarray           # int64: 0-based data row / line in the input
    category: np.ndarray | None = None
    tenant: np.ndarray | None = None
    rows_in_file: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    # prefix block ids (Mooncake hash_ids): request i's are prefix_ids[off[i]:off[i+1]]
    prefix_offsets: np.ndarray | None = None
    prefix_ids: np.ndarray | None = None
    prefix_block: int | None = None

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    def select(self, idx: np.ndarray) -> "SourceRequests":
        pick = (lambda a: None if a is None else a[idx])
        poff = pids = None
        if self.prefix_offsets is not None:
            from traces.acceptance import multi_range
            lens = np.diff(self.prefix_offsets)[idx]
            pids = self.prefix_ids[multi_range(self.prefix_offsets[:-1][idx], lens)]
            poff = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        return SourceRequests(self.path, self.format, self.arrival_s[idx], self.prompt_tokens[idx],
                              self.output_tokens[idx], self.source_row[idx], pick(self.category),
                              pick(self.tenant), self.rows_in_file, dict(self.dropped), dict(self.info),
                              poff, pids, self.prefix_block)


# --------------------------------------------------------------------------------------------
# CSV helpers


def _read_csv_strings(path: str, required: list[str], fmt: str) -> pa.Table:
    p = Path(path)
    if not p.exists():
        raise SpecschedError("no such file", path=path)
    if not p.is_file():
        raise SpecschedError("is not a file", path=path)
    if p.stat().st_size == 0:
        raise TraceValidationError(path, [Problem("empty file (0 bytes)")])
    expect_csv(path, fmt)
    with p.open("rb") as fh:
        header = fh.readline().decode("utf-8", "replace").strip().lstrip("\ufeff")
    names = [h.strip() for h in header.split(",")]
    missing = [c for c in required if c not in names]
    if missing:
        raise TraceValidationError(path, [Problem(f"missing column (the header has: {header})", None, c)
                                          for c in missing])
    bad_rows = ProblemLog(path)

    def on_bad_row(row) -> str:
        data_row = None if row.number is None else row.number - 2   # 1-based line, header first
        bad_rows.add(f"expected {row.expected_columns} fields, found {row.actual_columns}: "
                     f"{row.text[:80]!r}", data_row)
        return "skip"

    try:
        table = pacsv.read_csv(
            p,
            read_options=pacsv.ReadOptions(column_names=names, skip_rows=1, use_threads=False),
            parse_options=pacsv.ParseOptions(newlines_in_values=False,
                                             invalid_row_handler=on_bad_row),
            convert_options=pacsv.ConvertOptions(column_types={n: pa.string() for n in names},
                                                 strings_can_be_null=True,
                                                 include_columns=required))
    except pa.ArrowInvalid as exc:
        raise TraceValidationError(path, [Problem(f"malformed CSV ({exc})")]) from None
    bad_rows.raise_if_any()
    if table.num_rows == 0:
        raise TraceValidationError(path, [Problem("no data rows (only a header)")])
    return table


_INT_RE = r"^\s*[+-]?\d+(\.0*)?\s*$"
_FLOAT_RE = r"^\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*$"


def _nulls(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(col.is_null().to_numpy(zero_copy_only=False), dtype=bool)


def _parse_numeric(col, name: str, probs: ProblemLog, *, integer: bool) -> np.ndarray:
    """Parse a string column; bad cells become problems (row, column) and 0 in the result."""
    col = pc.utf8_trim_whitespace(col)
    null = _nulls(col)
    ok = np.asarray(pc.fill_null(pc.match_substring_regex(col, _INT_RE if integer else _FLOAT_RE),
                                 False).to_numpy(zero_copy_only=False), dtype=bool)
    bad = ~ok & ~null
    values = col.to_pylist() if bad.any() else None
    if null.any():
        probs.add_rows(np.flatnonzero(null), name, lambda r: "missing value")
    if bad.any():
        probs.add_rows(np.flatnonzero(bad), name,
                       lambda r: f"not a {'whole ' if integer else ''}number: {values[r]!r}")
    # a placeholder that no later range check reports again (the cell is reported once)
    clean = pc.if_else(pa.array(ok), col, pa.scalar("1" if integer else "0"))
    out = np.asarray(pc.cast(clean, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
    if integer:
        big = np.abs(out) > np.iinfo(np.int32).max
        if big.any():
            probs.add_rows(np.flatnonzero(big), name, lambda r: f"{out[r]:.0f} does not fit int32")
            out = np.where(big, 1.0, out)
        return out.astype(np.int64)
    return out


def _check_tokens(values: np.ndarray, name: str, probs: ProblemLog, *, minimum: int = 1) -> None:
    bad = values < minimum
    probs.add_rows(np.flatnonzero(bad), name, lambda r: f"{values[r]} tokens (must be >= {minimum})")
    big = values > np.iinfo(np.int32).max
    probs.add_rows(np.flatnonzero(big), name, lambda r: f"{values[r]} does not fit int32")


def _check_times(values: np.ndarray, name: str, probs: ProblemLog) -> None:
    bad = ~np.isfinite(values)
    probs.add_rows(np.flatnonzero(bad), name, lambda r: f"time is {values[r]}")
    neg = np.isfinite(values) & (values < 0)
    probs.add_rows(np.flatnonzero(neg), name, lambda r: f"negative time {values[r]!r}")


def _relative(t: np.ndarray) -> np.ndarray:
    return t - t.min() if t.size else t


# --------------------------------------------------------------------------------------------
# formats


def read_azure(path: str) -> SourceRequests:
    cols = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
    t = _read_csv_strings(path, cols, "azure")
    probs = ProblemLog(path)
    ts = pc.utf8_trim_whitespace(t["TIMESTAMP"])
    null = _nulls(ts)
    pat = r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d{1,9})?$"
    ok = np.asarray(pc.fill_null(pc.match_substring_regex(ts, pat), False)
                    .to_numpy(zero_copy_only=False), dtype=bool)
    if null.any():
        probs.add_rows(np.flatnonzero(null), "TIMESTAMP", lambda r: "missing value")
    bad = ~ok & ~null
    if bad.any():
        vals = ts.to_pylist()
        probs.add_rows(np.flatnonzero(bad), "TIMESTAMP",
                       lambda r: f"not a date-time like 2023-11-16 18:15:46.6805900: {vals[r]!r}")
    prompt = _parse_numeric(t["ContextTokens"], "ContextTokens", probs, integer=True)
    output = _parse_numeric(t["GeneratedTokens"], "GeneratedTokens", probs, integer=True)
    _check_tokens(prompt, "ContextTokens", probs)
    _check_tokens(output, "GeneratedTokens", probs)
    probs.raise_if_any()
    stamps = pc.cast(ts, pa.timestamp("ns"))
    ns = np.asarray(stamps.to_numpy(zero_copy_only=False)).astype("datetime64[ns]").astype(np.int64)
    origin = ts[int(np.argmin(ns))].as_py() if ns.size else None
    arrival = (ns - ns.min()) / 1e9 if ns.size else np.zeros(0)
    n = t.num_rows
    return SourceRequests(path, "azure", arrival.astype(np.float64), prompt, output,
                          np.arange(n, dtype=np.int64), rows_in_file=n,
                          info={"time_origin": origin})


def read_vidur(path: str) -> SourceRequests:
    p = Path(path)
    header = ""
    if p.is_file() and p.stat().st_size:
        expect_csv(path, "vidur")
        with p.open("rb") as fh:
            header = fh.readline().decode("utf-8", "replace")
    names = [h.strip() for h in header.strip().split(",")]
    if header and "arrived_at" not in names and "num_prefill_tokens" in names:
        raise TraceValidationError(path, [Problem(
            "missing column: this Vidur trace has lengths only, no arrival times; use it for "
            "lengths with `specsched trace synth --lengths empirical:vidur:PATH`", None, "arrived_at")])
    cols = ["arrived_at", "num_prefill_tokens", "num_decode_tokens"]
    t = _read_csv_strings(path, cols, "vidur")
    probs = ProblemLog(path)
    arrived = _parse_numeric(t["arrived_at"], "arrived_at", probs, integer=False)
    prompt = _parse_numeric(t["num_prefill_tokens"], "num_prefill_tokens", probs, integer=True)
    output = _parse_numeric(t["num_decode_tokens"], "num_decode_tokens", probs, integer=True)
    _check_times(arrived, "arrived_at", probs)
    _check_tokens(prompt, "num_prefill_tokens", probs)
    _check_tokens(output, "num_decode_tokens", probs)
    probs.raise_if_any()
    n = t.num_rows
    return SourceRequests(path, "vidur", _relative(arrived), prompt, output,
                          np.arange(n, dtype=np.int64), rows_in_file=n,
                          info={"time_origin_s": float(arrived.min()) if n else None})


def read_vidur_lengths(path: str) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, output) token counts of a Vidur trace, with or without arrival times."""
    cols = ["num_prefill_tokens", "num_decode_tokens"]
    t = _read_csv_strings(path, cols, "vidur")
    probs = ProblemLog(path)
    prompt = _parse_numeric(t["num_prefill_tokens"], "num_prefill_tokens", probs, integer=True)
    output = _parse_numeric(t["num_decode_tokens"], "num_decode_tokens", probs, integer=True)
    _check_tokens(prompt, "num_prefill_tokens", probs)
    _check_tokens(output, "num_decode_tokens", probs)
    probs.raise_if_any()
    return prompt, output


def read_burstgpt(path: str) -> SourceRequests:
    cols = ["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"]
    t = _read_csv_strings(path, cols, "burstgpt")
    probs = ProblemLog(path)
    stamp = _parse_numeric(t["Timestamp"], "Timestamp", probs, integer=False)
    prompt = _parse_numeric(t["Request tokens"], "Request tokens", probs, integer=True)
    output = _parse_numeric(t["Response tokens"], "Response tokens", probs, integer=True)
    _check_times(stamp, "Timestamp", probs)
    failed = output == 0
    neg = output < 0
    probs.add_rows(np.flatnonzero(neg), "Response tokens",
                   lambda r: f"{output[r]} tokens (must be >= 0; 0 marks a failed request)")
    _check_tokens(np.where(failed, 1, prompt), "Request tokens", probs)
    model = t["Model"].to_numpy(zero_copy_only=False)
    logtype = t["Log Type"].to_numpy(zero_copy_only=False)
    probs.raise_if_any()
    keep = np.flatnonzero(~failed)
    n = t.num_rows
    return SourceRequests(
        path, "burstgpt", _relative(stamp[keep]), prompt[keep], output[keep], keep.astype(np.int64),
        category=np.asarray([None if x is None else str(x) for x in logtype[keep]], dtype=object),
        tenant=np.asarray([None if x is None else str(x) for x in model[keep]], dtype=object),
        rows_in_file=n, dropped={"failed (Response tokens = 0)": int(failed.sum())},
        info={"time_origin_s": float(stamp[keep].min()) if keep.size else None})


#: tokens per ``hash_ids`` block in the Mooncake traces (their README: "block size 512")
MOONCAKE_BLOCK_TOKENS = 512


def _mooncake_hash_ids(v, row: int, prompt, probs: ProblemLog) -> list[int] | None:
    """The ``hash_ids`` of one line as ints, or None after recording the problem."""
    if not isinstance(v, list):
        probs.add(f"expected a list of integers, found {type(v).__name__}", row, "hash_ids")
        return None
    for j, x in enumerate(v):
        if isinstance(x, bool) or not isinstance(x, int):
            probs.add(f"entry {j} is not an integer: {x!r}", row, "hash_ids")
            return None
        if not -2**63 <= x < 2**63:
            probs.add(f"entry {j} does not fit int64: {x}", row, "hash_ids")
            return None
    if isinstance(prompt, int) and prompt >= 1:
        most = -(-prompt // MOONCAKE_BLOCK_TOKENS)
        if len(v) > most:
            probs.add(f"{len(v)} block ids for input_length {prompt}: at most "
                      f"ceil({prompt} / {MOONCAKE_BLOCK_TOKENS}) = {most}", row, "hash_ids")
            return None
    return v


def read_mooncake(path: str) -> SourceRequests:
    p = Path(path)
    if not p.is_file():
        raise SpecschedError("no such file", path=path)
    if p.stat().st_size:
        expect_jsonl(path, "JSON lines (mooncake)", ": for an Azure, BurstGPT or Vidur CSV use "
                     "`--from azure`, `--from burstgpt` or `--from vidur`")
    raw = p.read_bytes()
    if not raw.strip():
        raise TraceValidationError(path, [Problem("empty file (no JSON lines)")])
    probs = ProblemLog(path)
    ts: list[float] = []
    inp: list[int] = []
    out: list[int] = []
    rows: list[int] = []
    hashes: list[list[int]] = []
    without_ids = 0
    for row, obj, bad in json_lines(raw):
        if bad:
            probs.add(bad, row)
            continue
        if not isinstance(obj, dict):
            probs.add("expected a JSON object", row)
            continue
        vals = []
        for key, integer in (("timestamp", False), ("input_length", True), ("output_length", True)):
            v = obj.get(key)
            if v is None:
                probs.add("missing value", row, key)
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or \
                    (integer and isinstance(v, float) and not float(v).is_integer()):
                probs.add(f"not a {'whole ' if integer else ''}number: {v!r}", row, key)
                v = None
            vals.append(v)
        ids = obj.get("hash_ids")
        if ids is None:
            without_ids += 1
            ids = []
        else:
            ids = _mooncake_hash_ids(ids, row, None if vals[1] is None else int(vals[1]), probs)
        if any(v is None for v in vals) or ids is None:
            continue
        t, i, o = vals
        if abs(i) > np.iinfo(np.int32).max or abs(o) > np.iinfo(np.int32).max:
            probs.add("token count does not fit int32", row,
                      "input_length" if abs(i) > np.iinfo(np.int32).max else "output_length")
            continue
        t = float(t)
        if not np.isfinite(t) or t < 0:
            probs.add(f"bad timestamp {t!r} (milliseconds, >= 0)", row, "timestamp")
        if i < 1:
            probs.add(f"{i} tokens (must be >= 1)", row, "input_length")
        if o < 1:
            probs.add(f"{o} tokens (must be >= 1)", row, "output_length")
        ts.append(float(t))
        inp.append(int(i))
        out.append(int(o))
        rows.append(row)
        hashes.append(ids)
    probs.raise_if_any()
    t_ms = np.asarray(ts, dtype=np.float64)
    info: dict[str, Any] = {"time_origin_ms": float(t_ms.min()) if t_ms.size else None}
    poff = pids = None
    if without_ids < len(rows):      # some line has hash_ids: keep them
        lens = np.asarray([len(h) for h in hashes], np.int64)
        poff = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        pids = np.fromiter((x for h in hashes for x in h), np.int64, count=int(poff[-1]))
        if without_ids:
            info["rows_without_hash_ids"] = without_ids
    return SourceRequests(path, "mooncake", _relative(t_ms) / 1000.0, np.asarray(inp, np.int64),
                          np.asarray(out, np.int64), np.asarray(rows, np.int64),
                          rows_in_file=len(rows), info=info, prefix_offsets=poff, prefix_ids=pids,
                          prefix_block=None if poff is None else MOONCAKE_BLOCK_TOKENS)


FORMATS: dict[str, Callable[[str], SourceRequests]] = {
    "azure": read_azure,
    "mooncake": read_mooncake,
    "burstgpt": read_burstgpt,
    "vidur": read_vidur,
}


def read_source(fmt: str, path: str | os.PathLike) -> SourceRequests:
    """Read ``path`` in format ``fmt``; raises a SpecschedError naming file/row/column."""
    if fmt not in FORMATS:
        raise SpecschedError(f"unknown input format {fmt!r} (known: {', '.join(FORMATS)})")
    return FORMATS[fmt](str(path))


# --------------------------------------------------------------------------------------------
# conversion


@dataclass(frozen=True)
class ConvertResult:
    path: str
    rows: int
    steps: int | None
    dropped: dict[str, int]
    notes: tuple[str, ...]
    metadata: dict
    warnings: tuple[str, ...] = ()


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def build_table(src: SourceRequests, lists=None) -> pa.Table:
    """The trace table of ``src`` (in its current order), with optional per-step lists."""
    from traces.io import steps_table

    cols: dict[str, pa.Array] = {
        "request_id": pc.cast(pa.array(np.asarray(src.source_row, np.int64)), pa.string()),
        "arrival_s": pa.array(np.asarray(src.arrival_s, np.float64), pa.float64()),
        "prompt_tokens": pa.array(np.asarray(src.prompt_tokens, np.int32), pa.int32()),
        "output_tokens": pa.array(np.asarray(src.output_tokens, np.int32), pa.int32()),
    }
    if lists is not None:
        d, a = steps_table(lists.offsets, lists.draft_tokens, lists.accepted_tokens)
        cols["draft_tokens"] = d
        cols["accepted_tokens"] = a
    category = src.category
    if category is None and lists is not None and lists.category is not None:
        category = lists.category
    if category is not None:
        cols["category"] = pa.array(category.tolist(), pa.string())
    if src.tenant is not None:
        cols["tenant"] = pa.array(src.tenant.tolist(), pa.string())
    if src.prefix_offsets is not None:
        off = np.asarray(src.prefix_offsets, np.int64)
        cols["prefix_hashes"] = pa.ListArray.from_arrays(
            pa.array((off - off[0]).astype(np.int32)),
            pa.array(np.asarray(src.prefix_ids[off[0]:off[-1]], np.int64), pa.int64()))
    return pa.table(cols)


def prepare(src: SourceRequests, *, limit: int | None = None,
            rate_scale: float = 1.0) -> tuple[SourceRequests, list[str]]:
    """Apply ``limit`` (first N requests kept, file order), sort arrivals stably, rebase the time
    origin on the earliest request kept, and divide arrivals by ``rate_scale``."""
    notes: list[str] = []
    if limit is not None:
        if limit < 1:
            raise SpecschedError(f"--limit must be >= 1, got {limit}")
        src = src.select(np.arange(min(limit, len(src))))
    if len(src) == 0:
        raise SpecschedError("no requests left to convert", path=src.path)
    order = np.argsort(src.arrival_s, kind="stable")
    moved = int(np.count_nonzero(order != np.arange(order.size)))
    if moved:
        src = src.select(order)
        notes.append(f"arrivals were not sorted: sorted stably ({moved} rows moved)")
    src.arrival_s = src.arrival_s - src.arrival_s[0]
    if not (np.isfinite(rate_scale) and rate_scale > 0):
        raise SpecschedError(f"--rate-scale must be a finite number > 0, got {rate_scale}")
    if rate_scale != 1.0:
        src.arrival_s = src.arrival_s / rate_scale
        notes.append(f"arrivals divided by {rate_scale:g} (rate x{rate_scale:g})")
    for reason, count in src.dropped.items():
        if count:
            notes.append(f"dropped {count} rows: {reason}")
    return src, notes


def convert(fmt: str, input_path: str | os.PathLike, output_path: str | os.PathLike, *,
            acceptance: str | None = None, seed: int = 0, limit: int | None = None,
            rate_scale: float = 1.0) -> ConvertResult:
    """Convert ``input_path`` (format ``fmt``) into a trace at ``output_path`` (atomic).

    With ``acceptance`` (a spec string), per-step lists are drawn with
    ``numpy.random.default_rng(seed)`` in arrival order; the model is recorded in the metadata.
    """
    from traces.acceptance import model_file, parse_acceptance
    from traces.atomic import check_output_file
    from traces.io import check_seed, write_trace

    check_seed(seed)
    model = parse_acceptance(acceptance) if acceptance is not None else None
    inputs = [input_path, model_file(model)]
    check_output_file(output_path, inputs=inputs, kind="parquet")  # before reading the input
    src = read_source(fmt, input_path)
    src, notes = prepare(src, limit=limit, rate_scale=rate_scale)
    meta: dict[str, Any] = {}
    totals = {"steps": 0, "assigned": False}
    if model is not None:
        meta[META_ACCEPTANCE] = model.metadata(seed)
    source = {
        "format": fmt,
        "file": Path(input_path).name,
        "sha256": _sha256(str(input_path)),
        "rows_in_file": src.rows_in_file,
        "rows": len(src),
        "dropped": src.dropped,
        "limit": limit,
        "rate_scale": rate_scale,
        **src.info,
    }
    meta[META_SOURCE] = source
    if src.prefix_block is not None:
        meta[META_PREFIX_BLOCK] = int(src.prefix_block)
        if src.info.get("rows_without_hash_ids"):
            notes.append(f"{src.info['rows_without_hash_ids']} input rows have no hash_ids: "
                         "their prefix_hashes are empty (no block known)")
    if model is not None and model.kind == "specbench":
        model.bind(src.category)
        rule = getattr(model, "_bound", None) or getattr(model, "category", None)
        if src.category is None:
            notes.append("category: the Spec-Bench category each request's steps were drawn from")
        elif rule != "trace":
            notes.append(f"the input's categories are kept in 'category'; each request's "
                         f"Spec-Bench category was drawn by rule '{rule}' and is not recorded")
    meta[META_NOTES] = notes

    def batches():
        if model is None:
            yield build_table(src, None)
            return
        from traces.acceptance import fill_blocks
        rng = np.random.default_rng(seed)
        for start, end, lists in fill_blocks(model, src.output_tokens, rng, src.category):
            totals["steps"] += int(lists.offsets[-1])
            yield build_table(src.select(np.arange(start, end)), lists)

    write_trace(batches(), output_path, metadata=meta, inputs=inputs)
    return ConvertResult(str(output_path), len(src),
                         None if model is None else totals["steps"],
                         src.dropped, tuple(notes), meta,
                         tuple(model.warnings()) if model is not None else ())
