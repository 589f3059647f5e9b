"""``specsched trace``: convert, synthesise, inspect and validate traces.

Each command parses its options and calls one library function (``traces.convert.convert``,
``traces.synth.synth``, ``traces.inspect.inspect_trace``, ``traces.validate.validate_trace``);
user errors are raised as ``SpecschedError`` and turned into ``error: ...`` / exit 2 by
``specsched.cli.run_cli``.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from typing import Iterator

import click

__all__ = ["trace"]


def _echo_written(res) -> None:
    """Print what a trace command wrote, then its notes, then its warnings on stderr."""
    steps = "no per-step lists" if res.steps is None else f"{res.steps:,} verify steps"
    click.echo(f"wrote {res.path}: {res.rows:,} requests, {steps}")
    for note in res.notes:
        click.echo(f"note: {note}")
    for warning in res.warnings:
        click.echo(f"warning: {warning}", err=True)


@contextmanager
def _progress(enabled: bool, total: int, label: str) -> Iterator:
    """A rich progress bar on stderr when ``enabled`` (or stderr is a terminal)."""
    if not (enabled or sys.stderr.isatty()):
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress("[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=Console(stderr=True), transient=False) as prog:
        task = prog.add_task(label, total=total)
        yield lambda k: prog.advance(task, k)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def trace() -> None:
    """Convert, synthesise, inspect and validate request traces.

    \b
    Examples:
      specsched trace convert --from azure AzureLLMInferenceTrace_conv.csv -o conv.parquet \\
          --acceptance specbench:answers_eagle.jsonl --seed 0
      specsched trace synth -n 10000 --rate 8 --acceptance geometric:k=4,alpha=0.7 -o syn.parquet
      specsched trace inspect traces/samples/azure_conv_eagle_2k.parquet
      specsched trace validate conv.parquet
    """


_ACCEPTANCE_HELP = ("Fill per-step draft/accept lists with this model: "
                    "specbench:ANSWERS.jsonl[,category=..][,drafts=stop|fixed][,q=Q][,k=K], "
                    "geometric:k=K,alpha=A, or dynamic:k=K|LO-HI,alpha=A[,conc=C]"
                    "[,stop_right=P][,stop_wrong=P]. See docs/traces.md.")


@trace.command()
@click.option("--from", "fmt", required=True,
              type=click.Choice(["azure", "mooncake", "burstgpt", "vidur"]),
              help="Input format.")
@click.argument("input_path", metavar="INPUT", type=click.Path(dir_okay=False))
@click.option("-o", "--output", "--out", "output_path", required=True,
              type=click.Path(dir_okay=False), help="The trace to write (parquet).")
@click.option("--acceptance", default=None, help=_ACCEPTANCE_HELP)
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0),
              help="Seed of the acceptance model's draws.")
@click.option("--limit", default=None, type=click.IntRange(min=1),
              help="Keep only the first N requests of the input (file order).")
@click.option("--rate-scale", default=1.0, show_default=True, type=float,
              help="Divide arrival times by X (X=2: twice the request rate).")
def convert(fmt: str, input_path: str, output_path: str, acceptance: str | None, seed: int,
            limit: int | None, rate_scale: float) -> None:
    """Convert a request log (Azure, Mooncake, BurstGPT, Vidur) into a trace.

    \b
    Example:
      specsched trace convert --from azure azure2023_conv.csv -o conv.parquet \\
          --acceptance specbench:specbench_vicuna7b_eagle.jsonl --seed 0 --limit 2000
    """
    from traces.convert import convert as do_convert

    res = do_convert(fmt, input_path, output_path, acceptance=acceptance, seed=seed,
                     limit=limit, rate_scale=rate_scale)
    _echo_written(res)


@trace.command()
@click.option("-n", "--requests", "n", required=True, type=click.IntRange(min=1),
              help="Number of requests.")
@click.option("--rate", required=True, type=float, help="Mean request rate (requests/s).")
@click.option("--arrival", default="poisson", show_default=True,
              type=click.Choice(["poisson", "gamma"]), help="Arrival process.")
@click.option("--cv", default=1.0, show_default=True, type=float,
              help="Coefficient of variation of inter-arrival times (gamma only; >1 is bursty).")
@click.option("--prompt", "prompt", default="lognormal:median=1000,sigma=0.8,max=16384",
              show_default=True, help="Prompt length: lognormal:median=M,sigma=S[,min=A,max=B] or fixed:N.")
@click.option("--output-len", "output_len", default="lognormal:median=200,sigma=0.8,max=4096",
              show_default=True, help="Output length, same forms as --prompt.")
@click.option("--lengths", default=None,
              help="Resample (prompt, output) pairs from a trace: empirical:PATH (specsched "
                   "parquet) or empirical:FORMAT:PATH (azure, mooncake, burstgpt, vidur). "
                   "Overrides --prompt/--output-len.")
@click.option("--acceptance", default=None, help=_ACCEPTANCE_HELP)
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0),
              help="Seed of every draw.")
@click.option("-o", "--output", "--out", "output_path", required=True,
              type=click.Path(dir_okay=False), help="The trace to write (parquet).")
@click.option("--turns", default=None,
              help="Multi-turn sessions: turns per session, lognormal:... or fixed:N. Each "
                   "turn's prompt is the previous prompt + answer + a new user message "
                   "(--prompt then draws the user message). Adds prefix_hashes.")
@click.option("--turn-gap", default=None, type=float,
              help="Sessions: mean think time in seconds between a turn's arrival and the "
                   "next turn's (exponential). Default 215, measured on the Mooncake "
                   "conversation trace.")
@click.option("--system-prompts", default=0, show_default=True, type=click.IntRange(min=0),
              help="Number of shared system prompts; each session starts with one, picked "
                   "uniformly. Adds prefix_hashes.")
@click.option("--system-prompt-len", default="fixed:1024", show_default=True,
              help="Length of each system prompt: lognormal:... or fixed:N.")
@click.option("--prefix-block", default=64, show_default=True, type=click.IntRange(min=1),
              help="Tokens per prefix_hashes block (sessions and system prompts).")
@click.option("--progress", is_flag=True, help="Show a progress bar on stderr.")
def synth(n: int, rate: float, arrival: str, cv: float, prompt: str, output_len: str,
          lengths: str | None, acceptance: str | None, seed: int, output_path: str,
          turns: str | None, turn_gap: float | None, system_prompts: int,
          system_prompt_len: str, prefix_block: int, progress: bool) -> None:
    """Synthesise a trace: Poisson/Gamma arrivals, lognormal or empirical lengths, sessions.

    \b
    Examples:
      specsched trace synth -n 10000 --rate 8 --arrival gamma --cv 3 \\
          --acceptance dynamic:k=2-8,alpha=0.7 --seed 1 -o bursty.parquet
      specsched trace synth -n 5000 --rate 4 --lengths empirical:azure:azure2023_code.csv \\
          --acceptance geometric:k=4,alpha=0.6 -o code_like.parquet
      specsched trace synth -n 5000 --rate 4 --turns lognormal:median=3,sigma=0.7,max=20 \\
          --system-prompts 8 --system-prompt-len fixed:2048 --prompt lognormal:median=200,sigma=1 \\
          --acceptance geometric:k=4,alpha=0.7 -o chat_sessions.parquet
    """
    from traces.synth import synth as do_synth

    with _progress(progress, n, "synthesising") as tick:
        res = do_synth(output_path, n=n, rate=rate, arrival=arrival, cv=cv, prompt=prompt,
                       output=output_len, lengths=lengths, acceptance=acceptance, seed=seed,
                       progress=tick, turns=turns, turn_gap=turn_gap,
                       system_prompts=system_prompts, system_prompt_len=system_prompt_len,
                       prefix_block=prefix_block)
    _echo_written(res)


@trace.command()
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def inspect(path: str, as_json: bool) -> None:
    """Summarise a trace: arrivals, lengths, drafts and acceptance per step, width mix.

    \b
    Example:
      specsched trace inspect traces/samples/azure_conv_eagle_2k.parquet --json
    """
    from traces.inspect import inspect_trace, render_inspect

    stats = inspect_trace(path)
    if as_json:
        click.echo(json.dumps(stats))
    else:
        from rich.console import Console

        render_inspect(stats, Console())


@trace.command()
@click.argument("path", type=click.Path(dir_okay=False))
def validate(path: str) -> None:
    """Check a trace; exit 2 naming the file, row and column of every problem.

    \b
    Example:
      specsched trace validate conv.parquet
    """
    from traces.validate import validate_trace

    rep = validate_trace(path)
    steps = "no per-step lists" if rep.steps is None else f"{rep.steps:,} verify steps"
    prefix = ("" if rep.prefix_ids is None else
              f", {rep.prefix_ids:,} prefix block ids of "
              f"{rep.metadata.get('specsched.prefix_block_tokens')} tokens")
    click.echo(f"ok: {rep.path}: {rep.rows:,} requests, {steps}{prefix}, format version "
               f"{rep.format_version or '(none)'}")
    for note in rep.notes:
        click.echo(f"note: {note}")
