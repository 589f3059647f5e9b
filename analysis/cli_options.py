"""Options and helpers the analysis commands share: building a configuration, and formatting.

``plan``, ``uniformity`` and ``tune-spec`` take the same configuration options as ``specsched
simulate`` (``config_options``); every command prints through the same console and formatters.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from backends.shipped import shipped_help
from simulator.config import parse_overrides
from traces.errors import SpecschedError

__all__ = ["_config_options", "_parallel_options", "_build_config", "_check_trace", "_show_progress", "_echo_json",
           "_fmt_s", "_console", "_fmt_count", "_fmt_pct"]


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


def _parallel_options(fn):
    """``--jobs`` and ``--ray``: where the command's simulations run."""
    fn = click.option("--ray", "ray_address", metavar="ADDRESS",
                      help="Run the simulations on a Ray cluster ('local' starts one here).")(fn)
    return click.option("--jobs", type=int,
                        help="Simulations at once (default: one per CPU).")(fn)


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
