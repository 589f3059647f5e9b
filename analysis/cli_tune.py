"""``specsched tune-spec``: the best speculation-controller setting for a trace under an SLO."""

from __future__ import annotations

import json
import re
import sys

import click

from analysis.cli_options import _build_config, _check_trace, _config_options, _show_progress
from traces.errors import SpecschedError

__all__ = ["tune_spec_cmd", "parse_thresholds"]


def parse_thresholds(text: str) -> tuple[float | None, float | None]:
    """``ttft=2s,tpot=50ms`` -> (2.0, 0.05); plain numbers are seconds."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = re.fullmatch(r"(ttft|tpot)\s*(?:=|<=)\s*([0-9.eE+-]+)\s*(ms|s)?", part)
        if not m:
            pct = re.fullmatch(r"(ttft|tpot)_(p[0-9.]+|mean|max)\s*<=?\s*(.*)", part)
            if pct:
                raise SpecschedError(
                    f"--slo: '{part}' is a percentile bound, which `specsched plan --slo` takes; "
                    f"tune-spec ranks goodput, the share of requests within per-request "
                    f"thresholds: write {pct.group(1)}={pct.group(3)} and set the share with "
                    f"--attainment")
            if re.fullmatch(r"goodput\s*>=?.*", part):
                raise SpecschedError(f"--slo: '{part}': set the share of good requests with "
                                     f"--attainment (default 0.9), not in --slo")
            raise SpecschedError(f"--slo: expected ttft=SECONDS and/or tpot=SECONDS (e.g. "
                                 f"ttft=2s,tpot=50ms), got '{part}'")
        try:
            v = float(m.group(2)) * (1e-3 if m.group(3) == "ms" else 1.0)
        except ValueError:
            raise SpecschedError(f"--slo: '{m.group(2)}' is not a number") from None
        if not v > 0:
            raise SpecschedError(f"--slo: {m.group(1)} must be > 0")
        out[m.group(1)] = v
    if not out:
        raise SpecschedError("--slo: give ttft and/or tpot thresholds (e.g. ttft=2s,tpot=50ms)")
    return out.get("ttft"), out.get("tpot")


@click.command("tune-spec", context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--trace", "trace_path", required=True, type=click.Path(dir_okay=False),
              help="Trace parquet with draft/accept lists (or --acceptance).")
@_config_options
@click.option("--slo", required=True,
              help="Per-request thresholds of goodput, e.g. ttft=2s,tpot=50ms (not percentiles: "
                   "--attainment sets the share of requests that must meet them).")
@click.option("--rate-scale", type=float, help="Arrival-rate multiplier (default 1).")
@click.option("--max-k", type=int, default=7, show_default=True,
              help="Largest draft count searched.")
@click.option("--jobs", type=int, help="Simulations at once (default: one per CPU).")
@click.option("--ray", "ray_address", metavar="ADDRESS",
              help="Run the simulations on a Ray cluster ('local' starts one here).")
@click.option("--attainment", type=float, default=0.9, show_default=True,
              help="Share of requests within the thresholds that meets the SLO (max rate).")
@click.option("--max-rate/--no-max-rate", default=True, show_default=True,
              help="Also search the highest rate meeting the SLO for the winner and the best "
                   "static k.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="Write the figure (throughput and TPOT against k per batch-size range) "
                   "to this PNG.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object.")
@click.option("--progress/--no-progress", default=None,
              help="Report each simulation on stderr (default: when stderr is a terminal).")
def tune_spec_cmd(trace_path, config_path, backend, model, gpu, profile_path, acceptance, seed,
                  sets, slo, rate_scale, max_k, jobs, ray_address, attainment, max_rate, plot_path,
                  as_json, progress):
    """Search static k, vLLM schedules, thresholds and SGLang adaptive settings for the best
    goodput under an SLO; print the winner as engine flags.

    \b
    Example:
      specsched tune-spec --trace traces/samples/azure_conv_eagle_2k.parquet \\
          --slo ttft=2s,tpot=5ms --plot tune.png
    """
    from analysis.parallel import make_backend
    from analysis.tune_spec import tune_spec

    ttft, tpot = parse_thresholds(slo)
    trace_path = _check_trace(trace_path)
    if plot_path:
        from traces.atomic import check_output_file

        check_output_file(plot_path, inputs=[trace_path], what="--plot")
    config = _build_config(config_path, backend, model, gpu, profile_path, seed, sets,
                           {"rate_scale": rate_scale})
    show = _show_progress(progress)
    with make_backend(jobs=jobs, ray=ray_address) as be:
        res = tune_spec(trace_path, config, ttft_s=ttft, tpot_s=tpot,
                        max_k=max_k, acceptance=acceptance, backend=be, attainment=attainment,
                        max_rate=max_rate,
                        progress=(lambda m: print(m, file=sys.stderr)) if show else None)
    if plot_path:
        from analysis.tune_plot import write_plot

        write_plot(res, plot_path, inputs=[trace_path])
    if as_json:
        click.echo(json.dumps(res, indent=2))
        return
    b = res["best"]
    click.echo(f"best: {b['controller']} (num_draft_tokens {b['num_draft_tokens']}) "
               f"{json.dumps(b['settings'])}")
    click.echo(f"  goodput {res['best_goodput']:.3f} req/s; best static k={res['best_static']['k']}"
               f" {res['best_static']['goodput']:.3f}; no speculation "
               f"{res['no_spec_goodput']:.3f} ({res['simulations']} simulations)")
    if "max_rate" in res:
        for label, m in (("best", res["max_rate"]), ("best static", res["best_static"]["max_rate"])):
            if m["rate_scale"] is None:
                click.echo(f"  highest rate meeting the SLO ({label}): none found ({m['status']}"
                           f"{': ' + m['notes'][-1] if m['notes'] else ''})")
            else:
                click.echo(f"  highest rate meeting the SLO ({label}): x{m['rate_scale']:.4g} = "
                           f"{m['rate_req_s']:.3f} req/s ({m['status']})")
    if res["sglang_args"]:
        click.echo("  SGLang: " + " ".join(res["sglang_args"]))
    if res["sglang_adaptive_config"]:
        click.echo("  adaptive.json: " + json.dumps(res["sglang_adaptive_config"]))
    if res["vllm_speculative_config"]:
        click.echo("  vLLM --speculative-config '" + json.dumps(res["vllm_speculative_config"])
                   + "'")
