"""The ``specsched`` command line: a thin layer over the packages' own functions.

Each package keeps its commands in its own ``cli`` module; this group only wires them up,
loading a command's module when that command is used (so ``specsched --help`` never imports
torch, and a broken GPU stack cannot break ``specsched trace``).

User errors (:class:`traces.errors.SpecschedError`) become one message on stderr and exit 2.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys

import click

from specsched import __version__
from traces.errors import SpecschedError

# command name -> (module, attribute, one-line help shown by `specsched --help`)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "simulate": ("simulator.cli", "simulate", "Replay a trace through the engine and write a results folder."),
    "trace": ("traces.cli", "trace", "Convert, synthesise, inspect and validate traces."),
    "verify-metadata": ("backends.cli", "verify_metadata", "Print the AITER verify metadata a batch would get."),
    "profile": ("backends.cli", "profile", "Record a latency profile on the GPU (AITER executor)."),
    "calibrate": ("backends.cli_calibrate", "calibrate", "Fit a recorded profile to this machine's GPU from a few anchors."),
    "fidelity": ("analysis.cli", "fidelity", "Compare the profile backend with live GPU replay."),
    "report": ("analysis.cli", "report", "Summarise results folders as one HTML report."),
    "plan": ("analysis.cli_plan", "plan", "Find the highest rate one replica sustains under an SLO."),
    "uniformity": ("analysis.cli_uniformity", "uniformity", "How often verify batches mix widths, and what each remedy costs."),
    "sweep": ("analysis.cli", "sweep", "Run a grid of simulations locally or on Ray."),
    "tune-spec": ("analysis.cli_tune", "tune_spec_cmd", "Tune the speculation controller for a trace under an SLO."),
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in sorted(COMMANDS)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specsched")
def cli() -> None:
    """Simulate speculative-decoding serving with real verify-kernel constraints.

    \b
    Quick start:
      specsched simulate --trace traces/samples/azure_conv_eagle_2k.parquet
    """


def _stdout_is_devnull() -> bool:
    try:
        return os.path.samestat(os.fstat(sys.stdout.fileno()), os.stat(os.devnull))
    except (OSError, ValueError, AttributeError):
        return False


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _quick_exit(code: int) -> None:
    """Exit after an interrupt without the interpreter's final garbage collection over every
    object the run left (0.2-0.4 s after a large run; the outputs are already cleaned up)."""
    import gc

    gc.freeze()
    sys.exit(code)


def run_cli(command: click.Command, args: list[str] | None = None) -> None:
    """Run a click command with specsched's error policy: user errors exit 2 without a traceback.

    SIGTERM is handled like Ctrl-C (SIGINT): the command stops where it is, its atomic outputs
    remove their temporaries, and the process exits 130 without a traceback.  A reader that
    stops early (``simulate | head``) ends the command quietly with exit 0.
    """
    was_devnull = _stdout_is_devnull()
    try:
        previous = signal.signal(signal.SIGTERM, _interrupt)
    except ValueError:  # not the main thread (an embedding): signals stay as they are
        previous = None
    try:
        command.main(args=args, prog_name=None, standalone_mode=False)
    except BrokenPipeError:
        # point stdout at /dev/null so that what is still buffered does not fail at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    except SystemExit as exc:
        # rich meets a closed pipe by pointing stdout at /dev/null and exiting 1; click (around
        # the command) by wrapping sys.stdout in its PacifyFlushWrapper and exiting 1
        pacified = "PacifyFlushWrapper" in type(sys.stdout).__name__
        if exc.code == 1 and (pacified or (not was_devnull and _stdout_is_devnull())):
            sys.exit(0)
        raise
    except SpecschedError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(err.exit_code)
    except click.exceptions.Abort as err:
        interrupted = isinstance(err.__cause__, KeyboardInterrupt)
        click.echo("interrupted; nothing was written" if interrupted else "aborted", err=True)
        _quick_exit(130)
    except click.ClickException as err:
        # one line, as every other failure: click's usage block would put the message last
        hint = ""
        ctx = getattr(err, "ctx", None)
        if isinstance(err, click.UsageError) and ctx is not None:
            hint = f" (see '{ctx.command_path} --help')"
        click.echo(f"error: {err.format_message()}{hint}", err=True)
        sys.exit(2)
    except KeyboardInterrupt:
        click.echo("interrupted; nothing was written", err=True)
        _quick_exit(130)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    sys.exit(0)


def main() -> None:
    """Entry point of the ``specsched`` console script."""
    run_cli(cli)


def simulate_main() -> None:
    """Entry point of the ``simulate`` console script (same as ``specsched simulate``)."""
    from simulator.cli import simulate

    run_cli(simulate)
