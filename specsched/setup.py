"""Build everything a simulation needs from a :class:`~simulator.config.SimConfig`.

The glue between the packages, shared by ``simulate``, ``plan``, ``sweep``, ``uniformity`` and
``fidelity``: load the model shape, derive the KV budget the way SGLang sizes its pool, mark MLA
models (which restricts the fixed width), and build the executor.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from simulator.config import SimConfig
from traces.errors import SpecschedError

__all__ = ["Prepared", "prepare", "load_trace", "simulate_to", "input_files"]


@dataclass(frozen=True)
class Prepared:
    config: SimConfig         # with engine.mla set from the model
    executor: Any             # backends.protocol.Executor
    kv_capacity_tokens: int
    model: Any                # backends.models.ModelShape
    mem_fraction_static: float | None = None  # what sized the pool; None: a capacity was given


def prepare(config: SimConfig, *, executor: Any = None) -> Prepared:
    """Resolve the model, the KV budget and the executor (``executor`` overrides the config's)."""
    from backends import make_executor
    from backends.models import load_model

    from simulator.sglang import resolve_engine

    model = load_model(config.model.name, tp=config.model.tp or None)
    if model.is_mla != config.engine.mla:
        config = config.replace({"engine.mla": model.is_mla})  # re-checks fixed widths for MLA
    # SGLang sizes its pool from the settings given explicitly (its speculative hook's 48
    # running requests come after the memory hook): the configuration's before resolving
    given = config.engine
    # SGLang's defaults that depend on the GPU and the model, made concrete (summary.json shows them)
    engine = resolve_engine(config.engine, gpu_memory_bytes=_gpu_memory(config.backend.gpu),
                            tp=model.tp)
    if engine != config.engine:
        config = replace(config, engine=engine)
    frac = None
    if not config.engine.kv_capacity_tokens:
        frac = config.engine.mem_fraction or model.sglang_mem_fraction(
            config.backend.gpu, chunked_prefill_size=config.engine.chunked_prefill_size,
            cuda_graph_max_bs=given.cuda_graph_max_bs or None,
            max_running_requests=given.max_running or None)
    capacity = config.engine.kv_capacity_tokens or model.kv_capacity_tokens(
        config.backend.gpu, frac, speculative=config.engine.speculative)
    if not config.engine.speculative and not config.engine.max_running:
        from simulator.sglang import nospec_max_running

        running = nospec_max_running(int(capacity), model.context_len)
        if running is not None:  # else the engine's fallback, with a warning
            config = replace(config, engine=replace(config.engine, max_running=running))
    if executor is None:
        opts: dict[str, Any] = {}
        if config.backend.name == "aiter":
            e = config.engine
            # the live executor keeps its KV in AITER's 16-token blocks whatever the engine's
            # page size (which only governs the pool's accounting)
            opts = {"capture_bs": e.ladder,
                    "capture_widths": config.verify_widths_captured,
                    "check_unsafe": e.policy == "unsafe-derived",
                    "capture": config.backend.capture}
        executor = make_executor(config.backend.name, model=model, gpu=config.backend.gpu,
                                 profile=config.backend.profile or None, **opts)
    return Prepared(config=config, executor=executor, kv_capacity_tokens=int(capacity),
                    mem_fraction_static=frac,
                    model=model)


def _gpu_memory(name: str) -> int | None:
    from backends.hardware import GPUS

    sheet = GPUS.get(name)
    return int(sheet.memory_bytes) if sheet is not None else None


def load_trace(path: str | Path, *, acceptance: str | None = None, seed: int = 0,
               limit: int | None = None):
    """Read and validate a trace for simulation (``acceptance`` fills missing draft lists;
    ``limit`` keeps the first requests only)."""
    from traces import read_trace_arrays

    trace = read_trace_arrays(path, acceptance=acceptance, seed=seed)
    return trace if limit is None else trace.head(limit)


def input_files(config: SimConfig, *paths) -> list[str]:
    """The files a simulation reads: ``paths`` (the trace, a TOML file) and the files the
    configuration names (a profile, a model's config.json).  An output may not replace them."""
    out = [str(p) for p in paths if p]
    if config.backend.profile:
        out.append(str(config.backend.profile))
    if Path(config.model.name).is_file():
        out.append(str(config.model.name))
    return out


def simulate_to(trace, config: SimConfig, out_dir: str | Path | None, *, executor: Any = None,
                progress: Callable[[int, int], None] | None = None, report: bool = False,
                inputs=(), on_executor: Callable[[Any], None] | None = None,
                journal: str | Path | None = None):
    """Run one simulation; with ``out_dir``, stream its results folder into place atomically
    (``report.html`` included when ``report`` is true); without, keep the tables in memory.
    ``out_dir`` may not hold the trace, ``inputs`` or the files the configuration names.
    ``on_executor(executor)`` is called once the executor is built, before the run (``simulate
    --progress`` reads a live executor's wall-time account through it).  ``journal``: a file
    keeping every executor call's result, replayed first when it already holds some
    (:mod:`backends.journal`: a live run finished over several sittings)."""
    if trace.acceptance.get("speculation") is False and config.engine.num_draft_tokens != 1:
        # a trace recorded without speculative decoding: SGLang's no-speculation baseline
        config = config.replace({"engine.num_draft_tokens": 1})
    from traces.context import fit_context

    prep = prepare(config, executor=executor)
    trace, context = fit_context(trace, prep.model.context_len, config.engine.context_overflow)
    files = input_files(config, getattr(trace, "path", None), *inputs)
    if journal is not None:
        prep = _journalled(prep, trace, journal, out_dir, files)
    if on_executor is not None:
        on_executor(prep.executor)
    try:
        return _simulate_prepared(trace, prep, out_dir, context, progress=progress,
                                  report=report, files=files)
    finally:
        if journal is not None:
            prep.executor.close()


def journal_config_digest(config: SimConfig) -> str:
    """The digest of a whole configuration that a journal's first line holds."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True,
                                     default=str).encode()).hexdigest()


def _journalled(prep: Prepared, trace, journal: str | Path, out_dir, inputs) -> Prepared:
    """``prep`` with its executor journalled to ``journal`` (refused inside the results folder,
    which is replaced whole, and on any file the run reads)."""
    from backends.journal import JournalExecutor

    j = Path(journal).resolve()
    if out_dir is not None and (j == Path(out_dir).resolve() or
                                Path(out_dir).resolve() in j.parents):
        raise SpecschedError(f"--journal {journal}: inside the results folder {out_dir}, which a "
                             "run replaces whole; keep the journal beside it")
    if any(j == Path(f).resolve() for f in inputs):
        raise SpecschedError(f"--journal {journal}: a file this run reads")
    header = {"model": prep.model.name, "backend": prep.executor.name,
              "config_sha256": journal_config_digest(prep.config),
              "requests": int(len(trace.arrival_s))}
    return replace(prep, executor=JournalExecutor(prep.executor, j, header))


def _simulate_prepared(trace, prep: Prepared, out_dir, context: dict, *, progress, report: bool,
                       files: list[str]):
    """The run and its results folder, once the executor and the trace are ready (``files``:
    what the run reads, which the folder may not hold)."""
    from simulator import run, run_to

    kw = dict(kv_capacity_tokens=prep.kv_capacity_tokens, progress=progress,
              context_len=prep.model.context_len)
    extra_summary = {"model": prep.model.name, "context": context,
                     "mem_fraction_static": prep.mem_fraction_static}
    if out_dir is None:
        result = run(trace, prep.config, prep.executor, **kw)
        result.summary.update(extra_summary)
        _context_warning(result.summary, context)
        return result
    def with_report(folder: Path) -> None:
        import dataclasses

        from analysis.report import write_report
        from analysis.results import load_run

        # read from the temporary folder, shown as the folder it becomes
        run_ = dataclasses.replace(load_run(folder, name=Path(out_dir).name), path=Path(out_dir))
        write_report([run_], folder / "report.html")

    extra_summary["warnings"] = []
    _context_warning(extra_summary, context)
    return run_to(out_dir, trace, prep.config, prep.executor,
                  extra=with_report if report else None,
                  summary_extra=extra_summary, inputs=files, **kw)


def _context_warning(summary: dict, context: dict) -> None:
    """Say in the summary's warnings what was done to requests longer than the context."""
    if context["dropped"]:
        summary["warnings"].append(f"{context['dropped']} requests longer than the model's "
                                   f"context ({context['context_len']} tokens) were dropped")
    if context["truncated"]:
        summary["warnings"].append(f"{context['truncated']} requests longer than the model's "
                                   f"context ({context['context_len']} tokens) were truncated")
