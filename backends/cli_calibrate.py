"""The ``calibrate`` command (registered in ``specsched/cli.py``): fit a profile to this GPU."""

from __future__ import annotations

import json
import math
import sys

import click

from backends.calibrate_residual import RESIDUAL_FORMS
from backends.cli import _executor_opts, _with_progress, executor_setup_options, same_file
from traces.errors import SpecschedError

__all__ = ["calibrate"]


@click.command("calibrate")
@click.option("--model", required=True, help="Preset name (e.g. llama-3.1-8b) or a config.json path.")
@click.option("--tp", type=int, default=None, help="Tensor-parallel degree (default: the preset's).")
@click.option("--base", type=click.Path(dir_okay=False), default=None, metavar="PROFILE.parquet",
              help="The profile to calibrate (default: the one shipped for MODEL on --gpu).")
@click.option("-o", "--out", required=True, type=click.Path(dir_okay=False),
              help="Calibrated profile to write (a new file, never the base).")
@click.option("--budget-s", type=float, default=120.0, show_default=True,
              help="Wall-clock budget of the whole command: anchors that would pass it are "
                   "skipped and the fit uses what was measured.")
@click.option("--anchors", type=int, default=None, metavar="N",
              help="Base grid points to re-measure (default 24; at least 2 per pass group).")
@click.option("--heldout", type=int, default=0, show_default=True, metavar="N",
              help="Also measure N held-out shapes off the grid here (split=heldout).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the held-out shapes.")
@click.option("--reps", type=int, default=5, show_default=True, help="Timed repetitions per graph anchor.")
@click.option("--warmup", type=int, default=2, show_default=True, help="Untimed runs before them.")
@click.option("--eager-reps", type=int, default=5, show_default=True,
              help="Timed repetitions per eager and prefill anchor.")
@executor_setup_options
@click.option("--gpu", "gpu_sheet", default="H200", show_default=True,
              help="GPU name of the shipped base profile, and the sheet for the modelled "
                   "tensor-parallel all-reduce.")
@click.option("--extend-logits", type=click.Choice(["last", "all"]), default="last", show_default=True,
              help="Draft-extend logits, as for `specsched profile`.")
@click.option("--progress", is_flag=True, help="Show progress on stderr even when it is not a terminal.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False), default=None,
              help="Choose the anchors where this workload spends its time: the trace is "
                   "simulated on the base profile (its first --limit requests, under --config "
                   "and --set as simulate runs it) and the grid rows nearest its passes, by "
                   "time, are measured (backends.calibrate_workload).")
@click.option("--limit", type=int, default=None, help="With --trace: its first N requests.")
@click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
              help="With --trace: the simulation config TOML.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="With --trace: any configuration key, e.g. --set engine.policy=bucket.")
@click.option("--prefill", "prefill", type=click.Choice(["auto", "scale", "keep"]), default="auto",
              show_default=True,
              help="Prefill rows: scale them by their anchors' factor, keep the base's, or auto: "
                   "keep on a MoE model calibrated on a GPU of its base's model (there the "
                   "anchors did not predict live prefills), scale otherwise. The factor is "
                   "recorded either way.")
@click.option("--prior", "prior", type=click.Choice(["fitted", "roofline", "none"]),
              default="fitted", show_default=True,
              help="On another GPU model than the base's (both with a sheet, e.g. an H100 "
                   "calibrating an H200 profile): fitted fits each group against the "
                   "roofline's ratio between the two sheets per shape, its attention part "
                   "raised to the power (0 to 1) under which the anchors agree best, or 0 "
                   "(attention at the base's time) when the anchors do not resolve one; "
                   "roofline takes that power as 1; none fits one scale per group "
                   "(docs/aiter.md, \"On another GPU model\": per step, fitted beat roofline "
                   "on sixteen of seventeen H100 pairings recorded after it was fixed). On the "
                   "base's own GPU model all are the same.")
@click.option("--anchors-from", type=click.Path(dir_okay=False), default=None,
              metavar="CALIBRATED.parquet",
              help="Measure nothing: re-fit the anchors an earlier calibrate measured (kept in "
                   "that file's metadata) to --base, e.g. after the shipped profile was "
                   "re-recorded under the same timing protocol. Needs no GPU.")
@click.option("--residual", "residual", type=click.Choice(list(RESIDUAL_FORMS)),
              default="group", show_default=True,
              help="group fits one factor per pass group; tokens also scales each row by "
                   "its group's anchor residual at its token count, interpolated between the "
                   "anchors' counts (backends.calibrate_residual), when measuring or with "
                   "--anchors-from; prefill does that for the prefill group alone, "
                   "verify-prefill for the verify groups and prefill. Opt-in, "
                   "for long prompts: on H100s under the H200 profiles tokens met 14-15 of 16 "
                   "checks on V2-Lite's long context where group met 6, on three GPUs' runs "
                   "recorded after it was written, but fewer on its conversation runs and on "
                   "H200s; prefill and verify-prefill, written after those, kept the gain "
                   "in sample without the draft group's losses, and on the runs recorded "
                   "after them gained checks too (verify-prefill 0.56 points worse per "
                   "step on the 70B); every form's prefill line halved V2-Lite's prefill "
                   "error but made the 8B's prefill steps worse on every run, so keep group "
                   "on the 8B (docs/aiter.md, \"Residual by token count\", "
                   "benchmarks/residual_forms_scoreboard.py).")
@click.option("--from-run", "from_run", type=click.Path(file_okay=False), default=None,
              metavar="RUN_DIR",
              help="Measure nothing: re-centre --base on a live run recorded on a GPU of its "
                   "model (a results folder of simulate --backend aiter), scaling each pass "
                   "group's rows until its summed time over the run's passes is the live one. Opt-in "
                   "(it needs a recorded run): on H100s under the H200 profiles it corrected the "
                   "offset the anchor fit left, per step better on all 11 runs recorded after "
                   "it was written; on the profile's own GPU model it gained nothing "
                   "(docs/aiter.md, \"Re-centring on a live run\"). Give --base the "
                   "calibration of that GPU model. Needs no GPU.")
def calibrate(model, tp, base, out, budget_s, anchors, heldout, seed, reps, warmup, eager_reps,
              settle_s, page_size, max_context, kv_pool_gib, gpu_sheet, extend_logits, progress,
              trace_path, limit, config_path, sets, prefill, prior, anchors_from, residual,
              from_run):
    """Fit a recorded profile to this machine's GPU from a few re-measured shapes.

    \b
    Examples:
      specsched calibrate --model llama-3.1-8b -o 8b_here.parquet
      specsched calibrate --model llama-3.1-8b --base my8b.parquet --anchors 32 --heldout 16 \\
          --budget-s 180 -o my8b_here.parquet
      specsched calibrate --model llama-3.1-8b --anchors-from 8b_here.parquet -o 8b_here_new.parquet
      specsched calibrate --model deepseek-v2-lite --residual tokens -o v2_here_by_tokens.parquet
      specsched calibrate --model llama-3.1-8b --anchors-from 8b_here.parquet --residual tokens \\
          -o 8b_here_by_tokens.parquet
      specsched calibrate --model llama-3.1-8b --trace prod.parquet --limit 200 \\
          --set engine.policy=bucket -o 8b_for_prod.parquet
      specsched calibrate --model llama-3.1-8b --base 8b_here.parquet --from-run live_run/ \\
          -o 8b_here_recentred.parquet

    Re-measures --anchors of the base profile's own grid points (spread over verify, draft and
    draft-extend, graph and eager, and prefill; few captured graphs, several KV lengths each)
    with the profile's protocol, fits one factor per pass group (the median of measured / base)
    and writes the base's grid rows scaled by it to -o, with the anchors and the fit in the
    metadata (specsched.calibration).  On a MoE model on a GPU of its base's model the prefill
    rows stay the base's unless --prefill scale says otherwise (the factor is recorded).  The
    base's held-out rows are not carried over.  Only a scale per group is fitted: a
    shape-dependent difference between the machines stays (docs/aiter.md, "specsched
    calibrate"), except the one between two GPU models' sheets, which --prior fitted (the
    default) takes from the roofline, and, with --residual tokens (or prefill, or
    verify-prefill, for those groups alone), what the anchors of a group say at each token
    count beyond its factor.  Needs a CUDA or ROCm GPU (exit 2 without one), except
    with --from-run (re-centres --base on a recorded live run) and with
    --anchors-from, which re-fits an earlier calibration's measured anchors to --base
    (those not among the base's grid rows are left out and listed in the metadata).  With --trace
    the anchors are the grid rows a simulated run of that workload spends most time nearest,
    shared over the pass groups by that time (docs/aiter.md, "specsched calibrate").
    """
    import time

    t_start = time.perf_counter()
    from backends.aiter import bridge
    from backends.aiter.profiling import ProfileSpec
    from backends.calibrate import DEFAULT_ANCHORS
    from backends.models import load_model

    n = DEFAULT_ANCHORS if anchors is None else anchors
    if residual != "group" and from_run is not None:
        raise SpecschedError(f"--residual {residual} shapes a fit of anchors; --from-run fits "
                             "no anchors: drop one of them")
    if from_run is not None:
        from pathlib import Path

        from backends.calibrate_from_run import recentre

        if anchors is not None or heldout or trace_path or anchors_from:
            raise SpecschedError("--from-run measures nothing: drop --anchors, --heldout, "
                                 "--trace and --anchors-from")
        if Path(from_run).resolve() in Path(out).resolve().parents:
            raise SpecschedError(f"-o {out} is inside the --from-run folder {from_run}: write the "
                                 "re-centred profile elsewhere and leave the recorded run as it is")
        base = _check_calibrate(model, tp, base, out, budget_s, n, heldout, gpu_sheet,
                                extra_inputs=(str(Path(from_run) / "steps.parquet"),))
        click.echo(json.dumps(recentre(load_model(model, tp=tp), base, from_run, out)))
        return
    base = _check_calibrate(model, tp, base, out, budget_s, n, heldout, gpu_sheet, anchors_from,
                            extra_inputs=tuple(p for p in (trace_path, config_path) if p))
    workload = _workload(model, tp, base, trace_path, limit, config_path, sets)
    if anchors_from is not None:
        from backends.calibrate_refit import refit_calibration

        if anchors is not None or heldout or trace_path:
            raise SpecschedError("--anchors-from measures nothing: drop --anchors, --heldout "
                                 "and --trace")
        click.echo(json.dumps(refit_calibration(load_model(model, tp=tp), anchors_from, base, out,
                                                prefill=prefill, prior=prior,
                                                residual=residual)))
        return
    spec = ProfileSpec(reps=reps, warmup=warmup, eager_reps=eager_reps, settle_s=settle_s)
    spec.check()
    bridge.require_gpu()
    shape = load_model(model, tp=tp)
    from backends.aiter.calibrate_sweep import run_calibrate

    opts = _executor_opts(gpu_sheet, page_size, extend_logits, max_context, kv_pool_gib)
    cmd = "specsched calibrate " + " ".join(sys.argv[2:]) if len(sys.argv) > 2 else "specsched calibrate"
    summary = _with_progress(progress, lambda prog, log: run_calibrate(
        shape, out, base, spec, anchors=n, heldout=heldout, seed=seed, budget_s=budget_s,
        t_start=t_start, executor_opts=opts, command=cmd, progress=prog, log=log,
        workload=workload, prefill=prefill, prior=prior, residual=residual))
    click.echo(json.dumps(summary))


def _workload(model, tp, base, trace_path, limit, config_path, sets):
    """``grid -> (weights, info)`` for ``--trace`` (the trace and configuration read and
    validated here, once, before the GPU is touched), or None without it."""
    if trace_path is None:
        if limit is not None or config_path or sets:
            raise SpecschedError("--limit, --config and --set choose the workload of --trace: "
                                 "give --trace too")
        return None
    from pathlib import Path

    from backends.calibrate_workload import workload_config, workload_weights
    from simulator.config import parse_overrides
    from specsched.setup import load_trace

    if limit is not None and limit < 1:
        raise SpecschedError(f"--limit must be >= 1, got {limit}")
    cfg = workload_config(model, tp, base, config_path=config_path,
                          overrides=parse_overrides(sets))
    trace = load_trace(trace_path, seed=cfg.seed, limit=limit)  # a bad trace fails now

    def weigh(grid):
        return workload_weights(trace, cfg, grid, trace_name=Path(trace_path).name)
    return weigh


def _check_calibrate(model, tp, base, out, budget_s, anchors, heldout, gpu_sheet,
                     anchors_from=None, extra_inputs: tuple = ()) -> str:
    """Refuse a ``calibrate`` call that cannot do what it says, before the GPU is touched (the
    base is read, validated and checked against the model here); returns the base's path."""
    from pathlib import Path

    from backends.models import load_model
    from backends.profile import _check_model, read_profile
    from backends.shipped import default_profile
    from traces.atomic import check_output_file

    if not math.isfinite(budget_s) or budget_s <= 0:
        raise SpecschedError(f"--budget-s must be a finite number > 0, got {budget_s:g}")
    if anchors < 1:
        raise SpecschedError(f"--anchors must be >= 1, got {anchors}")
    if heldout < 0:
        raise SpecschedError(f"--heldout must be >= 0, got {heldout}")
    shape = load_model(model, tp=tp)
    if base is None:
        base = str(default_profile(shape.name, gpu_sheet))
    if same_file(out, base):
        raise SpecschedError(f"-o {out} is the base profile {base}: calibrate writes the "
                             "calibrated profile to a new file and never overwrites the base")
    if anchors_from is not None and same_file(out, anchors_from):
        raise SpecschedError(f"-o {out} is the --anchors-from file: write the re-fitted profile "
                             "to a new file")
    _, meta = read_profile(base)
    _check_model(shape, meta.get("model"), str(base))
    inputs = ((model,) if Path(model).is_file() else ()) + (base,) + (
        (anchors_from,) if anchors_from is not None else ()) + tuple(extra_inputs)
    check_output_file(out, inputs=inputs, kind="parquet")
    return base
