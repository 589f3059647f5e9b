"""Where simulations run: this process, a local process pool, or a Ray cluster.

Every backend takes :class:`analysis.runner.RunSpec` jobs and yields ``(key, files)`` as they
finish, ``files`` being a results folder as ``{name: bytes}`` (or the exception the job raised).
Because the driver gets bytes and writes the folders itself, results are the same whichever
backend produced them.

- :class:`PoolBackend`: ``concurrent.futures.ProcessPoolExecutor`` with the ``forkserver``
  start method where available (workers fork from a clean server that has already imported the
  engine, so they start fast and inherit no threads), ``spawn`` elsewhere.
- :class:`RayBackend`: ``ray.init(address)`` for an existing cluster, or ``"local"`` to start one
  on this machine; the trace file's bytes travel through Ray's object store, so nodes need
  specsched installed but not the driver's files.
- :class:`InlineBackend`: in this process, one job at a time (``--jobs 1``; tests, debugging).
"""

from __future__ import annotations

import multiprocessing as mp
import os
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, Hashable, Iterable, Iterator

from analysis.runner import RunSpec, file_digest, simulate_files
from traces.errors import SpecschedError

__all__ = ["Backend", "InlineBackend", "PoolBackend", "RayBackend", "make_backend",
           "default_jobs"]


def default_jobs() -> int:
    """CPUs this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


class Backend:
    """Runs jobs; :meth:`run` yields ``(key, result or exception)`` in completion order.

    ``fn(spec, *extra, trace_bytes=None)`` is what each job runs (default: simulate_files); it
    must be a module-level function so that it pickles.
    """

    name = "backend"
    jobs = 1

    def run(self, jobs: Iterable[tuple[Hashable, RunSpec]], fn=simulate_files,
            extra: tuple = ()) -> Iterator[tuple[Hashable, Any]]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def describe(self) -> str:
        return f"{self.name} ({self.jobs} worker{'s' if self.jobs != 1 else ''})"


class InlineBackend(Backend):
    name = "inline"

    def run(self, jobs, fn=simulate_files, extra=()):
        for key, spec in jobs:
            try:
                yield key, fn(spec, *extra)
            except Exception as exc:  # noqa: BLE001 - reported per job by the caller
                yield key, exc


def _warm() -> None:
    """Import the engine in a worker before its first job (numba loads its cache)."""
    import simulator  # noqa: F401


class PoolBackend(Backend):
    name = "process pool"

    def __init__(self, jobs: int | None = None):
        self.jobs = jobs or default_jobs()
        methods = mp.get_all_start_methods()
        method = "forkserver" if "forkserver" in methods else "spawn"
        ctx = mp.get_context(method)
        if method == "forkserver":
            ctx.set_forkserver_preload(["simulator", "specsched.setup", "analysis.runner", "traces"])
        self._pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=ctx, initializer=_warm)

    def run(self, jobs, fn=simulate_files, extra=()):
        futures: dict[Future, Hashable] = {}
        for key, spec in jobs:
            futures[self._pool.submit(fn, spec, *extra)] = key
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in sorted(done, key=lambda f: str(futures[f])):
                exc = f.exception()
                yield futures[f], exc if exc is not None else f.result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def abort(self) -> None:
        """Stop now: cancel queued jobs and end the workers (after an interrupt)."""
        procs = list((getattr(self._pool, "_processes", None) or {}).values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:
            try:
                p.terminate()
            except Exception:  # noqa: BLE001 - already gone
                pass


def _ray_task(fn, spec: RunSpec, trace_bytes: bytes, *extra):
    return fn(spec, *extra, trace_bytes=trace_bytes)


class RayBackend(Backend):
    name = "ray"

    def __init__(self, address: str, jobs: int | None = None):
        try:
            import ray
        except ImportError:
            raise SpecschedError("--ray needs Ray: pip install 'specsched[ray]' (or "
                                 "'ray[default]')") from None
        self._ray = ray
        self._started = False
        kwargs: dict[str, Any] = {"log_to_driver": False, "include_dashboard": False}
        if address == "local":
            self.jobs = jobs or default_jobs()
            kwargs["num_cpus"] = self.jobs
            # a modest object store: results come back as bytes and are released at once
            kwargs["object_store_memory"] = 1 << 30
            self._started = True
            self.address = "local"
        else:
            kwargs["address"] = address
            self.address = address
        try:
            ray.init(**kwargs)
        except Exception as exc:  # ConnectionError, RuntimeError, ValueError: the address is bad
            raise SpecschedError(f"--ray {address}: cannot connect ({type(exc).__name__}: "
                                 f"{exc})") from None
        if address != "local":
            self.jobs = int(ray.cluster_resources().get("CPU", 1))
        self._task = ray.remote(num_cpus=1, max_retries=1)(_ray_task)
        self._trace_refs: dict[str, Any] = {}

    def _trace_ref(self, spec: RunSpec):
        digest = spec.trace_digest or file_digest(spec.trace)
        if digest not in self._trace_refs:
            self._trace_refs[digest] = self._ray.put(Path(spec.trace).read_bytes())
        return digest, self._trace_refs[digest]

    def run(self, jobs, fn=simulate_files, extra=()):
        import dataclasses

        ray = self._ray
        refs: dict[Any, Hashable] = {}
        for key, spec in jobs:
            digest, tref = self._trace_ref(spec)
            spec = dataclasses.replace(spec, trace_digest=digest)
            refs[self._task.remote(fn, spec, tref, *extra)] = key
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for r in done:
                try:
                    yield refs[r], ray.get(r)
                except ray.exceptions.RayTaskError as exc:
                    cause = exc.as_instanceof_cause() if hasattr(exc, "as_instanceof_cause") else exc
                    yield refs[r], cause
                except Exception as exc:  # noqa: BLE001 - worker died etc.
                    yield refs[r], exc

    def describe(self) -> str:
        return f"ray {self.address} ({self.jobs} CPUs)"

    def close(self) -> None:
        self._trace_refs.clear()
        self._ray.shutdown()

    def abort(self) -> None:
        self.close()


def make_backend(*, jobs: int | None = None, ray: str | None = None) -> Backend:
    """``ray`` (an address or "local") -> RayBackend; ``jobs == 1`` -> inline; else a pool."""
    if ray:
        return RayBackend(ray, jobs)
    if jobs is not None and jobs < 1:
        raise SpecschedError(f"--jobs: must be >= 1 (got {jobs})")
    if jobs == 1:
        return InlineBackend()
    return PoolBackend(jobs)
