"""benchmarks/score_cut_run.py: a live run cut off mid-way is scored per step from its journal,
on exactly the steps the run had completed, and only under the options it was started with."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from simulator.config import SimConfig
from specsched.setup import load_trace, prepare, simulate_to
from test_journal import Counting
from traces.synth import synth

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

CUT_AT = 150  # the call the "time limit" kills


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(trace, the whole run's steps, the journal of the same run killed at call CUT_AT)."""
    d = tmp_path_factory.mktemp("cut")
    trace = d / "t.parquet"
    synth(trace, n=30, rate=6.0, acceptance="geometric:k=4,alpha=0.7", seed=3)
    cfg = SimConfig.load(None, {"backend.name": "roofline", "engine.policy": "pad",
                                "model.name": "llama-3.1-8b"})
    simulate_to(load_trace(trace), cfg, d / "whole", executor=Counting())
    with pytest.raises(KeyboardInterrupt):
        simulate_to(load_trace(trace), cfg, d / "cut", executor=Counting(fail_after=CUT_AT),
                    journal=d / "cut.jsonl")
    assert not (d / "cut").exists()  # a cut run leaves its journal, no folder
    return trace, pq.read_table(d / "whole" / "steps.parquet"), d / "cut.jsonl"


def _same_values(a, b) -> bool:
    """Same schema and the same values, NaN equal to NaN (a slice keeps its whole dictionary,
    so the parquet bytes of equal tables may differ)."""
    if a.schema != b.schema:
        return False
    return all(x == y or (x != x and y != y)
               for n in a.column_names
               for x, y in zip(a.column(n).to_pylist(), b.column(n).to_pylist(), strict=True))


def _args(trace, journal, *extra):
    return ["--journal", str(journal), "--trace", str(trace), "--model", "llama-3.1-8b",
            "--backend", "roofline", *extra]


def test_the_replayed_steps_are_the_runs_first_steps(runs):
    """The cut journal's replay gives the whole run's first steps, column for column: one a pass
    of every iteration the journal holds whole (an iteration's steps are recorded when it ends,
    so the passes of the one cut mid-way, at most three, are not)."""
    import score_cut_run as m

    trace, whole, journal = runs
    steps, calls, finished, _ = m.replay_steps(journal, trace, "llama-3.1-8b", "pad", [], None,
                                               "roofline")
    assert not finished and calls == CUT_AT
    assert CUT_AT - 3 <= steps.num_rows <= CUT_AT < whole.num_rows
    assert _same_values(steps, whole.slice(0, steps.num_rows))


def test_its_figures_are_the_fidelity_scorers_on_those_steps(runs, tmp_path, capsys):
    """Per step all and per kind equal analysis.fidelity's step_errors on the whole run's first
    steps under the shipped profile."""
    import score_cut_run as m
    from analysis.fidelity.stats import step_errors

    trace, whole, journal = runs
    out = tmp_path / "s.json"
    assert m.main(_args(trace, journal, "--policy", "pad", "--profile", "shipped",
                        "--json", str(out))) == 0
    got = json.loads(out.read_text())
    n = got["steps"]
    assert CUT_AT - 3 <= n <= CUT_AT and got["finished"] is False
    table = prepare(SimConfig.load(None, {"backend.name": "profile", "model.name":
                                          "llama-3.1-8b"})).executor.latency_table()
    want = step_errors(whole.slice(0, n), table)
    row = got["profiles"][0]
    assert row["mape_all_pct"] == pytest.approx(want["mape_all_pct"])
    assert row["mape_all_pct"] > 1.0  # the roofline run is not the H200 profile
    assert sum(v["steps"] for v in row["by_kind"].values()) == n
    kinds = whole.slice(0, n).column("kind").to_pylist()
    assert row["by_kind"]["verify"]["steps"] == sum(k == "verify" for k in kinds)
    assert "cut off: per step only" in capsys.readouterr().out
    assert np.isfinite(row["by_kind"]["verify"]["mean_signed_pct"])


def test_other_options_or_a_used_json_are_refused(runs, tmp_path, capsys):
    """Another policy than the run's: exit 2 naming the digest, no JSON written. An existing
    --json: exit 2, kept as it was."""
    import score_cut_run as m

    trace, _, journal = runs
    out = tmp_path / "s.json"
    assert m.main(_args(trace, journal, "--policy", "split", "--profile", "shipped",
                        "--json", str(out))) == 2
    assert "configuration digest" in capsys.readouterr().err and not out.exists()
    out.write_text("mine")
    assert m.main(_args(trace, journal, "--policy", "pad", "--profile", "shipped",
                        "--json", str(out))) == 2
    assert out.read_text() == "mine" and capsys.readouterr().err.startswith("error:")


def test_a_gzipped_journal_gives_the_same_steps(runs, tmp_path):
    """Results folders keep long journals gzipped: the same steps come back from one."""
    import gzip

    import score_cut_run as m

    trace, _, journal = runs
    gz = tmp_path / "cut.jsonl.gz"
    gz.write_bytes(gzip.compress(journal.read_bytes()))
    a = m.replay_steps(journal, trace, "llama-3.1-8b", "pad", [], None, "roofline")[0]
    b = m.replay_steps(gz, trace, "llama-3.1-8b", "pad", [], None, "roofline")[0]
    assert b.num_rows == a.num_rows > 0 and _same_values(a, b)
