"""The discrete-event engine (SimPy): replicas, scheduler, KV cache, verify batching, CUDA-graph buckets.

Imports ``traces`` and the executor protocol (``backends.protocol``, ``backends.latency_table``,
``backends.jit``) only; never torch.

    from simulator import run, write_results
    result = run(trace_arrays, config, executor, kv_capacity_tokens=...)
    write_results(result, "runs/x")
"""

from __future__ import annotations

import time
from typing import Callable

from backends.jit import jit_status
from backends.protocol import Executor
from simulator.config import SimConfig
from simulator.engine import Simulation
from simulator.results import (SimResult, request_steps_table, requests_table, steps_table,
                               summarize, write_results)

__all__ = ["run", "write_results", "SimResult", "SimConfig"]


def run(trace, config: SimConfig, executor: Executor, *, kv_capacity_tokens: int | None = None,
        progress: Callable[[int, int], None] | None = None) -> SimResult:
    """Simulate ``trace`` (a :class:`traces.TraceArrays`) under ``config``, timing passes with
    ``executor``.  ``kv_capacity_tokens`` defaults to ``config.engine.kv_capacity_tokens``.
    ``progress(finished, total)`` is called now and then.  Deterministic: the same inputs give
    the same tables (the summary's ``wall_s`` aside)."""
    from traces.errors import SpecschedError

    t0 = time.perf_counter()
    capacity = kv_capacity_tokens or config.engine.kv_capacity_tokens
    if not capacity:
        raise SpecschedError("engine.kv_capacity_tokens is 0: give the KV budget, or a model "
                             "and GPU to derive it from")
    sim = Simulation(trace, config, executor, kv_capacity_tokens=int(capacity), progress=progress)
    sim.run()
    requests = requests_table(sim.request_arrays(), trace)
    steps = steps_table(*sim.buf.steps())
    request_steps = None
    if config.engine.record_request_steps:
        request_steps = request_steps_table(*sim.buf.request_steps())
    summary = summarize(requests, steps)
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
    })
    for caveat in describe.get("caveats", []) if isinstance(describe, dict) else []:
        summary["warnings"].append(str(caveat))
    summary["wall_s"] = time.perf_counter() - t0
    return SimResult(requests=requests, steps=steps, request_steps=request_steps, summary=summary)
