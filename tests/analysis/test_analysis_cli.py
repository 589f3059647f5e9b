"""The analysis commands' help and argument errors (no simulation needed)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from specsched.cli import COMMANDS, cli

ANALYSIS = [name for name, (module, _, _) in COMMANDS.items() if module.startswith("analysis.")]


def test_every_analysis_command_is_registered_and_loads():
    import importlib

    assert set(ANALYSIS) >= {"report", "plan", "uniformity", "sweep", "fidelity", "tune-spec"}
    for name in ANALYSIS:
        module, attr, _ = COMMANDS[name]
        assert getattr(importlib.import_module(module), attr).name == name


@pytest.mark.parametrize("name", ["report", "plan", "uniformity", "sweep"])
def test_help_has_an_example(name):
    res = CliRunner().invoke(cli, [name, "--help"])
    assert res.exit_code == 0
    assert "Example" in res.output and f"specsched {name}" in res.output


def test_report_name_count_must_match(tmp_path):
    from specsched.cli import run_cli

    with pytest.raises(SystemExit) as e:
        run_cli(cli, ["report", str(tmp_path), str(tmp_path), "--name", "a"])
    assert e.value.code == 2


def test_labels_are_unique():
    from analysis.cli import _labels

    assert _labels(["x/a/run", "y/b/run"]) == ["a/run", "b/run"]
    assert _labels(["runs/pad", "runs/split"]) == ["pad", "split"]


def test_report_without_request_steps_and_with_unfinished(make_run, tmp_path):
    import math
    import re

    from analysis.report import write_report
    from analysis.slo import parse_slo

    run = make_run([dict(arrival_s=0, admit_s=0, first_token_s=0.5, finish_s=2, output_tokens=4,
                         steps=2),
                    dict(arrival_s=1, admit_s=math.nan, first_token_s=math.nan,
                         finish_s=math.nan, output_tokens=3)],
                   [dict(kind="verify", start_s=1.0, bs=1, width=3, tokens=3, committed_tokens=2),
                    dict(kind="verify", start_s=1.5, iteration=1, bs=1, width=2, tokens=2,
                         committed_tokens=1)], None, name="partial")
    out = tmp_path / "r.html"
    sums = write_report([run], out, slo=parse_slo("ttft_p50<=1s"))
    html = out.read_text()
    # one run: no side-by-side comparison; no request_steps.parquet: no inter-token gap panel
    ids = re.findall(r"<figure class='plot' id='([^']+)'", html)
    assert ids == ["latency-cdfs", "latency-over-time", "engine-state", "busy-by-kind",
                   "batch-over-time", "histograms", "width-mix", "width-distribution", "padding"]
    cdfs = html[html.index("id='latency-cdfs'"):html.index("id='latency-over-time'")]
    cdfs = cdfs[cdfs.index("<svg"):]
    assert "TPOT (ms)" in cdfs and "inter-token gap" not in cdfs
    assert sums[0]["itl_s"] is None and sums[0]["finished"] == 1
    assert (out.stat().st_mode & 0o644) == 0o644  # readable like any other file
