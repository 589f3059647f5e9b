"""The ``specsched fidelity`` command (registered through ``analysis.cli``, loaded lazily)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from analysis.fidelity.offset import OFFSET_PCT
from analysis.fidelity.render import render_markdown
from backends.shipped import shipped_help
from analysis.fidelity.run import run_fidelity
from traces.errors import SpecschedError

__all__ = ["fidelity"]


@click.command("fidelity")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False),
              help="Trace parquet to replay (e.g. a sample under traces/samples/); with "
                   "--reference-run, default: the trace that run recorded.")
@click.option("--model",
              help=f"Model preset or config.json path ({shipped_help()}); with --reference-run, "
                   "default: the run's model.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Folder for reference/, profile/, fidelity.json and fidelity.md "
                   "(default runs/fidelity__<trace>__<model>).")
@click.option("--reference", default="aiter", show_default=True,
              type=click.Choice(["aiter", "roofline"]),
              help="Backend the profile is judged against (aiter = live GPU replay).")
@click.option("--gpu", default=None, help="GPU name (default: the config's, H200).")
@click.option("--profile", "profile", default=None, type=click.Path(dir_okay=False),
              help="Profile parquet (default: the shipped one for the model and GPU).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="Simulation config TOML (same as simulate --config).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Any configuration key, e.g. --set engine.policy=split (repeatable).")
@click.option("--worst", default=20, show_default=True, type=int, help="Worst steps to list.")
@click.option("--limit", type=int, help="Only the first N requests of the trace (with "
              "--reference-run, default: as many as the recorded run replayed).")
@click.option("--reference-run", "reference_run", type=click.Path(file_okay=False),
              help="Results folder of a recorded reference run (e.g. `simulate --backend aiter "
                   "--out DIR` on a GPU machine) to compare against instead of running it again; "
                   "the profile side runs under the configuration and over the requests it "
                   "recorded.")
@click.option("--repeat-run", "repeat_runs", multiple=True, type=click.Path(file_okay=False),
              help="Results folder of another recorded reference run of the same trace and "
                   "configuration (repeatable): the report shows how far the reference runs "
                   "differ from each other, the floor under each figure and check.")
@click.option("--jitter-runs", "jitter_runs", default=8, show_default=True,
              type=click.IntRange(min=0),
              help="Re-run the profile side this many times with each pass x exp(sigma z), sigma "
                   "the profile's own measured spread (seeded by the config's seed): the jitter "
                   "floor beside each whole-run figure. 0 turns it off.")
@click.option("--offset-pct", "offset_pct", default=OFFSET_PCT, show_default=True,
              type=click.FloatRange(min=0, max=100, max_open=True),
              help="Re-run the profile side with every pass this many percent faster and slower: "
                   "each whole-run check's value at both, and whether either changes its verdict "
                   "(an offset between machines). 0 turns it off.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def fidelity(trace_path, model, out_dir, reference, gpu, profile, config_path, sets, worst, limit,
             reference_run, repeat_runs, jitter_runs, offset_pct, as_json):
    """Compare the profile backend with live GPU replay on one trace.

    \b
    Examples:
      specsched fidelity --trace traces/samples/azure_conv_eagle_2k.parquet \\
          --model llama-3.1-8b --out runs/fidelity            # on a GPU machine
      specsched fidelity --reference-run runs/live_conv --out runs/fid  # any CPU: a recorded run

    Runs the trace with the live aiter executor and with the profile executor, predicts every
    live step with the profile at the same shape (MAPE overall, off the grid and by axis, by
    kind and shape, worst cases; the profile's held-out points when it has some), compares
    TTFT/TPOT/E2E percentiles and throughput, lists what the profile does not capture, and
    checks the targets (step MAPE <= 3% overall, off the grid, per kind and in the worst shape
    band; TTFT/TPOT p50/p90/p99, E2E p50/p99 and throughput within 3%). Each whole-run check
    also shows its value with every profile pass --offset-pct faster and slower, and whether
    that would change its verdict.
    """
    from simulator.config import parse_overrides

    overrides: dict[str, Any] = parse_overrides(sets)
    if reference_run is not None and (trace_path is None or model is None):
        from analysis.fidelity.runs import recorded_inputs

        trace_path, model = recorded_inputs(reference_run, trace_path, model)
    missing = [o for o, v in (("--trace", trace_path), ("--model", model)) if v is None]
    if missing:
        raise SpecschedError(f"{' and '.join(missing)}: required unless --reference-run gives "
                             "them (a recorded run's summary.json names its trace and model)")
    if out_dir is None:
        out_dir = Path("runs") / f"fidelity__{Path(trace_path).stem}__{Path(model).stem}"
    report = run_fidelity(trace_path, model, out_dir=out_dir, reference=reference, gpu=gpu,
                          profile=profile, config_path=config_path, overrides=overrides,
                          worst=worst, limit=limit, reference_run=reference_run,
                          repeat_runs=tuple(repeat_runs), jitter_runs=jitter_runs,
                          offset_pct=offset_pct)
    if as_json:
        click.echo(json.dumps(report, indent=2, sort_keys=True, default=str))
    else:
        click.echo(render_markdown(report, reference=reference), nl=False)
        click.echo(f"\nwritten: {out_dir}/fidelity.json, fidelity.md, "
                   f"{'' if reference_run else 'reference/, '}profile/")
