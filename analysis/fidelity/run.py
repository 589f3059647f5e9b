"""Running a fidelity comparison: the reference and profile runs, the report, the files.

:func:`run_fidelity` is what ``specsched fidelity`` calls: it builds the configurations (from a
recorded reference run's own summary.json when there is one, ``analysis.fidelity.runs``), runs or
reads the reference, runs the profile side, assembles the report
(``analysis.fidelity.report``) and writes ``fidelity.json`` and ``fidelity.md``
(``analysis.fidelity.render``) atomically.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from analysis.fidelity.fragile import fragile_checks
from analysis.fidelity.jitter import apply_jitter, jitter_floors
from analysis.fidelity.offset import apply_offset, offset_checks
from analysis.fidelity.paired import paired_with_repeats
from analysis.fidelity.render import render_markdown
from analysis.fidelity.report import TARGETS, build_report, debiased_table
from analysis.fidelity.runs import (config_for_recorded, load_recorded, read_reference_run,
                                    recorded_limit)
from analysis.fidelity.stats import compare_runs
from traces.errors import SpecschedError

__all__ = ["run_fidelity"]


def _jsonable(x):
    return json.loads(json.dumps(x, default=str))


def run_fidelity(trace_path: str | Path, model: str, *, out_dir: str | Path | None = None,
                 reference: str = "aiter", gpu: str | None = None, profile: str | None = None,
                 config_path: str | None = None, overrides: dict[str, Any] | None = None,
                 worst: int = 20, progress=None, limit: int | None = None,
                 reference_run: str | Path | None = None,
                 repeat_runs: tuple = (), jitter_runs: int = 0,
                 offset_pct: float = 0.0) -> dict[str, Any]:
    """Run ``trace_path`` with the ``reference`` backend and with ``profile``; compare them.

    ``reference_run``: a results folder of an earlier run of the same trace with the reference
    backend (e.g. a live ``simulate --backend aiter`` recorded on a GPU machine); it is read
    instead of running the reference again, and the profile side is simulated under the
    configuration that run recorded (seed, rate scale, engine, cluster, model; keys renamed or
    added since are mapped, ``analysis.fidelity.runs``) and, without ``limit``, over the first
    requests of the trace as many as it ran (``recorded_limit``).  ``config_path`` and ``overrides`` may
    only restate it: a setting that contradicts the recording is refused, naming the key, as is
    another trace, request count (``limit``) or model.

    ``repeat_runs``: results folders of further recorded reference runs of the same trace and
    configuration (checked the same way); the report shows how far each differs from the
    reference and the floor that puts under every figure (``build_report``).

    ``jitter_runs``: how many times to re-run the profile side with per-pass noise of the
    profile's own measured spread, for the jitter floor beside each whole-run figure
    (``analysis.fidelity.jitter``; ``specsched fidelity`` asks for 8); 0 leaves it out.

    ``offset_pct``: re-run the profile side with every pass that much faster and slower, for
    each whole-run check's value at both and whether either changes its verdict
    (``analysis.fidelity.offset``; ``specsched fidelity`` asks for 1%); 0 leaves it out.

    With ``out_dir``: writes ``<out>/reference/`` (unless ``reference_run``) and ``<out>/profile/``
    (results folders), ``fidelity.json`` and ``fidelity.md``, atomically.  Returns the report dict.
    """
    from backends.latency_table import TableExecutor
    from backends.profile import ProfileExecutor
    from simulator.config import SimConfig
    from specsched.setup import input_files, load_trace, prepare, simulate_to
    from traces.atomic import atomic_output_dir

    if jitter_runs < 0:
        raise SpecschedError(f"--jitter-runs must be 0 or more, not {jitter_runs}")
    if not 0 <= offset_pct < 100:
        raise SpecschedError(f"--offset-pct must be at least 0 and under 100, not {offset_pct}")
    if reference == "profile":
        raise SpecschedError("--reference must be another backend than profile (aiter, roofline)")
    ov = dict(overrides or {})
    ov["model.name"] = model
    if gpu:
        ov["backend.gpu"] = gpu
    if profile:
        ov["backend.profile"] = str(profile)
    config_notes: list[str] = []
    if reference_run is None:
        base = SimConfig.load(config_path, ov)
    else:
        summary, _ = load_recorded(reference_run)
        base, config_notes = config_for_recorded(summary, reference_run, config_path, ov)
    if reference_run is not None:
        from backends.calibrate_from_run import check_not_source

        if base.backend.profile:
            check_not_source(base.backend.profile, reference_run)
    ref_cfg = base.replace({"backend.name": reference, "backend.profile": ""})
    prof_cfg = base.replace({"backend.name": "profile"})
    if reference_run is not None and limit is None:
        limit = recorded_limit(summary, reference_run)
        if limit is not None:
            config_notes.append(f"the first {limit} requests of the trace, as the recorded run "
                                f"(its summary's trace notes)")
    trace = load_trace(trace_path, seed=base.seed, limit=limit)
    prof_prep = prepare(prof_cfg)
    if not isinstance(prof_prep.executor, ProfileExecutor):
        raise SpecschedError("the profile backend did not yield a profile executor")
    table = prof_prep.executor.latency_table()
    recorded = (None if reference_run is None
                else read_reference_run(reference_run, trace_path, len(trace), ref_cfg, reference))
    repeats = [(str(r), *read_reference_run(r, trace_path, len(trace), ref_cfg, reference))
               for r in repeat_runs]

    def go(folder: Path | None):
        import pyarrow.parquet as pq

        if recorded is None:
            ref = simulate_to(trace, ref_cfg, folder / "reference" if folder else None,
                              progress=progress)
            ref_summary, steps = ref.summary, ref.steps
            if steps is None:  # the engine streamed the steps into the results folder
                steps = pq.read_table(folder / "reference" / "steps.parquet")
        else:
            ref_summary, steps = recorded
        mod = simulate_to(trace, prof_cfg, folder / "profile" if folder else None,
                          executor=prof_prep.executor)
        report = build_report(steps, ref_summary, mod.summary, table, worst=worst, repeats=repeats)
        report["profile"]["validation"] = prof_prep.executor.describe().get("validation")
        ref_requests = (ref.requests if recorded is None
                        else pq.read_table(Path(reference_run) / "requests.parquet"))
        report["fragile"] = fragile_checks(report["checks"], ref_requests, mod.requests,
                                           TARGETS["whole_run_pct"])
        report["paired"] = paired_with_repeats(
            ref_requests, mod.requests,
            [pq.read_table(Path(r) / "requests.parquet") for r in repeat_runs],
            TARGETS["whole_run_pct"])
        def run_profile(ex):  # the profile side again, through another executor
            return simulate_to(trace, prof_cfg, None, executor=ex).summary

        if jitter_runs > 0:
            apply_jitter(report, jitter_floors(run_profile, prof_prep.executor, table,
                                               mod.summary, runs=jitter_runs, seed=prof_cfg.seed))
        if offset_pct > 0:
            apply_offset(report, offset_checks(run_profile, prof_prep.executor, ref_summary,
                                               pct=offset_pct))
        # what-if: the same profile without its mean per-kind bias -- how much of the whole-run
        # difference is per-step bias, and how much queueing, transients and shape mix
        dtable, factors = debiased_table(table, report["steps"]["by_kind"])
        deb = simulate_to(trace, prof_cfg, None, executor=TableExecutor("profile", dtable))
        report["runs_debiased"] = {"factors": factors, **compare_runs(ref_summary, deb.summary)}
        report["reference"] = {"backend": reference, "describe": _jsonable(ref_summary.get("backend")),
                               "recorded_run": None if reference_run is None else str(reference_run),
                               "config_notes": config_notes,
                               "detail": _jsonable(ref_summary.get("backend_detail"))}
        report["config"] = _jsonable(mod.summary.get("config"))
        report["trace"] = str(trace_path)
        report["requests"] = len(trace)
        report["model"] = model
        if folder:
            (folder / "fidelity.json").write_text(json.dumps(report, indent=2, sort_keys=True,
                                                             default=str) + "\n")
            (folder / "fidelity.md").write_text(render_markdown(report, reference=reference))
        return report

    if out_dir is None:
        return go(None)
    inputs = input_files(base, trace_path, config_path, reference_run, *repeat_runs)
    with atomic_output_dir(out_dir, inputs=inputs) as tmp:
        return go(Path(tmp))
