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
from simulator import core as C
from simulator.config import MLA_WIDTHS, RADIX_OFF_WHAT_IF, SimConfig
from simulator.engine import Simulation
from simulator.results import (SimResult, StepSink, requests_table, summarize, write_into,
                               write_results)
from traces.atomic import atomic_output_dir

__all__ = ["run", "run_to", "write_results", "SimResult", "SimConfig"]

#: step switches per second from which a summary warns that the controller oscillates (one a
#: second is the "several times a second" flip-flop SGLang users reported as a failure)
OSCILLATION_PER_S = 1.0


def run(trace, config: SimConfig, executor: Executor, *, kv_capacity_tokens: int | None = None,
        progress: Callable[[int, int], None] | None = None,
        stream_dir: str | Path | None = None, context_len: int = 0) -> SimResult:
    """Simulate ``trace`` (a :class:`traces.TraceArrays`) under ``config``, timing passes with
    ``executor``.

    ``kv_capacity_tokens`` defaults to ``config.engine.kv_capacity_tokens``; ``context_len`` (the
    model's, 0 = unknown) bounds the max_new_tokens of requests whose trace row gives none.  ``progress(finished,
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
                    request_steps=config.engine.record_request_steps,
                    member_kv=config.engine.record_member_kv)
    sim = Simulation(trace, config, executor, kv_capacity_tokens=int(capacity), progress=progress,
                     sink=sink, context_len=context_len)
    compile_s = sim.compile()  # the engine's speed is the run's, not numba's
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
        "kv_lookup": sim.kv_lookup if sim.table is not None else None,
        "bs_interp": sim.bs_interp if sim.table is not None else None,
        "what_if": config.what_ifs,
        "speculative": bool(sim.CI[C.C_SPEC]),
        "controller": sim.controller_stats(summary.get("duration_s") or 0.0),
    })
    summary.update(sim.prefix_summary())
    if not sim.has_prefix:  # nothing to match: off is what the cache would do anyway
        summary["what_if"] = [w for w in summary["what_if"] if w != RADIX_OFF_WHAT_IF]
    _engine_warnings(summary, config, sim)
    measured = sim.table is not None and sim.table.source.get("backend") == "profile"
    if measured and config.backend.kv_lookup != "mean" and not sim.straggler_kv:
        # true of a measured profile only: a roofline prices attention by the summed KV, so
        # the straggler rule (the attention kernel's waves) does not apply to it
        summary["warnings"].append("the latency table carries no attention-kernel occupancy (a "
                                   "profile recorded before it was stored): batches were looked "
                                   "up at their mean KV length, so a long request in a batch "
                                   "that fits in one wave of the attention kernel is undercounted")
    for caveat in describe.get("caveats", []) if isinstance(describe, dict) else []:
        summary["warnings"].append(str(caveat))
    summary["warnings"].extend(getattr(trace, "warnings", ()))
    summary["wall_s"] = time.perf_counter() - t0 - compile_s
    return SimResult(requests=requests, steps=steps, request_steps=request_steps, summary=summary)


def _engine_warnings(summary: dict, config: SimConfig, sim: Simulation) -> None:
    """What the summary must say about how far this run is SGLang's."""
    e = config.engine
    w = summary["warnings"]
    for what in summary["what_if"]:
        w.append(f"what-if (not something SGLang can run): {what}")
    if e.scheduler_overhead_s == 0:
        w.append("the scheduler's host time is not modelled (engine.scheduler_overhead_s = 0: "
                 "not measured for SGLang here)" + (
                     "; with overlap scheduling SGLang hides most of it" if e.overlap else ""))
    if e.radix_cache == "on" and not sim.has_prefix:
        w.append("engine.radix_cache is on but the trace has no prefix_hashes: nothing could be "
                 "matched (every prompt was prefilled in full)")
    if e.schedule_policy == "lpm" and not sim.radix_on:
        w.append("schedule_policy 'lpm' without a radix cache: SGLang then schedules FCFS, and so "
                 "did this run")
    ctl = summary["controller"]
    if ctl["switches_per_s"] is not None and ctl["switches_per_s"] >= OSCILLATION_PER_S:
        w.append(f"the {ctl['name']} controller switched its draft count "
                 f"{ctl['switches_per_s']:.1f} times a second ({ctl['switches']} switches in "
                 f"{ctl['rounds']} rounds): it oscillates")
    wide = summary.get("verify_launches_over_mla_width", 0)
    if e.mla and wide:
        w.append(f"{wide} of {summary['verify_launches']} verify launches ran a request wider "
                 f"than {max(MLA_WIDTHS)} tokens, which AITER's MLA decode kernels do not take "
                 f"(1, 2 and 4 query rows per request; 3 is padded to 4): their times are "
                 f"extrapolated past the profile's widths and `--backend aiter` refuses such a "
                 f"run (engine.max_draft {max(MLA_WIDTHS) - 1} keeps every launch runnable)")
    extra = int(sim.E[:, C.E_XRETRACT].sum())
    if extra:
        w.append(f"{extra} retractions went beyond SGLang's rule to fit a verify in the KV pool "
                 "(SGLang would have run out of KV slots there)")
    kept = int(sim.E[:, C.E_XKEEP].sum())
    if kept:
        w.append(f"{kept} times the last running request failed SGLang's decode memory check "
                 "after every other was retracted: SGLang aborts it there (HTTP 500, "
                 "retract_decode), this run kept it running")
    if not sim.CI[C.C_SPEC] and not e.max_running:
        w.append("without speculative decoding SGLang sizes max_running_requests from its token "
                 "pool and the model's context length, which was not given here: "
                 f"engine.max_running = {e.running_cap} was used")


def run_to(out_dir: str | Path, trace, config: SimConfig, executor: Executor, *,
           kv_capacity_tokens: int | None = None, context_len: int = 0,
           progress: Callable[[int, int], None] | None = None, overwrite: bool = True,
           extra: Callable[[Path], None] | None = None,
           summary_extra: dict | None = None, inputs=()) -> SimResult:
    """:func:`run`, streaming the results into ``out_dir``; the folder appears (or is replaced)
    only when the whole run and ``extra(folder)`` succeeded.  ``out_dir`` must be a folder
    :func:`traces.atomic.check_output_dir` accepts (``inputs``: the run's input files)."""
    with atomic_output_dir(out_dir, overwrite=overwrite, inputs=inputs) as tmp:
        result = run(trace, config, executor, kv_capacity_tokens=kv_capacity_tokens,
                     progress=progress, stream_dir=tmp, context_len=context_len)
        if summary_extra:  # its "warnings" are added to the run's own
            result.summary.update({k: v for k, v in summary_extra.items() if k != "warnings"})
            result.summary["warnings"].extend(summary_extra.get("warnings", []))
        t0 = time.perf_counter()
        write_into(result, tmp)
        result.summary["write_s"] = time.perf_counter() - t0
        if extra is not None:
            extra(tmp)
    return result
