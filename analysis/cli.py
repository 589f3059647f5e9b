"""The analysis commands: ``report``, ``plan``, ``uniformity``, ``sweep`` (and ``fidelity``, which
lives in ``analysis.fidelity`` and is loaded only when used).

Each command parses its options, builds library objects and calls one function that a test can
call too; docs/analysis.md documents every option, column and key.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from backends.shipped import shipped_help
from simulator.config import parse_overrides
from simulator.registry import VERIFY_POLICIES
from traces.errors import SpecschedError

__all__ = ["report", "plan", "uniformity", "sweep", "fidelity"]


def __getattr__(name: str):
    # ``fidelity`` belongs to the backends engineer (analysis/fidelity/); load it lazily so a
    # missing or broken GPU stack never breaks the other commands.
    if name == "fidelity":
        from analysis import fidelity as _f

        return _f.fidelity
    raise AttributeError(name)


# ----------------------------------------------------------------------------- shared options
def _config_options(fn):
    """Options that build a simulation configuration (the same as `specsched simulate`'s)."""
    opts = [
        click.option("--config", "config_path", type=click.Path(dir_okay=False),
                     help="TOML configuration (the same file `specsched simulate` takes)."),
        click.option("--backend", type=click.Choice(["profile", "roofline", "aiter"]),
                     help="Executor (default: profile, on the CPU)."),
        click.option("--model", help="Model preset or config.json path (default llama-3.1-8b; "
                                     f"{shipped_help()})."),
        click.option("--gpu", help="GPU of the profile / hardware sheet (default H200)."),
        click.option("--profile", "profile_path", type=click.Path(dir_okay=False),
                     help="Profile parquet for the profile backend."),
        click.option("--acceptance", help="Acceptance model for a trace without draft lists, "
                                          "e.g. geometric:k=4,alpha=0.7."),
        click.option("--seed", type=int, help="Seed of random draws (default 0)."),
        click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                     help="Any configuration key, e.g. --set engine.max_running=64 (repeatable)."),
    ]
    for o in reversed(opts):
        fn = o(fn)
    return fn


def _build_config(config_path, backend, model, gpu, profile_path, seed, sets, extra=None):
    from simulator.config import SimConfig

    overrides = {"backend.name": backend, "model.name": model, "backend.gpu": gpu,
                 "backend.profile": profile_path, "seed": seed}
    overrides.update(extra or {})
    overrides.update(parse_overrides(sets))
    return SimConfig.load(config_path, overrides)


def _check_trace(path: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise SpecschedError("no such trace file", path=path)
    return str(p)


def _show_progress(flag: bool | None) -> bool:
    return sys.stderr.isatty() if flag is None else flag


def _echo_json(obj) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False, default=str))


def _fmt_s(x) -> str:
    if x is None:
        return "-"
    return f"{x * 1e3:.1f} ms" if abs(x) < 1 else f"{x:.3f} s"


def _console():
    """stdout console; wide when stdout is not a terminal (files and pipes get whole rows)."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=140)


def _fmt_count(x) -> str:
    if x is None:
        return "-"
    x = int(x)
    return f"{x / 1e6:.2f}M" if abs(x) >= 1e6 else (f"{x / 1e3:.1f}k" if abs(x) >= 1e4 else str(x))


def _fmt_pct(x, signed=False) -> str:
    if x is None:
        return "-"
    return f"{100 * x:+.1f}%" if signed else f"{100 * x:.1f}%"


# ----------------------------------------------------------------------------- report
@click.command("report")
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path())
@click.option("-o", "--out", "out", default="report.html", show_default=True,
              type=click.Path(dir_okay=False),
              help="The HTML file to write (it may replace an earlier specsched report, never "
                   "another file).")
@click.option("--slo", help="Also check an SLO, e.g. 'ttft_p90<=2s,tpot_p99<=200ms' (sets the "
                            "goodput thresholds too).")
@click.option("--name", "names", multiple=True,
              help="Label of each run, in order (default: the folder names).")
@click.option("--title", default="specsched report", show_default=True, help="Page title.")
@click.option("--baseline", "baseline_dir", type=click.Path(),
              help="A results folder every run is compared against (absolute and % difference "
                   "of each headline metric); added as the first run when not among RUN_DIRS.")
@click.option("--json", "as_json", is_flag=True,
              help="Print every run's metrics as JSON instead of the table.")
def report(run_dirs, out, slo, names, title, baseline_dir, as_json):
    """Summarise results folders as one self-contained HTML report (and a terminal table).

    \b
    Example:
      specsched report runs/pad runs/split -o compare.html --slo 'ttft_p90<=2s,tpot_p99<=200ms'
      specsched report runs/grid -o grid.html     # a sweep folder: all its finished points
      specsched report runs/split runs/bucket --baseline runs/pad -o vs-pad.html

    The HTML file embeds every plot (latency CDFs and over time, KV cache, running and queued
    requests, busy time by pass kind, batch size and width histograms and over time, padding
    waste, rate sweeps, runs side by side): it needs no network to open.
    """
    from analysis.report import print_summary, write_report
    from analysis.report_tables import baseline_differences, misattributed
    from analysis.results import load_run
    from analysis.slo import parse_slo

    parsed = parse_slo(slo, option="--slo") if slo else None
    run_dirs = _expand_sweeps(run_dirs)
    if names and len(names) != len(run_dirs):
        raise SpecschedError(f"--name: give one label per run ({len(run_dirs)}), got "
                             f"{len(names)}")
    base = None
    if baseline_dir is not None:
        resolved = [Path(d).resolve() for d in run_dirs]
        if Path(baseline_dir).resolve() in resolved:
            base = resolved.index(Path(baseline_dir).resolve())
        else:
            run_dirs = [baseline_dir, *run_dirs]
            names = ("baseline", *names) if names else names
            base = 0
    labels = list(names) if names else _labels(run_dirs)
    # the report may go into a run's folder, but never over a file a run is read from
    inputs = [f for d in run_dirs if Path(d).is_dir() for f in Path(d).iterdir() if f.is_file()
              and f.name != "report.html"]
    from traces.atomic import check_output_file

    check_output_file(out, inputs=inputs, kind="html")
    runs = [load_run(d, name=n) for d, n in zip(run_dirs, labels)]
    summaries = write_report(runs, out, slo=parsed, title=title, baseline=base, inputs=inputs)
    if as_json:
        payload = {"report": str(out), "runs": summaries}
        if parsed:
            payload["slo"] = {}
            for r, s in zip(runs, summaries):
                d = parsed.check(r).to_dict()
                if misattributed(s):  # wrong outputs never meet an SLO
                    d["ok"], d["misattributed_rows"] = False, misattributed(s)
                payload["slo"][r.name] = d
        if base is not None:
            payload["baseline"] = {"run": runs[base].name,
                                   "metrics": baseline_differences(summaries, base)}
        _echo_json(payload)
    else:
        from rich.console import Console

        checks = [parsed.check(r) for r in runs] if parsed else None
        print_summary(runs, summaries, checks=checks, console=_console(), baseline=base)
        Console(stderr=True).print(f"report: {out}")


def _expand_sweeps(run_dirs) -> list[str]:
    """A sweep's output folder (manifest.json, no requests.parquet) stands for its finished
    points, in grid order."""
    out = []
    for d in run_dirs:
        p = Path(d)
        man = p / "manifest.json"
        if man.is_file() and not (p / "requests.parquet").exists():
            try:
                doc = json.loads(man.read_text())
                points = [pt["name"] for pt in doc["points"] if pt.get("status") == "done"]
            except (ValueError, KeyError, TypeError):
                raise SpecschedError("not a sweep manifest", path=str(man)) from None
            if not points:
                raise SpecschedError("the sweep has no finished point yet", path=str(p))
            out.extend(str(p / n) for n in points)
        else:
            out.append(str(d))
    return out


def _labels(run_dirs) -> list[str]:
    """Folder names, made unique with their parents where two runs share a name."""
    paths = [Path(d).resolve() for d in run_dirs]
    labels = [p.name for p in paths]
    depth = 1
    while len(set(labels)) != len(labels) and depth < 6:
        depth += 1
        labels = ["/".join(p.parts[-depth:]) for p in paths]
    if len(set(labels)) != len(labels):
        labels = [f"{lab} ({i})" for i, lab in enumerate(labels)]
    return labels


# ----------------------------------------------------------------------------- plan
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
@click.option("--jobs", type=int, help="Simulations at once (default: one per CPU).")
@click.option("--ray", "ray_address", metavar="ADDRESS",
              help="Run the simulations on a Ray cluster ('local' starts one here).")
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


# ----------------------------------------------------------------------------- uniformity
@click.command("uniformity")
@click.option("--trace", "trace_path", required=True, type=click.Path(dir_okay=False),
              help="Trace parquet to replay under every policy.")
@_config_options
@click.option("--policies", default=",".join(VERIFY_POLICIES.names()), show_default=True,
              help="Policies to compare (ragged always runs: it is the reference).")
@click.option("--gpu-batches", type=int, default=6, show_default=True,
              help="With --backend aiter: mixed launches to check on the GPU.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Also keep each policy's results folder under this folder (written as a "
                   "whole; it replaces only a folder specsched wrote).")
@click.option("--jobs", type=int, help="Simulations at once (default: one per CPU).")
@click.option("--ray", "ray_address", metavar="ADDRESS",
              help="Run the simulations on a Ray cluster ('local' starts one here).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--progress/--no-progress", default=None,
              help="Report each finished policy on stderr (default: when stderr is a terminal).")
def uniformity(trace_path, config_path, backend, model, gpu, profile_path, acceptance, seed,
               sets, policies, gpu_batches, out_dir, jobs, ray_address, as_json, progress):
    """How often verify batches mix widths, and what each remedy costs.

    \b
    Examples:
      specsched uniformity --trace traces/samples/azure_conv_eagle_2k.parquet
      specsched uniformity --trace t.parquet --backend aiter --json   # GPU: measured error too

    Every policy replays the same trace; costs are against `ragged` (what a ragged-capable
    kernel would allow).  With --backend aiter the policies are still simulated on the CPU
    profile, and mixed batches of the unsafe-derived run are executed on the GPU to measure
    the output error the derived metadata causes.
    """
    from analysis.uniformity import uniformity as run_uniformity

    trace = _check_trace(trace_path)
    gpu_check = backend == "aiter"
    config = _build_config(config_path, None if gpu_check else backend, model, gpu,
                           profile_path, seed, sets)
    pols = tuple(p.strip() for p in policies.split(",") if p.strip())
    if gpu_check and gpu_batches < 1:
        raise SpecschedError("--gpu-batches: must be >= 1 with --backend aiter")
    from specsched.setup import input_files

    inputs = input_files(config, trace, config_path)
    if out_dir is not None:  # refuse a bad --out before the runs; checked again when written
        from traces.atomic import check_output_dir

        check_output_dir(out_dir, inputs=inputs)
    show = _show_progress(progress)
    say = (lambda m: click.echo(f"  {m}", err=True)) if show else None
    rep = run_uniformity(trace, config=config, acceptance=acceptance, policies=pols, jobs=jobs,
                         ray=ray_address, keep_files=out_dir is not None,
                         gpu_batches=gpu_batches if gpu_check else 0, progress=say)
    files = rep.pop("files", None)
    if out_dir is not None:  # one folder, written as a whole: a results folder per policy
        from analysis.sweep import write_folder
        from traces.atomic import atomic_output_dir

        with atomic_output_dir(out_dir, inputs=inputs) as tmp:
            for p, fs in files.items():
                write_folder(tmp / p, fs)
        rep["results"] = {p: str(Path(out_dir) / p) for p in files}
    if as_json:
        _echo_json(rep)
        return
    _print_uniformity(rep)


def _print_uniformity(rep) -> None:
    from rich import box
    from rich.table import Table

    con = _console()
    m = rep["mixing"]
    con.print(f"trace {rep['trace']}: {rep['requests']} requests ({rep['backend']}, "
              f"{rep['model']})")
    con.print(f"[bold]{_fmt_pct(m['mixed_iter_frac'])} of {m['iterations']} verify iterations "
              f"mixed widths[/bold] (reference run: {rep['reference_policy']}); distinct widths "
              f"per iteration: " + ", ".join(f"{k}: {_fmt_pct(v)}" for k, v in
                                             m["distinct_widths_per_iter_frac"].items()))
    t = Table(title="cost of each policy (Δ: change against ragged)", box=box.SIMPLE_HEAD)
    rows = [("verify launches/iter", "verify_launches_per_iter", lambda x: f"{x:.2f}"),
            ("padding waste", "padding_waste", _fmt_pct),
            ("padded slots", "padded_slots", _fmt_count),
            ("graph pad slots", "graph_pad_slots", _fmt_count),
            ("verify efficiency", "verify_efficiency", _fmt_pct),
            ("acceptance length", "accept_len_mean", lambda x: f"{x:.3f}"),
            ("lost accepted tokens", "lost_accepted_tokens", _fmt_count),
            ("truncated drafts", "truncated_drafts", _fmt_count),
            ("throughput tok/s", "throughput_tok_s", lambda x: f"{x:.0f}"),
            ("Δ throughput", "throughput_change", lambda x: _fmt_pct(x, True)),
            ("TTFT p99", "ttft_p99_s", _fmt_s),
            ("Δ TTFT p99", "ttft_p99_change", lambda x: _fmt_pct(x, True)),
            ("TPOT p50", "tpot_p50_s", _fmt_s),
            ("Δ TPOT p50", "tpot_p50_change", lambda x: _fmt_pct(x, True)),
            ("TPOT p99", "tpot_p99_s", _fmt_s),
            ("Δ TPOT p99", "tpot_p99_change", lambda x: _fmt_pct(x, True)),
            ("iterations mixing", "mixed_iter_frac", _fmt_pct),
            ("violations (rows)", "violations", _fmt_count)]
    t.add_column("", no_wrap=True)
    for row in rep["policies"]:
        t.add_column(row["policy"].replace("unsafe-derived", "unsafe"), justify="right")
    for label, key, f in rows:
        t.add_row(label, *[("-" if r.get(key) is None else f(r[key])) for r in rep["policies"]])
    con.print(t)
    if rep.get("mla"):
        con.print(f"MLA model: {rep['mla']['note']}.")
    u = rep.get("unsafe_derived")
    if u:
        con.print(f"unsafe-derived: {u['misattributed_rows']} of {u['verified_rows']} query rows "
                  f"({_fmt_pct(u['misattributed_row_frac'])}) attributed to the wrong request, in "
                  f"{u['violating_launches']} of {u['verify_launches']} verify launches "
                  f"({_fmt_pct(u['violating_launch_frac'])})")
    g = rep.get("gpu_check")
    if g:
        con.print(f"GPU check ({g['batches_checked']} mixed launches): max |error| "
                  f"{g['max_abs_error']:.3g} (median {g['median_max_abs_error']:.3g}), "
                  f"{_fmt_pct(g['misattributed_frac_mean'])} of rows misattributed on average")


# ----------------------------------------------------------------------------- sweep
@click.command("sweep")
@click.argument("grid_path", metavar="GRID.toml", type=click.Path(dir_okay=False))
@click.option("-o", "--out", "out_dir", type=click.Path(file_okay=False),
              help="Output folder (default: the grid's sweep.out, else runs/<grid name>): new, "
                   "empty, or a sweep folder specsched wrote.")
@click.option("--jobs", type=int, help="Worker processes (default: one per CPU; 1 = inline).")
@click.option("--ray", "ray_address", metavar="ADDRESS",
              help="Run on a Ray cluster at ADDRESS, or 'local' to start one on this machine.")
@click.option("--force", is_flag=True,
              help="Recompute points whose folder holds results of another configuration.")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar on stderr (default: when stderr is a terminal).")
@click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
def sweep(grid_path, out_dir, jobs, ray_address, force, progress, as_json):
    """Run a grid of simulations locally (process pool) or on Ray.

    \b
    Example:
      specsched sweep grid.toml -o runs/grid            # local process pool
      specsched sweep grid.toml -o runs/grid --ray local  # a Ray cluster started here

    Each point's results folder is written atomically under the output folder, named from its
    parameters; manifest.json lists every point and sweep.parquet their headline metrics.
    Interrupted?  Run the same command again: finished points are kept and skipped.  Results
    are identical on the process pool and on Ray.
    """
    from analysis.sweep import load_grid, run_sweep

    grid = load_grid(grid_path)
    out = Path(out_dir) if out_dir else (grid.out or Path("runs") / Path(grid_path).stem)
    outcome = run_sweep(grid, out, jobs=jobs, ray=ray_address, force=force,
                        progress=_show_progress(progress))
    payload = {"out": str(outcome.out), "points": outcome.total, "ran": len(outcome.ran),
               "skipped": len(outcome.skipped), "failed": outcome.failed,
               "interrupted": outcome.interrupted, "backend": outcome.backend}
    if as_json:
        _echo_json(payload)
    else:
        click.echo(f"sweep: {outcome.total} points in {outcome.out}: {len(outcome.ran)} run, "
                   f"{len(outcome.skipped)} already done, {len(outcome.failed)} failed"
                   + (f" ({outcome.backend})" if outcome.backend else ""))
        for name, e in outcome.failed.items():
            click.echo(f"  failed {name}: {e}", err=True)
    if outcome.interrupted:
        click.echo(f"interrupted: {len(outcome.ran) + len(outcome.skipped)} of {outcome.total} "
                   f"points are done and kept; run the same command again to resume", err=True)
        sys.exit(130)
    if outcome.failed:
        raise SpecschedError(f"{len(outcome.failed)} of {outcome.total} points failed (see "
                             f"{outcome.out / 'manifest.json'})")
