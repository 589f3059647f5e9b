"""Result tables, the summary, and writing a results folder atomically.

The columns of every table and the keys of ``summary.json`` are documented in
``docs/simulator.md``; analysis reads these files and nothing else.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from backends.protocol import VERIFY_MODES
from simulator import core as C
from simulator.config import MLA_WIDTHS
from traces.atomic import atomic_output_dir

__all__ = ["SimResult", "StepSink", "write_results", "write_into", "requests_table", "summarize",
           "latency_stats", "steps_batch", "request_steps_batch"]

KINDS = ("prefill", "draft", "verify", "draft_extend")  # indexed by simulator.core.KIND_*
#: zstd, dictionary encoding only for the dictionary columns, no column statistics: about twice
#: as fast to write as pyarrow's defaults for these tables, at the same size
PARQUET_OPTIONS = dict(compression="zstd", use_dictionary=["kind", "mode", "category", "tenant"],
                       write_statistics=False)


@dataclass
class SimResult:
    """A finished run: the tables and the summary (a plain JSON-able dict).  ``steps`` and
    ``request_steps`` are None when they were streamed into a results folder instead."""

    requests: pa.Table
    steps: pa.Table | None
    request_steps: pa.Table | None
    summary: dict[str, Any]


def _dict_col(codes: np.ndarray, names: tuple[str, ...]) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(codes.astype(np.int8)), pa.array(list(names)))


def requests_table(arrays: dict[str, np.ndarray], trace) -> pa.Table:
    cols: dict[str, Any] = {"request_id": trace.request_id}
    cols.update(arrays)
    for name in ("category", "tenant"):
        col = getattr(trace, name, None)
        cols[name] = col if col is not None else pa.nulls(len(arrays["arrival_s"]), pa.string())
    for name in ("ttft_slo_s", "tpot_slo_s"):
        col = getattr(trace, name, None)
        cols[name] = (pa.array(col, pa.float64(), from_pandas=True) if col is not None
                      else pa.nulls(len(arrays["arrival_s"]), pa.float64()))
    return pa.table(cols)


def _non_null(batch: pa.RecordBatch, nullable: tuple[str, ...] = ()) -> pa.RecordBatch:
    """Declare the columns that are never null as such: parquet then writes no definition
    levels for them (about a third faster to write)."""
    fields = [pa.field(f.name, f.type, nullable=f.name in nullable) for f in batch.schema]
    return pa.RecordBatch.from_arrays(batch.columns, schema=pa.schema(fields))


def member_kv_array(nmem: np.ndarray, mk: np.ndarray) -> pa.ListArray:
    """Each step's members' KV (``list<int32>``, launch order) from the chunk's counts per step
    and its member buffer."""
    offsets = np.zeros(len(nmem) + 1, np.int32)
    np.cumsum(nmem, out=offsets[1:])
    if offsets[-1] != len(mk):
        raise ValueError(f"{len(mk)} member KVs for {int(offsets[-1])} members")
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()),
                                    pa.array(mk.astype(np.int32, copy=False), pa.int32()))


def steps_batch(si: np.ndarray, sf: np.ndarray, mk: np.ndarray | None = None) -> pa.RecordBatch:
    """Step rows as an Arrow batch, from one column-major chunk of the core's buffers; with
    ``mk`` (that chunk's member buffer) a ``member_kv`` column too."""
    kind = si[C.S_KIND]
    verify = kind == C.KIND_VERIFY
    extra = {} if mk is None else {"member_kv": member_kv_array(si[C.S_NMEM], mk)}
    return _non_null(pa.RecordBatch.from_pydict({
        "replica": si[C.S_REPLICA].astype(np.int16),
        "iteration": si[C.S_ITER].astype(np.int64),
        "launch": si[C.S_LAUNCH].astype(np.int16),
        "kind": _dict_col(kind, KINDS),
        "start_s": sf[C.SF_START],
        "latency_s": sf[C.SF_LAT],
        "bs": si[C.S_BS],
        "bs_padded": si[C.S_BSPAD],
        "width": si[C.S_WIDTH].astype(np.int16),
        "min_width": si[C.S_MINW].astype(np.int16),
        "max_width": si[C.S_MAXW].astype(np.int16),
        "distinct_widths": si[C.S_DISTINCT].astype(np.int16),
        "iter_distinct_widths": si[C.S_ITERDISTINCT].astype(np.int16),
        "mode": pa.DictionaryArray.from_arrays(
            pa.array(si[C.S_MODE].astype(np.int8), mask=~verify), pa.array(list(VERIFY_MODES))),
        "tokens": si[C.S_TOKENS],
        "padded_slots": si[C.S_PADSLOTS],
        "graph_pad_slots": si[C.S_GPADSLOTS],
        "graph": si[C.S_GRAPH].astype(bool),
        "passes": si[C.S_PASSES].astype(np.int16),
        "kv_mean": sf[C.SF_KVMEAN],
        "kv_max": si[C.S_KVMAX],
        "lookup_kv": sf[C.SF_LOOKUP],
        "kv_pages_used": si[C.S_KVUSED],
        "kv_pages_cached": si[C.S_KVCACHED],
        "committed_tokens": si[C.S_COMMITTED],
        "violations": si[C.S_VIOL],
        "out_of_grid": si[C.S_OOG].astype(bool),
        "max_abs_error": sf[C.SF_ERR],
        **extra,
    }), nullable=("mode",))


def request_steps_batch(rsi: np.ndarray, rsf: np.ndarray) -> pa.RecordBatch:
    return _non_null(pa.RecordBatch.from_pydict({
        "request": rsi[0].astype(np.int32),
        "time_s": rsf,
        "tokens": rsi[1].astype(np.int16),
    }))


class StepSink:
    """Receives the core's step rows chunk by chunk: keeps running totals for the summary and
    either collects the rows (in memory) or streams them into parquet files in ``stream_dir``
    (so a run's memory does not grow with its number of forward passes).

    Rows keep the order in which the engine simulated them: chronological within a replica
    (and within a request, for request steps).
    """

    def __init__(self, stream_dir: Path | None = None, *, request_steps: bool = True,
                 member_kv: bool = False):
        self.stream_dir = None if stream_dir is None else Path(stream_dir)
        self.keep_request_steps = request_steps
        self.member_kv = member_kv
        self._steps: list[pa.RecordBatch] = []
        self._rsteps: list[pa.RecordBatch] = []
        self._writers: dict[str, pq.ParquetWriter] = {}
        self.totals = np.zeros(len(_TOTALS), np.float64)

    def _emit(self, name: str, batch: pa.RecordBatch, store: list) -> None:
        if self.stream_dir is None:
            store.append(batch)
            return
        w = self._writers.get(name)
        if w is None:
            w = pq.ParquetWriter(self.stream_dir / f"{name}.parquet", batch.schema,
                                 **PARQUET_OPTIONS)
            self._writers[name] = w
        w.write_batch(batch)

    def add(self, si: np.ndarray, sf: np.ndarray, rsi: np.ndarray, rsf: np.ndarray,
            mk: np.ndarray | None = None) -> None:
        if si.shape[1]:
            self.totals += _step_totals(si, sf)
            self._emit("steps", steps_batch(si, sf, mk if self.member_kv else None), self._steps)
        if rsi.shape[1] and self.keep_request_steps:
            self._emit("request_steps", request_steps_batch(rsi, rsf), self._rsteps)

    def close(self) -> tuple[pa.Table | None, pa.Table | None]:
        """The tables when kept in memory (None when streamed); closes streamed files."""
        names = ("steps", "request_steps") if self.keep_request_steps else ("steps",)
        if self.stream_dir is not None:
            for name in names:
                if name not in self._writers:  # nothing was recorded: still write the file
                    self._emit(name, _empty_batch(name, self.member_kv), [])
                self._writers.pop(name).close()
            return None, None
        kept = {"steps": self._steps, "request_steps": self._rsteps}
        tables = {name: pa.Table.from_batches(kept[name] or [_empty_batch(name, self.member_kv)])
                  for name in names}
        return tables["steps"], tables.get("request_steps")


def _empty_batch(name: str, member_kv: bool = False) -> pa.RecordBatch:
    if name == "steps":
        return steps_batch(np.zeros((C.NSI, 0), np.int32), np.zeros((C.NSF, 0)),
                           np.zeros(0, np.int32) if member_kv else None)
    return request_steps_batch(np.zeros((2, 0), np.int64), np.zeros(0))


_TOTALS = ("passes", "verify_launches", "draft_phases", "draft_passes", "draft_extend_passes",
           "eager_verify_launches", "prefill_passes", "decode_iterations",
           "mixed_iterations", "verify_requests", "verify_slots", "committed_verify",
           "padded_slots", "graph_pad_slots", "graph_replays",
           "eager_launches", "violations", "violation_launches", "out_of_grid", "busy_s",
           "verify_over_mla")
_T = {name: i for i, name in enumerate(_TOTALS)}


def _step_totals(si: np.ndarray, sf: np.ndarray) -> np.ndarray:
    kind = si[C.S_KIND]
    verify = kind == C.KIND_VERIFY
    first = verify & (si[C.S_LAUNCH] == 0)
    graph = si[C.S_GRAPH] == 1
    t = np.zeros(len(_TOTALS))
    t[_T["passes"]] = len(kind)
    t[_T["verify_launches"]] = verify.sum()
    t[_T["draft_phases"]] = (kind == C.KIND_DRAFT).sum()
    t[_T["draft_passes"]] = si[C.S_PASSES][kind == C.KIND_DRAFT].sum()
    t[_T["draft_extend_passes"]] = (kind == C.KIND_EXTEND).sum()
    t[_T["eager_verify_launches"]] = (verify & ~graph).sum()
    t[_T["prefill_passes"]] = (kind == C.KIND_PREFILL).sum()
    t[_T["decode_iterations"]] = first.sum()
    t[_T["mixed_iterations"]] = (first & (si[C.S_ITERDISTINCT] > 1)).sum()
    t[_T["verify_requests"]] = si[C.S_BS][verify].sum()
    t[_T["verify_slots"]] = si[C.S_TOKENS][verify].sum()
    t[_T["committed_verify"]] = si[C.S_COMMITTED][verify].sum()
    t[_T["padded_slots"]] = si[C.S_PADSLOTS][verify].sum()
    t[_T["graph_pad_slots"]] = si[C.S_GPADSLOTS][verify].sum()
    t[_T["graph_replays"]] = graph.sum()
    t[_T["eager_launches"]] = (~graph).sum()
    t[_T["violations"]] = si[C.S_VIOL].sum()
    t[_T["violation_launches"]] = (si[C.S_VIOL] > 0).sum()
    t[_T["out_of_grid"]] = si[C.S_OOG].sum()
    t[_T["busy_s"]] = sf[C.SF_LAT].sum()
    # verify launches with a request wider than the widest AITER MLA decode kernel (the summary
    # warns of them on an MLA model, where the live executor refuses them)
    t[_T["verify_over_mla"]] = (verify & (np.maximum(si[C.S_WIDTH], si[C.S_MAXW])
                                          > max(MLA_WIDTHS))).sum()
    return t


def latency_stats(values: np.ndarray) -> dict[str, float | None]:
    """p50/p90/p99/mean of finite values (None when there are none)."""
    v = values[np.isfinite(values)]
    if len(v) == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(v.mean())}


def summarize(requests: pa.Table, totals: np.ndarray) -> dict[str, Any]:
    """The headline metrics of a run (analysis computes the rest from the tables);
    ``totals`` are the running step totals of a :class:`StepSink`."""
    col = lambda name: requests.column(name).to_numpy(zero_copy_only=False)  # noqa: E731
    T = {name: totals[i] for i, name in enumerate(_TOTALS)}
    arrival = col("arrival_s")
    first = col("first_token_s")
    finish = col("finish_s")
    out = col("output_tokens").astype(np.int64)
    ttft = first - arrival
    e2e = finish - arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), np.nan)
    duration = float(finish.max() - arrival.min()) if len(arrival) else 0.0
    iterations = int(T["decode_iterations"])
    ratio = lambda a, b: float(a / b) if b else None  # noqa: E731
    # every query row the verify launches ran: their requests' rows (width padding included)
    # and the rows of padded graph batch entries; the padding figures share this denominator
    slots = T["verify_slots"] + T["graph_pad_slots"]
    warnings = []
    if T["out_of_grid"]:
        warnings.append(f"{int(T['out_of_grid'])} of {int(T['passes'])} forward passes "
                        f"({T['out_of_grid'] / T['passes']:.1%}) were looked up outside the "
                        "latency table's measured grid and extrapolated")
    return {
        "requests": int(len(arrival)),
        "duration_s": duration,
        "output_tokens": int(out.sum()),
        "throughput_tok_s": ratio(out.sum(), duration),
        "throughput_req_s": ratio(len(arrival), duration),
        "ttft_s": latency_stats(ttft),
        "tpot_s": latency_stats(tpot),
        "e2e_s": latency_stats(e2e),
        "queue_s": latency_stats(col("admit_s") - arrival),
        "accept_len_mean": ratio(T["committed_verify"], T["verify_requests"]),
        "verify_slots": int(slots),
        "padding_waste": ratio(T["padded_slots"] + T["graph_pad_slots"], slots) or 0.0,
        "width_pad_frac": ratio(T["padded_slots"], slots) or 0.0,
        "graph_pad_frac": ratio(T["graph_pad_slots"], slots) or 0.0,
        "decode_iterations": iterations,
        "verify_launches": int(T["verify_launches"]),
        "verify_launches_per_iter": ratio(T["verify_launches"], iterations),
        "mixed_iter_frac": ratio(T["mixed_iterations"], iterations) or 0.0,
        "graph_replays": int(T["graph_replays"]),
        "eager_launches": int(T["eager_launches"]),
        "prefill_passes": int(T["prefill_passes"]),
        "draft_phases": int(T["draft_phases"]),
        "draft_passes": int(T["draft_passes"]),
        "draft_extend_passes": int(T["draft_extend_passes"]),
        "eager_verify_launches": int(T["eager_verify_launches"]),
        "forward_passes": int(T["passes"]),
        "violations": int(T["violations"]),
        "violation_launches": int(T["violation_launches"]),
        "retractions": int(col("retractions").sum()),
        "truncated_drafts": int(col("truncated_drafts").sum()),
        "busy_s": float(T["busy_s"]),
        "out_of_grid_passes": int(T["out_of_grid"]),
        "verify_launches_over_mla_width": int(T["verify_over_mla"]),
        "warnings": warnings,
    }


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating, float)):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


def write_into(result: SimResult, folder: Path) -> None:
    """Write the tables held in memory and summary.json into an existing folder."""
    for name, table in (("requests", result.requests), ("steps", result.steps),
                        ("request_steps", result.request_steps)):
        if table is not None:
            pq.write_table(table, folder / f"{name}.parquet", **PARQUET_OPTIONS)
    with open(folder / "summary.json", "w") as fh:
        json.dump(_jsonable(result.summary), fh, indent=2, sort_keys=False)
        fh.write("\n")


def write_results(result: SimResult, out_dir: str | Path, *, overwrite: bool = True,
                  extra: Callable[[Path], None] | None = None, inputs=()) -> Path:
    """Write requests/steps/request_steps.parquet and summary.json into ``out_dir``, atomically.

    ``extra(folder)`` may add files (a report) to the folder before it is renamed into place.
    (Runs that streamed their steps write through :func:`simulator.run_to` instead.)
    ``inputs``: the run's input files, which ``out_dir`` may not hold."""
    out_dir = Path(out_dir)
    with atomic_output_dir(out_dir, overwrite=overwrite, inputs=inputs) as tmp:
        write_into(result, tmp)
        if extra is not None:
            extra(tmp)
    return out_dir
