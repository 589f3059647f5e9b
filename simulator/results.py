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

from simulator import core as C
from traces.atomic import atomic_output_dir

__all__ = ["SimResult", "write_results", "steps_table", "requests_table",
           "request_steps_table", "summarize", "latency_stats"]

KINDS = ("prefill", "draft", "verify")
#: zstd, dictionary encoding only for the dictionary columns, no column statistics: about twice
#: as fast to write as pyarrow's defaults for these tables, at the same size
PARQUET_OPTIONS = dict(compression="zstd", use_dictionary=["kind", "mode", "category", "tenant"],
                       write_statistics=False)
MODES = ("uniform", "ragged", "unsafe-derived")


@dataclass
class SimResult:
    """A finished run: the three tables and the summary (plain JSON-able dict)."""

    requests: pa.Table
    steps: pa.Table
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


def steps_table(si_chunks: list[np.ndarray], sf_chunks: list[np.ndarray]) -> pa.Table:
    """One row per forward pass, ordered by replica then time (chunks as the buffers hold them)."""
    def icol(j: int) -> np.ndarray:
        v = np.concatenate([c[j] for c in si_chunks])
        return v if order is None else v[order]

    def fcol(j: int) -> np.ndarray:
        v = np.concatenate([c[j] for c in sf_chunks])
        return v if order is None else v[order]

    order = None
    replica = icol(C.S_REPLICA)
    if len(replica) and np.any(np.diff(replica) < 0):
        order = np.argsort(replica, kind="stable")
        replica = replica[order]
    kind = icol(C.S_KIND)
    verify = kind == C.KIND_VERIFY
    mode = icol(C.S_MODE)
    return pa.table({
        "replica": replica.astype(np.int16),
        "iteration": icol(C.S_ITER).astype(np.int64),
        "launch": icol(C.S_LAUNCH).astype(np.int16),
        "kind": _dict_col(kind, KINDS),
        "start_s": fcol(C.SF_START),
        "latency_s": fcol(C.SF_LAT),
        "bs": icol(C.S_BS),
        "bs_padded": icol(C.S_BSPAD),
        "width": icol(C.S_WIDTH).astype(np.int16),
        "min_width": icol(C.S_MINW).astype(np.int16),
        "max_width": icol(C.S_MAXW).astype(np.int16),
        "distinct_widths": icol(C.S_DISTINCT).astype(np.int16),
        "iter_distinct_widths": icol(C.S_ITERDISTINCT).astype(np.int16),
        "mode": pa.DictionaryArray.from_arrays(pa.array(mode.astype(np.int8), mask=~verify),
                                               pa.array(list(MODES))),
        "tokens": icol(C.S_TOKENS),
        "padded_slots": icol(C.S_PADSLOTS),
        "graph_pad_slots": icol(C.S_GPADSLOTS),
        "graph": icol(C.S_GRAPH).astype(bool),
        "passes": icol(C.S_PASSES).astype(np.int16),
        "kv_mean": fcol(C.SF_KVMEAN),
        "kv_max": icol(C.S_KVMAX),
        "kv_pages_used": icol(C.S_KVUSED),
        "committed_tokens": icol(C.S_COMMITTED),
        "violations": icol(C.S_VIOL),
        "out_of_grid": icol(C.S_OOG).astype(bool),
        "max_abs_error": fcol(C.SF_ERR),
    })


def request_steps_table(RSI: np.ndarray, RSF: np.ndarray) -> pa.Table:
    """One row per token delivery, grouped by request, in time order within a request (the
    buffers hold each request's rows in time order already, so a stable sort suffices)."""
    order = np.argsort(RSI[0], kind="stable")
    return pa.table({
        "request": RSI[0, order].astype(np.int32),
        "time_s": RSF[order],
        "tokens": RSI[1, order].astype(np.int16),
    })


def latency_stats(values: np.ndarray) -> dict[str, float | None]:
    """p50/p90/p99/mean of finite values (None when there are none)."""
    v = values[np.isfinite(values)]
    if len(v) == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    p50, p90, p99 = np.percentile(v, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(v.mean())}


def summarize(requests: pa.Table, steps: pa.Table) -> dict[str, Any]:
    """The headline metrics of a run (analysis computes the rest from the tables)."""
    col = lambda t, name: t.column(name).to_numpy(zero_copy_only=False)  # noqa: E731
    arrival = col(requests, "arrival_s")
    first = col(requests, "first_token_s")
    finish = col(requests, "finish_s")
    out = col(requests, "output_tokens").astype(np.int64)
    ttft = first - arrival
    e2e = finish - arrival
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (finish - first) / np.maximum(out - 1, 1), np.nan)
    duration = float(finish.max() - arrival.min()) if len(arrival) else 0.0
    kind = steps.column("kind").combine_chunks().indices.to_numpy(zero_copy_only=False)
    verify = kind == KINDS.index("verify")
    draft = kind == KINDS.index("draft")
    prefill = kind == KINDS.index("prefill")
    bs = col(steps, "bs")
    tokens = col(steps, "tokens")
    padded = col(steps, "padded_slots")
    committed = col(steps, "committed_tokens")
    graph = col(steps, "graph")
    first_rows = verify & (col(steps, "launch") == 0)  # one per decode iteration
    iterations = int(first_rows.sum())
    launches = int(verify.sum())
    verify_slots = int(tokens[verify].sum())
    oog = col(steps, "out_of_grid")
    latency = col(steps, "latency_s")
    busy = float(latency.sum())
    iter_mix = col(steps, "iter_distinct_widths")
    warnings = []
    if oog.any():
        warnings.append(f"{int(oog.sum())} of {len(oog)} forward passes "
                        f"({oog.mean():.1%}) were looked up outside the latency table's measured "
                        "grid and extrapolated")
    return {
        "requests": int(len(arrival)),
        "duration_s": duration,
        "output_tokens": int(out.sum()),
        "throughput_tok_s": float(out.sum() / duration) if duration > 0 else None,
        "throughput_req_s": float(len(arrival) / duration) if duration > 0 else None,
        "ttft_s": latency_stats(ttft),
        "tpot_s": latency_stats(tpot),
        "e2e_s": latency_stats(e2e),
        "queue_s": latency_stats(col(requests, "admit_s") - arrival),
        "accept_len_mean": (float(committed[verify].sum() / bs[verify].sum())
                            if verify.any() else None),
        "padded_slot_frac": float(padded[verify].sum() / verify_slots) if verify_slots else 0.0,
        "graph_pad_slot_frac": (float(col(steps, "graph_pad_slots")[verify].sum()
                                      / max(1, (col(steps, "bs_padded")[verify]
                                                * col(steps, "width")[verify]).sum())))
                               if verify.any() else 0.0,
        "decode_iterations": int(iterations),
        "verify_launches": launches,
        "launches_per_iter": float(launches / iterations) if iterations else None,
        "mixed_iter_frac": (float((iter_mix[first_rows] > 1).mean()) if first_rows.any()
                            else 0.0),
        "graph_replays": int(graph.sum()),
        "eager_launches": int((~graph & (verify | draft)).sum() + prefill.sum()),
        "prefill_passes": int(prefill.sum()),
        "draft_phases": int(draft.sum()),
        "violations": int(col(steps, "violations").sum()),
        "violation_launches": int((col(steps, "violations") > 0).sum()),
        "retractions": int(col(requests, "retractions").sum()),
        "truncated_drafts": int(col(requests, "truncated_drafts").sum()),
        "busy_s": busy,
        "out_of_grid_passes": int(oog.sum()),
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


def write_results(result: SimResult, out_dir: str | Path, *, overwrite: bool = True,
                  extra: Callable[[Path], None] | None = None) -> Path:
    """Write requests/steps(/request_steps).parquet and summary.json into ``out_dir``, atomically.

    ``extra(folder)`` may add files (a report) to the folder before it is renamed into place."""
    out_dir = Path(out_dir)
    with atomic_output_dir(out_dir, overwrite=overwrite) as tmp:
        for name, table in (("requests", result.requests), ("steps", result.steps),
                            ("request_steps", result.request_steps)):
            if table is not None:
                pq.write_table(table, tmp / f"{name}.parquet", **PARQUET_OPTIONS)
        with open(tmp / "summary.json", "w") as fh:
            json.dump(_jsonable(result.summary), fh, indent=2, sort_keys=False)
            fh.write("\n")
        if extra is not None:
            extra(tmp)
    return out_dir
