"""``specsched plan``: the highest arrival rate one replica sustains under an SLO."""

from __future__ import annotations

import click

from analysis.cli_options import (_build_config, _check_trace, _config_options, _console,
                                  _echo_json, _fmt_pct, _fmt_s, _parallel_options, _show_progress)
from traces.errors import SpecschedError

__all__ = ["plan"]


@click.command("plan")
@click.option("--trace", "trace_path", required=True, type=click.Path(dir_okay=False),
              help="Trace parquet whose arrivals are scaled.")
@click.option("--slo", required=True,
              help="SLO to meet, e.g. 'ttft_p90<=2s,tpot_p99<=200ms,goodput>=0.9'.")
@_config_options
@click.option("--policy", help="Verify policy of the replica (default: the configuration's).")
@click.option("--target-rate", type=float,
              help="Also size a cluster for this many requests/s (checked by simulation).")
@click.option("--search", "search", multiple=True, metavar="KEY=V1,V2",
              help="Search over configurations too: policy, max_draft, ladder, max_running or "
                   "any configuration key (repeatable; ';' separates axes in one option).")
@click.option("--tolerance", type=float, default=0.02, show_default=True,
              help="Relative precision of the rate (the answer is within it of the boundary).")
@_parallel_options
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--progress/--no-progress", default=None,
              help="Show each simulation on stderr (default: when stderr is a terminal).")
def plan(trace_path, slo, config_path, backend, model, gpu, profile_path, acceptance, seed,
         sets, policy, target_rate, search, tolerance, jobs, ray_address, as_json, progress):
    """Find the highest arrival rate one replica sustains under an SLO.

    \b
    Examples:
      specsched plan --trace traces/samples/azure_conv_eagle_2k.parquet \\
          --slo 'ttft_p90<=2s,tpot_p99<=200ms'
      specsched plan --trace prod.parquet --slo 'ttft_p99<=1s' --target-rate 120 --json
      specsched plan --trace prod.parquet --slo 'ttft_p90<=2s' \\
          --search policy=pad,split,bucket --search max_draft=3,5

    The trace's arrivals are scaled (the requests are unchanged); the answer was simulated and
    met the SLO, and 10% more did not.  Same trace, configuration and seed: same answer.
    """
    from analysis.grid import parse_axis
    from analysis.plan import plan as run_plan
    from analysis.slo import parse_slo

    parsed = parse_slo(slo, option="--slo")
    trace = _check_trace(trace_path)
    config = _build_config(config_path, backend, model, gpu, profile_path, seed, sets,
                           {"engine.policy": policy})
    axes = [parse_axis(part.strip(), "--search") for opt in search for part in opt.split(";")
            if part.strip()]
    if tolerance is None or not 0 < tolerance < 0.1:
        raise SpecschedError(f"--tolerance: must be in (0, 0.1) (got {tolerance})")
    show = _show_progress(progress)
    say = (lambda m: click.echo(f"  {m}", err=True)) if show else None
    result = run_plan(trace, parsed, config=config, acceptance=acceptance, search_axes=axes,
                      target_rate=target_rate, jobs=jobs, ray=ray_address, tolerance=tolerance,
                      progress=say)
    d = result.to_dict()
    best = result.best
    if best is not None:
        d["reproduce"] = _reproduce(trace, config_path, backend, model, gpu, profile_path,
                                    acceptance, seed, sets, policy, best.params,
                                    best.search.answer)
    if as_json:
        _echo_json(d)
        return
    _print_plan(result, d)


def _reproduce(trace, config_path, backend, model, gpu, profile_path, acceptance, seed, sets,
               policy, params, scale) -> str:
    """The `specsched simulate` command that replays the answer."""
    import shlex

    from analysis.grid import resolve_overrides

    args = ["specsched", "simulate", "--trace", str(trace)]
    for flag, v in (("--config", config_path), ("--backend", backend), ("--model", model),
                    ("--gpu", gpu), ("--profile", profile_path), ("--acceptance", acceptance),
                    ("--seed", seed), ("--policy", policy)):
        if v is not None:
            args += [flag, str(v)]
    for item in sets:
        args += ["--set", item]
    for k, v in resolve_overrides(params, "--search").items():
        v = ",".join(map(str, v)) if isinstance(v, (list, tuple)) else v
        args += ["--set", f"{k}={v}"]
    args += ["--rate-scale", repr(float(scale))]
    return shlex.join(args)


def _print_plan(result, d) -> None:
    from rich.table import Table

    con = _console()
    con.print(f"trace {d['trace']}: {d['requests']} requests, recorded rate "
              f"{d['recorded_rate_req_s']:.3f} req/s")
    con.print(f"SLO {d['slo']}")
    best = result.best
    if len(result.plans) > 1:
        t = Table(title="configurations, best first")
        keys = list(result.plans[0].params)
        for k in keys:
            t.add_column(k)
        t.add_column("max rate (req/s)", justify="right")
        t.add_column("x recorded", justify="right")
        t.add_column("sims", justify="right")
        t.add_column("status")
        for p in result.ranked():
            t.add_row(*[str(p.params[k]) for k in keys],
                      "-" if p.rate is None else f"{p.rate:.3f}",
                      "-" if p.search.answer is None else f"{p.search.answer:.4g}",
                      str(len(p.search.probes)), p.search.status or "")
        con.print(t)
    if best is None:
        con.print("[red]no rate meets the SLO[/red]")
        for n in d["notes"]:
            con.print(f"  {n}")
        return
    c = d["best"]["checked"]
    atleast = "at least " if best.search.status != "ok" else ""
    con.print(f"[bold]max rate: {atleast}{best.rate:.3f} req/s[/bold] ({best.search.answer:.4g}x the "
              f"recorded rate){' with ' + ', '.join(f'{k}={v}' for k, v in best.params.items()) if best.params else ''}")
    at = c["at"]["check"]
    if c["above"] is not None:
        con.print(f"  checked: meets the SLO at {c['at']['rate_req_s']:.3f} req/s (margin "
                  f"{_fmt_pct(at['margin'])}); misses it at {c['above']['rate_req_s']:.3f} "
                  f"req/s (+{100 * (result.margin - 1):.0f}%)")
    else:
        con.print(f"  [yellow]{best.search.status}: meets the SLO at "
                  f"{c['at']['rate_req_s']:.3f} req/s, the highest rate tried; no rate above "
                  f"it was found to miss it[/yellow]")

    for term in at["terms"]:
        con.print(f"    {term['term']}: {term['value']:.4g}" if term["term"].startswith("goodput")
                  else f"    {term['term']}: {_fmt_s(term['value'])}")
    if d.get("reproduce"):
        con.print(f"  reproduce: {d['reproduce']}", soft_wrap=True)
    if d.get("margin_over_runner_up") is not None:
        con.print(f"  margin over the runner-up: {_fmt_pct(d['margin_over_runner_up'])}")
    sims = sum(len(p.search.probes) for p in result.plans)
    if best.search.status == "ok":
        con.print(f"  precision: within {100 * result.tolerance:.0f}% below the boundary; "
                  f"{sims} simulations")
    else:
        con.print(f"  {sims} simulations")
    r = d.get("replicas")
    if r:
        if r.get("replicas") is None:
            con.print(f"[red]replicas for {r['target_rate_req_s']:g} req/s: none found "
                      f"({r.get('reason', 'the SLO was missed up to the limit')})[/red]")
        else:
            con.print(f"[bold]replicas for {r['target_rate_req_s']:g} req/s: {r['replicas']}"
                      f"[/bold] (estimate {r['estimate']}, checked by simulating them behind the "
                      f"{r['router']} router)")
    for n in d["notes"]:
        con.print(f"  note: {n}")
