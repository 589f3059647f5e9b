"""The discrete-event engine (SimPy): replicas, scheduler, KV cache, verify batching, CUDA-graph buckets.

Imports ``traces`` and the executor protocol (``backends.protocol``, ``backends.latency_table``,
``backends.jit``) only; never torch.

    from simulator import run, write_results
    result = run(trace_arrays, config, executor, kv_capacity_tokens=...)
    write_results(result, "runs/x")
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from backends.jit import jit_status
from backends.protocol import Executor
from simulator.config import SimConfig
from simulator.engine import Simulation
from simulator.results import (SimResult, StepSink, requests_table, summarize, write_into,
                               write_results)
from traces.atomic import atomic_output_dir

__all__ = ["run", "run_to", "write_results", "SimResult", "SimConfig"]


def run(trace, config: SimConfig, executor: Executor, *, kv_capacity_tokens: int | None = None,
        progress: Callable[[int, int], None] | None = None,
        stream_dir: str | Path | None = None) -> SimResult:
    """Simulate ``trace`` (a :class:`traces.TraceArrays`) under ``config``, timing passes with
    ``executor``.

    ``kv_capacity_tokens`` defaults to ``config.engine.kv_capacity_tokens``.  ``progress(finished,
    total)`` is called now and then.  With ``stream_dir``, steps.parquet and
    request_steps.parquet are written into that (existing) folder as the run goes, and the
    result holds no step tables (memory stays flat however long the run).  Deterministic: the
    same inputs give the same tables (the summary's ``wall_s`` aside).
    """
    from traces.errors import SpecschedError

    t0 = time.perf_counter()
    capacity = kv_capacity_tokens or config.engine.kv_capacity_tokens
    if not capacity:
        raise SpecschedError("engine.kv_capacity_tokens is 0: give the KV budget, or a model "
                             "and GPU to derive it from")
    sink = StepSink(None if stream_dir is None else Path(stream_dir),
                    request_steps=config.engine.record_request_steps)
    sim = Simulation(trace, config, executor, kv_capacity_tokens=int(capacity), progress=progress,
                     sink=sink)
    sim.run()
    requests = requests_table(sim.request_arrays(), trace)
    steps, request_steps = sink.close()
    summary = summarize(requests, sink.totals)
    describe = executor.describe()
    summary.update({
        "backend": executor.name,
        "backend_detail": describe,
        "policy": config.engine.policy,
        "replicas": config.cluster.replicas,
        "kv_capacity_tokens": int(capacity),
        "trace": {"path": str(getattr(trace, "path", "")),
                  "requests": int(len(trace.arrival_s)),
                  "acceptance": getattr(trace, "acceptance", {}).get("kind"),
                  "notes": list(getattr(trace, "notes", ()))},
        "config": config.to_dict(),
        "engine_core": jit_status(),
        "kv_lookup": ("straggler" if sim.straggler_kv else "mean") if sim.table is not None else None,
    })
    if sim.table is not None and config.backend.kv_lookup == "straggler" and not sim.straggler_kv:
        summary["warnings"].append("the latency table carries no attention-kernel occupancy (a "
                                   "profile recorded before it was stored): batches were looked "
                                   "up at their mean KV length, so a long request in a batch "
                                   "that fits in one wave of the attention kernel is undercounted")
    for caveat in describe.get("caveats", []) if isinstance(describe, dict) else []:
        summary["warnings"].append(str(caveat))
    summary["wall_s"] = time.perf_counter() - t0
    return SimResult(requests=requests, steps=steps, request_steps=request_steps, summary=summary)


def run_to(out_dir: str | Path, trace, config: SimConfig, executor: Executor, *,
           kv_capacity_tokens: int | None = None,
           progress: Callable[[int, int], None] | None = None, overwrite: bool = True,
           extra: Callable[[Path], None] | None = None,
           summary_extra: dict | None = None, inputs=()) -> SimResult:
    """:func:`run`, streaming the results into ``out_dir``; the folder appears (or is replaced)
    only when the whole run and ``extra(folder)`` succeeded.  ``out_dir`` must be a folder
    :func:`traces.atomic.check_output_dir` accepts (``inputs``: the run's input files)."""
    with atomic_output_dir(out_dir, overwrite=overwrite, inputs=inputs) as tmp:
        result = run(trace, config, executor, kv_capacity_tokens=kv_capacity_tokens,
                     progress=progress, stream_dir=tmp)
        if summary_extra:
            result.summary.update(summary_extra)
        t0 = time.perf_counter()
        write_into(result, tmp)
        result.summary["write_s"] = time.perf_counter() - t0
        if extra is not None:
            extra(tmp)
    return result
