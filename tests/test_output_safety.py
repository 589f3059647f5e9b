"""Every command that writes refuses to replace what it did not write: exit 2, one `error:` line,
nothing touched, no temporary left (the commands' side of tests/test_atomic.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specsched.cli import cli, run_cli

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "traces" / "samples" / "azure_conv_eagle_2k.parquet"
CSV = ROOT / "traces" / "samples" / "azure2023_conv_head2000.csv"


def run(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        run_cli(cli, [str(a) for a in args])
    out, err = capsys.readouterr()
    return e.value.code, out, err


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def work(tmp_path, monkeypatch):
    """A user's folder: data/ holding a trace and notes, mine/ holding notes only."""
    (tmp_path / "data").mkdir()
    shutil.copy(SAMPLE, tmp_path / "data" / "t.parquet")
    (tmp_path / "data" / "notes.txt").write_text("mine")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    monkeypatch.chdir(tmp_path)
    return tmp_path


SIM = ("simulate", "--trace", "data/t.parquet", "--limit", "30", "--no-report")


@pytest.mark.parametrize("out, message", [
    ("data", "error: data holds t.parquet, an input of this command: choose another --out"),
    ("mine", "error: mine holds files specsched did not write (notes.txt): choose another --out "
             "or remove them"),
    (".", "error: . is the current folder or holds it"),
    ("data/..", "is the current folder or holds it"),
])
def test_simulate_refuses_a_folder_it_did_not_write(work, capsys, out, message):
    before = tree(work)
    code, stdout, err = run(capsys, *SIM, "--out", out)
    assert code == 2 and message in err and "Traceback" not in err, err
    assert tree(work) == before  # nothing touched, no ..tmp-* / ..old-* left


def test_simulate_replaces_its_own_folder_and_shows_its_final_name(work, capsys):
    code, _, err = run(capsys, "simulate", "--trace", "data/t.parquet", "--limit", "30",
                       "--out", "runs/quick")
    assert code == 0, err
    html = (work / "runs" / "quick" / "report.html").read_text()
    assert "<td>runs/quick</td>" in html and ".tmp-" not in html  # not the temporary's name
    code, _, err = run(capsys, *SIM, "--out", "runs/quick")
    assert code == 0, err
    assert tree(work / "runs") == ["quick"] + [f"quick/{n}" for n in (
        ".specsched", "request_steps.parquet", "requests.parquet", "steps.parquet",
        "summary.json")]
    (work / "runs" / "quick" / "keep.md").write_text("my analysis")
    code, _, err = run(capsys, *SIM, "--out", "runs/quick")
    assert code == 2 and "(keep.md)" in err
    assert (work / "runs" / "quick" / "keep.md").read_text() == "my analysis"


def test_trace_commands_never_write_over_an_input_or_a_foreign_file(work, capsys):
    shutil.copy(CSV, work / "conv.csv")
    before = tree(work)
    code, _, err = run(capsys, "trace", "convert", "--from", "azure", "conv.csv", "-o", "conv.csv")
    assert code == 2 and "conv.csv is an input of this command" in err, err
    code, _, err = run(capsys, "trace", "convert", "--from", "azure", "conv.csv", "-o",
                       "mine/notes.txt")
    assert code == 2 and "exists and is not a parquet file specsched wrote" in err, err
    code, _, err = run(capsys, "trace", "synth", "-n", "20", "--rate", "2", "--lengths",
                       "empirical:data/t.parquet", "-o", "data/t.parquet")
    assert code == 2 and "is an input of this command" in err, err
    assert tree(work) == before
    # a trace specsched wrote is replaced, as -o asks
    code, _, err = run(capsys, "trace", "synth", "-n", "20", "--rate", "2", "-o", "data/t.parquet")
    assert code == 0, err


def test_report_never_writes_over_a_run_file_or_a_foreign_page(work, capsys):
    assert run(capsys, *SIM, "--out", "runs/a")[0] == 0
    (work / "index.html").write_text("<!DOCTYPE html><html><body>my page</body></html>")
    before = tree(work)
    code, _, err = run(capsys, "report", "runs/a", "-o", "runs/a/summary.json")
    assert code == 2 and "is an input of this command" in err, err
    code, _, err = run(capsys, "report", "runs/a", "-o", "index.html")
    assert code == 2 and "not an HTML report specsched wrote" in err, err
    assert tree(work) == before
    assert run(capsys, "report", "runs/a", "-o", "runs/a/report.html")[0] == 0  # its own report


def test_sweep_and_uniformity_refuse_foreign_folders(work, capsys):
    grid = work / "grid.toml"
    grid.write_text('[sweep]\ntrace = "data/t.parquet"\n[axes]\npolicy = ["pad"]\n')
    before = tree(work)
    code, _, err = run(capsys, "sweep", "grid.toml", "-o", "mine")
    assert code == 2 and "mine holds files specsched did not write (notes.txt)" in err, err
    code, _, err = run(capsys, "sweep", "grid.toml", "-o", ".")
    assert code == 2 and "is the current folder" in err, err
    code, _, err = run(capsys, "uniformity", "--trace", "data/t.parquet", "--out", "data")
    assert code == 2 and "data holds t.parquet, an input" in err, err
    assert tree(work) == before
    assert run(capsys, *SIM, "--out", "runs/a")[0] == 0
    code, _, err = run(capsys, "sweep", "grid.toml", "-o", "runs/a")
    assert code == 2 and "not a sweep's" in err, err


def test_fidelity_and_profile_check_their_output_first(work, capsys):
    before = tree(work)
    code, _, err = run(capsys, "fidelity", "--trace", "data/t.parquet", "--model",
                       "llama-3.1-8b", "--reference", "roofline", "--limit", "20", "--out", "data")
    assert code == 2 and "data holds t.parquet, an input" in err, err
    # refused before it even looks for a GPU
    code, _, err = run(capsys, "profile", "--model", "llama-3.1-8b", "-o", "mine/notes.txt")
    assert code == 2 and "not a parquet file specsched wrote" in err, err
    assert tree(work) == before


def test_a_sweep_folder_is_resumed_and_marked(work, capsys):
    grid = work / "grid.toml"
    grid.write_text('[sweep]\ntrace = "data/t.parquet"\n[base.engine]\nmax_running = 8\n'
                    '[axes]\npolicy = ["pad"]\n')
    for _ in range(2):
        code, _, err = run(capsys, "sweep", "grid.toml", "-o", "runs/grid", "--jobs", "1")
        assert code == 0, err
    marker = json.loads((work / "runs" / "grid" / ".specsched").read_text())
    assert marker["tool"] == "specsched" and marker["command"] == "specsched sweep"
