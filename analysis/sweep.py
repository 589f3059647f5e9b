"""``specsched sweep GRID.toml``: the product of configuration axes, one results folder per point.

GRID.toml (paths are relative to the grid file)::

    [sweep]
    trace = "traces/samples/azure_conv_eagle_2k.parquet"   # required
    config = "base.toml"       # optional: a simulate configuration file to start from
    acceptance = ""            # optional: acceptance model for traces without draft lists
    out = "runs/my-sweep"      # optional: default output folder (-o overrides)

    [base]                     # optional: configuration every point shares (same layout as a
    seed = 0                   # simulate configuration file)
    [base.engine]
    max_running = 128

    [axes]                     # the product of these lists; keys are configuration keys
    policy = ["pad", "split", "bucket", "ragged"]          # or shorthands: see analysis.grid
    "engine.max_draft" = [3, 5]
    rate_scale = [1.0, 2.0]

Output folder::

    OUT/manifest.json          the grid, and every point: name, parameters, fingerprint, status
    OUT/sweep.parquet          one row per finished point: parameters and headline metrics
    OUT/<point name>/          a results folder (requests/steps/request_steps.parquet,
                               summary.json) plus point.json (parameters, resolved config,
                               fingerprint)

Every point folder is written atomically, so a folder that exists is complete.  Running the same
command again after an interruption skips the points whose folder exists with the same
fingerprint (a hash of the resolved configuration and the trace's bytes) and runs the rest.
Results do not depend on where the points ran (process pool or Ray) or in what order.
"""

from __future__ import annotations

import json
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa
import pyarrow.parquet as pq

from analysis.grid import Axis, Point, expand, resolve_overrides
from analysis.runner import RESULT_FILES, RunSpec, file_digest
from traces.atomic import atomic_output_dir, atomic_output_file
from traces.errors import SpecschedError

__all__ = ["SweepGrid", "load_grid", "run_sweep", "SweepOutcome", "HEADLINE", "write_folder"]

_SWEEP_KEYS = {"trace", "config", "acceptance", "out"}


@dataclass(frozen=True)
class SweepGrid:
    path: Path
    trace: Path
    config_path: Path | None
    acceptance: str | None
    out: Path | None
    base: dict[str, Any]
    axes: tuple[Axis, ...]
    points: tuple[Point, ...]
    configs: tuple[Any, ...]        # resolved SimConfig per point
    trace_sha256: str

    def spec(self, i: int) -> RunSpec:
        return RunSpec(str(self.trace), self.configs[i], self.acceptance, self.trace_sha256)

    def fingerprint(self, i: int) -> str:
        import hashlib

        blob = json.dumps({"config": self.configs[i].to_dict(), "trace_sha256": self.trace_sha256,
                           "acceptance": self.acceptance}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()


def _flatten(d: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def load_grid(path: str | Path) -> SweepGrid:
    """Read and check a GRID.toml: every point's configuration is built (and checked) up front."""
    from simulator.config import SimConfig

    path = Path(path)
    where = str(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SpecschedError("no such grid file", path=where) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SpecschedError(f"not valid TOML: {exc}", path=where) from None
    unknown = set(data) - {"sweep", "base", "axes"}
    if unknown:
        raise SpecschedError(f"unknown section '{sorted(unknown)[0]}' (sections: [sweep], "
                             f"[base], [axes])", path=where)
    sw = data.get("sweep", {})
    if not isinstance(sw, dict):
        raise SpecschedError("[sweep] must be a table", path=where)
    bad = set(sw) - _SWEEP_KEYS
    if bad:
        raise SpecschedError(f"unknown key 'sweep.{sorted(bad)[0]}' (known: "
                             f"{', '.join(sorted(_SWEEP_KEYS))})", path=where)
    if not sw.get("trace"):
        raise SpecschedError("sweep.trace is required (the trace every point replays)", path=where)
    root = path.parent

    def rel(p: str) -> Path:
        q = Path(p)
        return q if q.is_absolute() else root / q

    trace = rel(str(sw["trace"]))
    if not trace.is_file():
        raise SpecschedError(f"sweep.trace: no such file {trace}", path=where)
    config_path = rel(str(sw["config"])) if sw.get("config") else None
    base = data.get("base", {})
    if not isinstance(base, dict):
        raise SpecschedError("[base] must be a table", path=where)
    axes_raw = data.get("axes", {})
    if not isinstance(axes_raw, dict):
        raise SpecschedError("[axes] must be a table", path=where)
    axes = []
    for key, values in axes_raw.items():
        if isinstance(values, dict):
            raise SpecschedError(f"axes.{key}: write dotted keys in quotes (\"engine.policy\" = "
                                 f"[...]) rather than sub-tables", path=where)
        if not isinstance(values, list) or not values:
            raise SpecschedError(f"axes.{key}: must be a non-empty list of values", path=where)
        axes.append(Axis(key, tuple(tuple(v) if isinstance(v, list) else v for v in values)))
    try:
        points = expand(axes)
    except SpecschedError as exc:
        raise SpecschedError(f"[axes]: {exc.message}", path=where) from None
    try:
        base_cfg = SimConfig.load(config_path, _flatten(base))
    except SpecschedError as exc:
        raise SpecschedError(f"[base]: {exc}", path=where) from None
    configs = []
    for p in points:
        try:
            configs.append(base_cfg.replace(resolve_overrides(p.params)))
        except SpecschedError as exc:
            raise SpecschedError(f"[axes] point {p.name}: {exc}", path=where) from None
    acceptance = sw.get("acceptance") or None
    out = rel(str(sw["out"])) if sw.get("out") else None
    return SweepGrid(path, trace, config_path, acceptance, out, base, tuple(axes), tuple(points),
                     tuple(configs), file_digest(trace))


#: Headline columns of sweep.parquet: (column, path into analysis.metrics.summarize()).
HEADLINE: list[tuple[str, tuple[str, ...]]] = [
    ("requests", ("requests",)),
    ("finished", ("finished",)),
    ("duration_s", ("duration_s",)),
    ("throughput_tok_s", ("throughput_tok_s",)),
    ("throughput_req_s", ("throughput_req_s",)),
    ("ttft_p50_s", ("ttft_s", "p50")), ("ttft_p90_s", ("ttft_s", "p90")),
    ("ttft_p99_s", ("ttft_s", "p99")),
    ("tpot_p50_s", ("tpot_s", "p50")), ("tpot_p90_s", ("tpot_s", "p90")),
    ("tpot_p99_s", ("tpot_s", "p99")),
    ("itl_p50_s", ("itl_s", "p50")), ("itl_p99_s", ("itl_s", "p99")),
    ("e2e_p50_s", ("e2e_s", "p50")), ("e2e_p99_s", ("e2e_s", "p99")),
    ("queue_p99_s", ("queue_s", "p99")),
    ("goodput_frac", ("goodput", "fraction")),
    ("accept_len_mean", ("verify", "accept_len_mean")),
    ("verify_efficiency", ("verify", "verify_efficiency")),
    ("padding_waste", ("verify", "padding_waste")),
    ("verify_launches_per_iter", ("iterations", "verify_launches_per_iter")),
    ("mixed_iter_frac", ("iterations", "mixed_iter_frac")),
    ("violations", ("verify", "violations")),
    ("retractions", ("retractions",)),
    ("truncated_drafts", ("truncated_drafts",)),
]


def _dig(d, path):
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


@dataclass
class SweepOutcome:
    out: Path
    total: int
    ran: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    interrupted: bool = False
    backend: str = ""


def _tables_from_files(files: dict[str, bytes]):
    from analysis.results import from_tables

    def read(name):
        return pq.read_table(pa.BufferReader(files[name])) if name in files else None

    summary = json.loads(files["summary.json"]) if "summary.json" in files else {}
    return from_tables("point", read("requests.parquet"), read("steps.parquet"),
                       read("request_steps.parquet"), summary)


def _point_complete(folder: Path, fingerprint: str) -> bool | None:
    """True: complete with this fingerprint; False: a folder of something else; None: absent."""
    if not folder.exists():
        return None
    pj = folder / "point.json"
    try:
        meta = json.loads(pj.read_text())
    except (OSError, ValueError):
        return False
    return meta.get("fingerprint") == fingerprint and all(
        (folder / f).is_file() for f in ("requests.parquet", "steps.parquet", "summary.json"))


def _write_manifest(out: Path, grid: SweepGrid, status: dict[str, str],
                    errors: dict[str, str]) -> None:
    doc = {
        "specsched_sweep": 1,
        "grid": grid.path.name,
        "trace": str(grid.trace),
        "trace_sha256": grid.trace_sha256,
        "acceptance": grid.acceptance,
        "axes": {a.key: [list(v) if isinstance(v, tuple) else v for v in a.values]
                 for a in grid.axes},
        "points": [{"name": p.name, "params": {k: (list(v) if isinstance(v, tuple) else v)
                                               for k, v in p.params},
                    "fingerprint": grid.fingerprint(p.index), "status": status[p.name],
                    "error": errors.get(p.name)} for p in grid.points],
    }
    with atomic_output_file(out / "manifest.json") as tmp:
        tmp.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n")
        _readable(tmp)


def _readable(path: Path) -> None:
    from analysis.report import readable

    readable(path)


def _write_table(out: Path, grid: SweepGrid, metrics: dict[str, dict]) -> None:
    rows = [p for p in grid.points if p.name in metrics]
    cols: dict[str, Any] = {"point": pa.array([p.name for p in rows], pa.string())}
    for a in grid.axes:
        vals = [dict(p.params)[a.key] for p in rows]
        vals = [json.dumps(list(v)) if isinstance(v, tuple) else v for v in vals]
        try:
            cols[a.key] = pa.array(vals)
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            cols[a.key] = pa.array([str(v) for v in vals], pa.string())
    for name, path in HEADLINE:
        vals = [_dig(metrics[p.name], path) for p in rows]
        is_int = name in ("requests", "finished", "violations", "retractions", "truncated_drafts")
        cols[name] = pa.array(vals, pa.int64() if is_int else pa.float64())
    with atomic_output_file(out / "sweep.parquet") as tmp:
        pq.write_table(pa.table(cols), tmp, compression="zstd")
        _readable(tmp)


def run_sweep(grid: SweepGrid, out: str | Path, *, jobs: int | None = None,
              ray: str | None = None, force: bool = False, progress: bool = False,
              on_point: Callable[[str, int, int], None] | None = None,
              backend=None) -> SweepOutcome:
    """Run every point not already complete in ``out``; see the module docstring.

    ``on_point(name, done, total)`` is called after each point is written (tests use it to
    interrupt).  ``backend``: a ready :mod:`analysis.parallel` backend (else one is made from
    ``jobs`` / ``ray``).  KeyboardInterrupt stops the sweep with the finished points kept.
    """
    from analysis.metrics import summarize
    from analysis.parallel import make_backend

    out = Path(out)
    _claim(out, grid)
    outcome = SweepOutcome(out, len(grid.points))
    status: dict[str, str] = {}
    errors: dict[str, str] = {}
    metrics: dict[str, dict] = {}
    todo = []
    for p in grid.points:
        folder = out / p.name
        for stray in out.glob(f".{p.name}.tmp-*"):  # left by a killed run
            shutil.rmtree(stray, ignore_errors=True)
        state = _point_complete(folder, grid.fingerprint(p.index))
        if state is True:
            status[p.name] = "done"
            outcome.skipped.append(p.name)
        elif state is False and not force:
            raise SpecschedError("holds results of a different configuration or trace (the "
                                 "grid changed?); pass --force to recompute it, or use another "
                                 "output folder", path=str(folder))
        else:
            status[p.name] = "pending"
            todo.append(p)
    for name in outcome.skipped:  # metrics of reused points, for sweep.parquet
        from analysis.results import load_run

        metrics[name] = summarize(load_run(out / name))
    _write_manifest(out, grid, status, errors)
    if not todo:
        _write_table(out, grid, metrics)
        return outcome

    prog = None
    if progress:
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                                   TimeElapsedColumn, TimeRemainingColumn)

        prog = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.description}"),
                        console=Console(stderr=True), transient=False)
        task = prog.add_task("", total=len(grid.points), completed=len(outcome.skipped))
        prog.start()
    owned = backend is None
    if backend is None and not ray and any(grid.configs[p.index].backend.name == "aiter"
                                           for p in todo):
        jobs = 1  # the live GPU executor: one simulation at a time, timings undisturbed
    backend = backend or make_backend(jobs=jobs, ray=ray)
    outcome.backend = backend.describe()
    by_name = {p.name: p for p in todo}
    try:
        for name, res in backend.run([(p.name, grid.spec(p.index)) for p in todo]):
            p = by_name[name]
            if isinstance(res, BaseException):
                status[name] = "failed"  # the simulation's own message (a bug: with its type)
                errors[name] = (str(res) if isinstance(res, SpecschedError)
                                else f"{type(res).__name__}: {res}")
                outcome.failed[name] = errors[name]
            else:
                _write_point(out / name, grid, p, res)
                metrics[name] = summarize(_tables_from_files(res))
                status[name] = "done"
                outcome.ran.append(name)
            _write_manifest(out, grid, status, errors)
            if prog is not None:
                prog.update(task, advance=1, description=name)
            if on_point is not None:
                on_point(name, len(outcome.ran) + len(outcome.skipped), len(grid.points))
    except KeyboardInterrupt:
        outcome.interrupted = True
        if hasattr(backend, "abort"):
            backend.abort()
            owned = False
        for p in todo:  # a folder may have been completed just as the interrupt came
            if status[p.name] == "pending" and _point_complete(out / p.name,
                                                               grid.fingerprint(p.index)):
                status[p.name] = "done"
                outcome.ran.append(p.name)
    finally:
        if prog is not None:
            prog.stop()
        if owned:
            backend.close()
        _write_manifest(out, grid, status, errors)
        _write_table(out, grid, metrics)
    return outcome


def _claim(out: Path, grid: SweepGrid) -> None:
    """Create (or reuse) the sweep's folder: empty, or a sweep folder specsched wrote; never the
    current folder, a folder holding an input, or one holding anything else."""
    from specsched.setup import input_files
    from traces.atomic import MARKER, check_output_dir, claim_output_dir

    inputs = {f for c in grid.configs for f in input_files(c, grid.path, grid.trace,
                                                           grid.config_path)}
    if out.is_dir() and any(out.iterdir()):
        def read(name):
            try:
                doc = json.loads((out / name).read_text())
            except (OSError, ValueError):
                return {}
            return doc if isinstance(doc, dict) else {}

        if not ("specsched_sweep" in read("manifest.json")
                or str(read(MARKER).get("command") or "").endswith("sweep")):
            check_output_dir(out, inputs=sorted(inputs))  # names what is foreign, if anything
            raise SpecschedError(f"{out} is a results folder of another command, not a sweep's: "
                                 f"choose another --out")
    claim_output_dir(out, inputs=sorted(inputs), command="specsched sweep")


def write_folder(folder: Path, files: dict[str, bytes], extra: dict[str, str] | None = None) -> None:
    """Write a results folder from ``{name: bytes}`` (plus ``extra`` text files), atomically."""
    with atomic_output_dir(folder) as tmp:
        for name in RESULT_FILES:
            if name in files:
                (tmp / name).write_bytes(files[name])
                _readable(tmp / name)
        for name, text in (extra or {}).items():
            (tmp / name).write_text(text)
            _readable(tmp / name)
        _readable(tmp)


def _write_point(folder: Path, grid: SweepGrid, p: Point, files: dict[str, bytes]) -> None:
    meta = {"name": p.name, "params": {k: (list(v) if isinstance(v, tuple) else v)
                                       for k, v in p.params},
            "fingerprint": grid.fingerprint(p.index), "trace": str(grid.trace),
            "trace_sha256": grid.trace_sha256, "acceptance": grid.acceptance,
            "config": grid.configs[p.index].to_dict()}
    write_folder(folder, files, {"point.json": json.dumps(meta, indent=2) + "\n"})
