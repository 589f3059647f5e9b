"""Running simulations for plan, sweep and uniformity: one spec in, result tables out.

A :class:`RunSpec` is everything a simulation depends on (trace path, resolved configuration,
acceptance model for traces without draft lists); it is small and picklable, so it travels to
process-pool workers and Ray tasks.  Each worker process caches the traces it has read and the
executors it has built, so a search or a sweep pays for them once per process.

:func:`simulate_files` returns the results folder's files as bytes, so the *driver* writes every
folder (atomically), whether the simulation ran in this process, a local pool, or a Ray node
without access to the driver's disk.  Results are identical whichever ran them: a simulation is a
deterministic function of the spec.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["RunSpec", "load_trace", "cached_executor", "simulate", "simulate_files", "simulate_summary", "shipped_trace",
           "file_digest",
           "RESULT_FILES"]

RESULT_FILES = ("requests.parquet", "steps.parquet", "request_steps.parquet", "summary.json")


@dataclass(frozen=True)
class RunSpec:
    """One simulation: a trace file, a resolved SimConfig, and the acceptance model to fill draft
    lists with when the trace has none (None: the trace must carry them)."""

    trace: str
    config: Any                     # simulator.config.SimConfig (frozen, picklable)
    acceptance: str | None = None
    trace_digest: str = ""          # sha256 of the trace file: lets Ray workers cache by content


_TRACES: dict[tuple, Any] = {}
_EXECUTORS: dict[tuple, Any] = {}
_SHIPPED: dict[str, str] = {}       # trace digest -> local path (Ray workers)


def file_digest(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_trace(path: str, acceptance: str | None = None, seed: int = 0):
    """``traces.read_trace_arrays``, cached per process (keyed by path, size and mtime)."""
    from traces import read_trace_arrays

    st = os.stat(path)
    key = (os.path.abspath(path), st.st_size, st.st_mtime_ns, acceptance, seed)
    if key not in _TRACES:
        if len(_TRACES) > 4:
            _TRACES.clear()
        _TRACES[key] = read_trace_arrays(path, acceptance=acceptance, seed=seed)
    return _TRACES[key]


def cached_executor(config) -> Any | None:
    """The executor ``config`` asks for, built once per process for the CPU backends (the live
    GPU executor is left to :func:`specsched.setup.prepare`, which builds it per policy)."""
    b, m = config.backend, config.model
    if b.name not in ("profile", "roofline"):
        return None
    key = (b.name, b.gpu, b.profile, m.name, m.tp)
    if key not in _EXECUTORS:
        from specsched.setup import prepare

        _EXECUTORS[key] = prepare(config).executor
    return _EXECUTORS[key]


def simulate(spec: RunSpec, *, local_trace: str | None = None):
    """Run one simulation exactly as ``specsched simulate`` does; returns a ``SimResult``.
    ``local_trace``: where this process finds the trace's bytes when ``spec.trace`` is another
    machine's path."""
    import dataclasses

    from specsched.setup import simulate_to

    trace = load_trace(local_trace or spec.trace, spec.acceptance, spec.config.seed)
    if local_trace is not None:
        trace = dataclasses.replace(trace, path=spec.trace)
    return simulate_to(trace, spec.config, None, executor=cached_executor(spec.config))


def shipped_trace(spec: RunSpec, trace_bytes: bytes | None) -> str | None:
    """Where this process keeps a trace that arrived as bytes (written once per process)."""
    if trace_bytes is None:
        return None
    local = _SHIPPED.get(spec.trace_digest)
    if local is None or not os.path.exists(local):
        fd, local = tempfile.mkstemp(prefix="specsched-trace-", suffix=".parquet")
        with os.fdopen(fd, "wb") as fh:
            fh.write(trace_bytes)
        _SHIPPED[spec.trace_digest] = local
    return local


def simulate_files(spec: RunSpec, trace_bytes: bytes | None = None) -> dict[str, bytes]:
    """Run one simulation and return its results folder as ``{file name: bytes}``.

    ``trace_bytes``: the trace file's content, for workers that cannot read ``spec.trace`` (Ray
    nodes); it is written once per worker to a temporary file and reused.
    """
    import simulator

    result = simulate(spec, local_trace=shipped_trace(spec, trace_bytes))
    with tempfile.TemporaryDirectory(prefix="specsched-point-") as tmp:
        out = Path(tmp) / "run"
        simulator.write_results(result, out)
        return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


def simulate_summary(spec: RunSpec, keep_files: bool = False, *,
                     trace_bytes: bytes | None = None) -> dict[str, Any]:
    """Run one simulation and return ``analysis.metrics.summarize`` of it (small), the engine's
    own summary, and, when ``keep_files``, the results folder as bytes."""
    import simulator

    from analysis.metrics import summarize
    from analysis.results import from_tables

    result = simulate(spec, local_trace=shipped_trace(spec, trace_bytes))
    run = from_tables("run", result.requests, result.steps, result.request_steps, result.summary)
    out: dict[str, Any] = {"summary": summarize(run), "engine": dict(result.summary),
                           "files": None}
    if keep_files:
        with tempfile.TemporaryDirectory(prefix="specsched-point-") as tmp:
            folder = Path(tmp) / "run"
            simulator.write_results(result, folder)
            out["files"] = {p.name: p.read_bytes() for p in sorted(folder.iterdir())
                            if p.is_file()}
    return out
