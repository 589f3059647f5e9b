"""``specsched simulate`` (also installed as ``simulate``): replay a trace through the engine."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from backends.shipped import shipped_help
from simulator.config import CONTROLLER_NAMES, POLICIES, ROUTERS, SimConfig, parse_overrides
from specsched import __version__

__all__ = ["simulate"]


@click.command("simulate", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specsched")
@click.option("--trace", "trace_path", required=True, type=click.Path(dir_okay=False),
              help="Trace parquet (see `specsched trace --help` to make one).")
@click.option("--config", "config_path", type=click.Path(dir_okay=False),
              help="TOML configuration (docs/simulator.md lists every key).")
@click.option("--backend", type=click.Choice(["profile", "roofline", "aiter"]),
              help="Executor: profile (default; CPU, calibrated on an H200), roofline (CPU), "
                   "aiter (live on this machine's GPU).")
@click.option("--policy", type=click.Choice(POLICIES),
              help="Verify policy (default fixed: every request at num_draft_tokens, as SGLang).")
@click.option("--controller", type=click.Choice(CONTROLLER_NAMES),
              help="Speculation controller choosing each round's draft count (default static: "
                   "num_draft_tokens every round, as SGLang); settings under [controller].")
@click.option("--model", help="Model preset or config.json path (default llama-3.1-8b; "
                               f"{shipped_help()}).")
@click.option("--tp", type=int, help="Tensor-parallel degree (default: the preset's).")
@click.option("--gpu", help="GPU of the profile / hardware sheet (default H200).")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False),
              help="Profile parquet for the profile backend (default: the shipped one).")
@click.option("--replicas", type=int, help="Number of replicas (default 1).")
@click.option("--router", type=click.Choice(ROUTERS), help="Router across replicas.")
@click.option("--rate-scale", type=float, help="Arrival-rate multiplier (2 = twice as fast).")
@click.option("--seed", type=int, help="Seed of random draws (default 0).")
@click.option("--acceptance", help="Acceptance model for a trace without draft lists, e.g. "
                                   "geometric:k=4,alpha=0.7 (see docs/traces.md).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Any configuration key, e.g. --set engine.max_running=64 (repeatable).")
@click.option("--limit", type=int, help="Simulate only the first N requests of the trace.")
@click.option("--context-overflow", type=click.Choice(["refuse", "drop", "truncate"]),
              help="Requests longer than the model's context: refuse the trace (default, as "
                   "SGLang refuses them), drop them, or truncate them (SGLang's "
                   "--allow-auto-truncate).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Results folder (default runs/<trace>__<policy>__<backend>). An existing "
                   "folder is replaced, atomically, only if it is empty or a results folder "
                   "specsched wrote.")
@click.option("--journal", "journal", type=click.Path(dir_okay=False), metavar="FILE",
              help="Keep every executor call's result in FILE as the run goes. Run again with "
                   "the same FILE, trace and configuration, the calls it holds are replayed "
                   "and the run goes on from where it stopped: a live run longer than one "
                   "sitting (docs/simulator.md, Journals).")
@click.option("--report/--no-report", default=True, show_default=True,
              help="Write report.html with plots into the results folder.")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar on stderr (default: when stderr is a terminal).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON instead of a table.")
def simulate(trace_path, config_path, backend, policy, controller, model, tp, gpu, profile_path, replicas,
             router, rate_scale, seed, acceptance, sets, limit, context_overflow, out_dir, journal,
             report, progress, as_json):
    """Replay a trace through the engine and write a results folder.

    \b
    Example:
      simulate --trace traces/samples/azure_conv_eagle_2k.parquet --policy split --out runs/split

    The folder holds requests.parquet, steps.parquet, request_steps.parquet, summary.json and
    report.html; a summary table is printed at the end.
    """
    import json

    from specsched.setup import input_files, load_trace, simulate_to
    from traces.atomic import check_output_dir

    overrides = {"backend.name": backend, "engine.policy": policy,
                 "engine.controller": controller, "model.name": model,
                 "model.tp": tp, "backend.gpu": gpu, "backend.profile": profile_path,
                 "cluster.replicas": replicas, "cluster.router": router,
                 "rate_scale": rate_scale, "seed": seed,
                 "engine.context_overflow": context_overflow}
    overrides.update(parse_overrides(sets))
    config = SimConfig.load(config_path, overrides)
    if out_dir is None:
        out_dir = (Path("runs") / f"{Path(trace_path).stem}__{config.engine.policy}__"
                   f"{config.backend.name}")
    # refuse a bad --out before the (possibly long) run; checked again when the folder is written
    check_output_dir(out_dir, inputs=input_files(config, trace_path, config_path))
    trace = load_trace(trace_path, acceptance=acceptance, seed=config.seed, limit=limit)
    show = sys.stderr.isatty() if progress is None else progress
    bar = _ProgressBar(len(trace)) if show else None
    try:
        result = simulate_to(trace, config, out_dir, progress=bar.update if bar else None,
                             report=report, inputs=[config_path],
                             on_executor=bar.watch if bar else None, journal=journal)
    finally:
        if bar:
            bar.close()
    if as_json:
        click.echo(json.dumps({k: v for k, v in result.summary.items() if k != "config"},
                              indent=2, default=str))
    else:
        print_summary(result.summary, out_dir)


class _ProgressBar:
    """A rich progress bar on a terminal; elsewhere (a log file), a line every ``every_s``.
    With a live executor (one with ``wall_account()``), a line of where the wall time went
    follows every ``every_s`` too (:func:`live_wall_line`)."""

    def __init__(self, total: int, every_s: float = 15.0):
        import time

        self.plain = not sys.stderr.isatty()
        self.every_s = every_s
        self.t0 = self.last = self.last_wall = time.monotonic()
        self.account = None
        if self.plain:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self.progress = Progress("[progress.description]{task.description}", BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=Console(stderr=True), transient=True)
        self.progress.start()
        self.task = self.progress.add_task("requests finished", total=total)

    def watch(self, executor) -> None:
        """Follow ``executor``'s wall-time account when it keeps one (the live executor)."""
        self.account = getattr(executor, "wall_account", None)

    def update(self, done: int, total: int) -> None:
        import time

        now = time.monotonic()
        if self.account is not None and (now - self.last_wall >= self.every_s or done == total):
            self.last_wall = now
            line = live_wall_line(self.account(), now - self.t0)
            if self.plain:
                print(line, file=sys.stderr, flush=True)
            else:
                self.progress.console.print(line)
        if not self.plain:
            self.progress.update(self.task, completed=done, total=total)
            return
        if now - self.last >= self.every_s or done == total:
            self.last = now
            print(f"requests finished {done}/{total} ({now - self.t0:.0f} s)", file=sys.stderr,
                  flush=True)

    def close(self) -> None:
        if not self.plain:
            self.progress.stop()


def live_wall_line(wall: dict, total_s: float) -> str:
    """One line of where a live run's ``total_s`` seconds of wall time went, from a live
    executor's ``describe()["wall"]`` (docs/aiter.md, *Wall time*): setup, then the executor's
    parts (graph captures during the run, warm-ups, re-runs, timed runs with their GPU and hold
    seconds, the executor's other host work), the engine between calls, and the rest (trace,
    numba compile, results)."""
    cap = wall["captures"]
    setup = wall.get("setup_s") or 0.0
    parts = [("setup", setup), (f"captures ({cap['count']})", cap["s"]),
             ("warm-ups", wall["warmup_s"]), ("re-runs", wall["rerun_s"]),
             (f"timed (GPU {wall['gpu_s']:.1f} s, holds {wall['hold_s']:.1f} s)", wall["timed_s"]),
             ("executor other", wall["executor_other_s"]), ("engine", wall["engine_s"])]
    rest = total_s - setup - wall["span_s"]
    return (f"live: wall {total_s:.1f} s = " + " + ".join(f"{name} {s:.1f} s" for name, s in parts)
            + f" + rest {rest:.1f} s")


def _pool_rows(summary: dict) -> list[tuple[str, str]]:
    """The KV pool and the running-request cap the run had (SGLang's defaults unless set)."""
    cap = summary.get("kv_capacity_tokens")
    running = ((summary.get("config") or {}).get("engine") or {}).get("max_running")
    if not cap:
        return []
    return [("KV pool / running requests at most",
             f"{int(cap):,} tokens / {running}" if running else f"{int(cap):,} tokens")]


def print_summary(summary: dict, out_dir) -> None:
    """The end-of-run table on stdout."""
    from rich.console import Console
    from rich.table import Table

    def fmt_s(x):
        if x is None:
            return "-"
        return f"{x * 1e3:.1f} ms" if x < 1 else f"{x:.2f} s"

    t = Table(title=f"specsched: {summary['requests']} requests, policy {summary['policy']}, "
                    f"backend {summary['backend']}", show_header=True)
    t.add_column("metric")
    for q in ("p50", "p90", "p99", "mean"):
        t.add_column(q, justify="right")
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"),
                       ("queue_s", "queueing")):
        st = summary[key]
        t.add_row(label, *(fmt_s(st[q]) for q in ("p50", "p90", "p99", "mean")))
    console = Console()
    console.print(t)
    rows = [
        ("duration", fmt_s(summary["duration_s"])),
        ("throughput", f"{summary['throughput_tok_s']:.0f} tok/s" if summary["throughput_tok_s"] else "-"),
        ("acceptance length (tokens/step)", f"{summary['accept_len_mean']:.3f}" if summary["accept_len_mean"] else "-"),
        ("iterations mixing widths", f"{summary['mixed_iter_frac']:.2%}"),
        ("padding waste", f"{summary['padding_waste']:.2%}"),
        ("  width padding", f"{summary['width_pad_frac']:.2%}"),
        ("  graph padding", f"{summary['graph_pad_frac']:.2%}"),
        ("verify launches / iteration", f"{summary['verify_launches_per_iter']:.3f}" if summary["verify_launches_per_iter"] else "-"),
        ("graph replays / eager passes", f"{summary['graph_replays']} / {summary['eager_launches']}"),
        ("uniformity violations (rows)", str(summary["violations"])),
        ("retractions", str(summary["retractions"])),
        *_pool_rows(summary),
        *_controller_rows(summary.get("controller")),
    ]
    if summary.get("prefix_ideal_hit_rate") is not None:  # the trace has prefix information
        hit = summary.get("prefix_cache_hit_rate") or 0.0
        rows += [
            ("prefix cache hit rate (ideal)",
             f"{hit:.2%} ({summary['prefix_ideal_hit_rate']:.2%})"
             + ("" if summary.get("radix_cache") else ", cache off")),
            ("prefix tokens cached / evicted",
             f"{summary['prefix_cached_tokens']:,} / {summary['prefix_cache_evicted_tokens']:,}"),
        ]
    rows += [
        ("engine wall time", f"{summary['wall_s']:.2f} s ({summary['requests'] / summary['wall_s']:,.0f} req/s)"),
    ]
    detail = summary.get("backend_detail")
    wall = detail.get("wall") if isinstance(detail, dict) else None
    t2 = Table(show_header=False)
    t2.add_column("")
    t2.add_column("", justify="right")
    for r in rows:
        t2.add_row(*r)
    console.print(t2)
    if wall:  # a live run: where its wall time (setup + run) went
        console.print(live_wall_line(wall, summary["wall_s"] + (wall.get("setup_s") or 0.0)))
    for w in summary.get("warnings", []):
        console.print(f"[yellow]warning:[/yellow] {w}")
    console.print(f"results: {out_dir}")


def _controller_rows(ctl: dict | None) -> list[tuple[str, str]]:
    """The summary rows of the speculation controller: its name, draft counts and switches."""
    if not ctl:
        return []
    mix = ", ".join(f"k={k}: {v}" for k, v in ctl["rounds_by_draft_tokens"].items())
    rate = ctl["switches_per_s"]
    rows = [("controller", ctl["name"]),
            ("  rounds by draft count", mix or "-"),
            ("  draft-count switches", f"{ctl['switches']}" + (
                f" ({rate:.2f}/s)" if rate is not None else ""))]
    if ctl["switch_cost_s"]:
        rows.append(("  switching time", f"{ctl['switch_time_s']:.3f} s"))
    return rows
