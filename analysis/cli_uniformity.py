"""``specsched uniformity``: how often verify batches mix widths, and what each remedy costs."""

from __future__ import annotations

from pathlib import Path

import click

from analysis.cli_options import (_build_config, _check_trace, _config_options, _console,
                                  _echo_json, _fmt_count, _fmt_pct, _fmt_s, _parallel_options,
                                  _show_progress)
from simulator.registry import VERIFY_POLICIES
from traces.errors import SpecschedError

__all__ = ["uniformity"]


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
@_parallel_options
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
