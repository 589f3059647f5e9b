"""The analysis commands' help and argument errors (no simulation needed)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from specsched.cli import COMMANDS, cli

ANALYSIS = [name for name, (module, _, _) in COMMANDS.items() if module == "analysis.cli"]


def test_every_analysis_command_is_registered_and_loads():
    import analysis.cli as acli

    assert set(ANALYSIS) >= {"report", "plan", "uniformity", "sweep", "fidelity"}
    for name in ANALYSIS:
        assert getattr(acli, COMMANDS[name][1]).name == name


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
