"""The command line's edges: help and version of the `simulate` script, option spellings, list
values and misspelled keys in --set, and a reader that stops early."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simulator.config import SimConfig
from specsched import __version__
from tests.simulator.helpers import random_trace
from traces import write_trace
from traces.errors import SpecschedError
from traces.io import steps_table

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "traces" / "samples" / "azure_conv_eagle_2k.parquet"
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def _simulate_script(*args: str) -> subprocess.CompletedProcess:
    """What the `simulate` console script runs (specsched.cli.simulate_main), from this checkout."""
    code = "import sys; from specsched.cli import simulate_main; sys.argv[0] = 'simulate'; simulate_main()"
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_simulate_script_help(flag):
    proc = _simulate_script(flag)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Usage: simulate") and "--trace" in proc.stdout


def test_simulate_script_version():
    proc = _simulate_script("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"specsched, version {__version__}"


def test_trace_commands_take_out_as_well_as_output(tmp_path):
    out = tmp_path / "s.parquet"
    proc = subprocess.run([sys.executable, "-m", "specsched", "trace", "synth", "-n", "5",
                           "--rate", "1", "--acceptance", "geometric:k=2,alpha=0.5",
                           "--out", str(out)], cwd=ROOT, env=ENV, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert out.is_file()
    csv = tmp_path / "a.csv"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,10,5\n")
    conv = tmp_path / "c.parquet"
    proc = subprocess.run([sys.executable, "-m", "specsched", "trace", "convert", "--from",
                           "azure", str(csv), "--out", str(conv)], cwd=ROOT, env=ENV,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert conv.is_file()


@pytest.mark.parametrize("text", ["2,4,8", "[2,4,8]", "[2, 4, 8]", " 2, 4 ,8 ", "2,4x1,8"])
def test_set_list_forms_agree(text):
    assert SimConfig.load(None, {"engine.buckets": text}).engine.buckets == (2, 4, 8)


def test_set_list_ranges_and_mixes():
    e = SimConfig.load(None, {"engine.capture_widths": "1-8", "engine.capture_bs": "1-4,8,16",
                              "engine.buckets": [2, "4-5"]}).engine
    assert e.capture_widths == (1, 2, 3, 4, 5, 6, 7, 8)
    assert e.capture_bs == (1, 2, 3, 4, 8, 16)
    assert e.buckets == (2, 4, 5)
    assert SimConfig.load(None, {"engine.capture_bs": "[]"}).engine.capture_bs == ()


def test_set_list_error_names_the_key_and_the_forms():
    with pytest.raises(SpecschedError, match=r"'engine.buckets': item 1 is 'x'.*1-8"):
        SimConfig.load(None, {"engine.buckets": "2,x"})
    with pytest.raises(SpecschedError, match=r"'engine.buckets'.*item 0 is '8-2'"):
        SimConfig.load(None, {"engine.buckets": "8-2"})


@pytest.mark.parametrize("key, meant", [("engine.max_runing", "engine.max_running"),
                                        ("engin.policy", "engine.policy"),
                                        ("max_running", "engine.max_running"),
                                        ("cluster.replica", "cluster.replicas")])
def test_misspelled_key_gets_did_you_mean(key, meant):
    with pytest.raises(SpecschedError, match=f"unknown configuration key '{key}' "
                                             rf"\(did you mean '{meant}'\?\)"):
        SimConfig.load(None, {key: "1"})


def test_misspelled_toml_key_gets_did_you_mean(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[engine]\nchunked_prefil_size = 3\n")
    with pytest.raises(SpecschedError, match="did you mean 'engine.chunked_prefill_size'"):
        SimConfig.load(cfg)


@pytest.fixture(scope="module")
def toy_trace(tmp_path_factory) -> Path:
    toy = random_trace(np.random.default_rng(0), 30)
    d, a = steps_table(toy.step_offsets, toy.draft_tokens, toy.accepted_tokens)
    import pyarrow as pa

    path = tmp_path_factory.mktemp("t") / "toy.parquet"
    write_trace(pa.table({"request_id": toy.request_id, "arrival_s": toy.arrival_s,
                          "prompt_tokens": toy.prompt_tokens, "output_tokens": toy.output_tokens,
                          "draft_tokens": d, "accepted_tokens": a}), path, metadata={})
    return path


@pytest.mark.parametrize("args", [
    ["simulate", "--backend", "roofline", "--no-report"],
    ["simulate", "--backend", "roofline", "--no-report", "--json"],
    ["trace", "inspect"],
])
def test_reader_that_stops_early_ends_quietly(toy_trace, tmp_path, args):
    # `specsched ... | head -0`: the pipe is closed before the command writes anything
    if args[0] == "simulate":
        args = args + ["--trace", str(toy_trace), "--out", str(tmp_path / "r")]
    else:
        args = args + [str(toy_trace)]
    proc = subprocess.Popen([sys.executable, "-m", "specsched", *args], cwd=ROOT, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=600) == 0, err
    from backends.jit import COMPILE_NOTICE

    assert err.replace(COMPILE_NOTICE + "\n", "") == ""  # the notice only on a cold cache


@pytest.mark.parametrize("args, says", [
    (("--bogus",), "No such option '--bogus'"),
    (("--trace",), "Option '--trace' requires an argument"),
    ((), "Missing option '--trace'"),
])
def test_a_usage_error_is_one_error_line_and_exit_2(args, says):
    """A mistyped command line fails as every other input does: one ``error:`` line on stderr
    naming the problem (and where the help is), nothing on stdout, exit 2."""
    proc = _simulate_script(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], proc.stderr


def _all_commands():
    """Every command and sub-command of `specsched`, as (path, click command)."""
    import click

    from specsched.cli import COMMANDS, cli
    ctx = click.Context(cli)
    todo = [((name,), cli.get_command(ctx, name)) for name in sorted(COMMANDS)]
    out = []
    while todo:
        path, cmd = todo.pop()
        out.append((path, cmd))
        if isinstance(cmd, click.Group):
            todo += [(path + (n,), cmd.get_command(ctx, n)) for n in cmd.list_commands(ctx)]
    return sorted(out, key=lambda p: p[0])


@pytest.mark.parametrize("path", [p for p, _ in _all_commands()], ids=" ".join)
def test_help_examples_keep_their_line_breaks(path):
    """An example continued with a backslash prints as two lines: a docstring that writes a
    single backslash before the newline joins them, and the help shows one line with a run of
    spaces in the middle of the command."""
    from click.testing import CliRunner

    from specsched.cli import cli
    res = CliRunner().invoke(cli, [*path, "--help"])
    assert res.exit_code == 0, res.output
    text = res.output.split("\nOptions:")[0]
    joined = [ln for ln in text.splitlines() if ln.strip().startswith("specsched ")
              and "      --" in ln.strip()]
    assert joined == [], f"`specsched {' '.join(path)} --help` joins example lines: {joined}"
