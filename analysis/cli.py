"""The analysis commands ``report`` and ``sweep`` (``plan``, ``uniformity`` and ``fidelity`` have
modules of their own: ``analysis.cli_plan``, ``analysis.cli_uniformity``, ``analysis.fidelity``).

Each command parses its options, builds library objects and calls one function that a test can
call too; docs/analysis.md documents every option, column and key.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from analysis.cli_options import _console, _echo_json, _show_progress
from traces.errors import SpecschedError

__all__ = ["report", "sweep", "fidelity"]


def __getattr__(name: str):
    # ``fidelity`` belongs to the backends engineer (analysis/fidelity/); load it lazily so a
    # missing or broken GPU stack never breaks the other commands.
    if name == "fidelity":
        from analysis import fidelity as _f

        return _f.fidelity
    raise AttributeError(name)


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
