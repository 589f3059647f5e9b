"""benchmarks/journal_member_kv.py: a live run recorded without member_kv gets it from its
journal, only when the replay reproduces every recorded column."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from simulator.config import SimConfig
from specsched.setup import load_trace, simulate_to
from test_journal import Counting, _same
from traces.synth import synth

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A run recorded as before 2026-12-03 (no member_kv) with its journal, and the same run
    recorded with member_kv: (trace, run folder, journal, steps with member_kv)."""
    d = tmp_path_factory.mktemp("mk")
    trace = d / "t.parquet"
    synth(trace, n=40, rate=6.0, acceptance="geometric:k=4,alpha=0.7", seed=5)
    out = {}
    for name, record in (("old", False), ("new", True)):
        cfg = SimConfig.load(None, {"backend.name": "roofline", "engine.policy": "split",
                                    "model.name": "llama-3.1-8b",
                                    "engine.record_member_kv": record})
        simulate_to(load_trace(trace), cfg, d / name, executor=Counting(),
                    journal=d / f"{name}.jsonl")
        out[name] = d / name
    return trace, out["old"], d / "old.jsonl", pq.read_table(out["new"] / "steps.parquet")


def _main(trace, run, journal, out):
    import journal_member_kv as m

    return m.main(["--journal", str(journal), "--reference-run", str(run), "--trace", str(trace),
                   "--model", "llama-3.1-8b", "--out", str(out)])


def test_the_replay_adds_the_members_a_recording_would_have_had(recorded, tmp_path):
    """The output's steps are the old run's, column for column, plus member_kv equal to that of
    the same run recorded with it; the other files are copied as they were."""
    trace, run, journal, direct = recorded
    assert "member_kv" not in pq.read_schema(run / "steps.parquet").names
    assert _main(trace, run, journal, tmp_path / "o") == 0
    got = pq.read_table(tmp_path / "o" / "steps.parquet")
    old = pq.read_table(run / "steps.parquet")
    assert _same(got.drop(["member_kv"]), old)  # NaN (max_abs_error) equal to NaN
    assert got.column("member_kv").to_pylist() == direct.column("member_kv").to_pylist()
    assert pc.sum(pc.list_value_length(got.column("member_kv"))).as_py() > got.num_rows
    for f in ("requests.parquet", "summary.json", "request_steps.parquet"):
        assert (tmp_path / "o" / f).read_bytes() == (run / f).read_bytes()


def test_a_run_the_replay_does_not_reproduce_or_a_cut_journal_is_refused(recorded, tmp_path,
                                                                       capsys):
    """One step's recorded latency changed: exit 2, the error names latency_s and the step, no
    folder. A journal cut before the run's end: exit 2. An existing --out: exit 2, untouched."""
    import shutil

    trace, run, journal, _ = recorded
    bad = tmp_path / "bad"
    shutil.copytree(run, bad)
    t = pq.read_table(bad / "steps.parquet")
    lat = t.column("latency_s").to_pylist()
    lat[7] *= 1.5
    t = t.set_column(t.schema.get_field_index("latency_s"), "latency_s", pa.array(lat))
    pq.write_table(t, bad / "steps.parquet")
    assert _main(trace, bad, journal, tmp_path / "o1") == 2
    assert not (tmp_path / "o1").exists()
    assert "differs in latency_s at step 7" in capsys.readouterr().err
    cut = tmp_path / "cut.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    cut.write_text("".join(lines[:len(lines) // 2]))
    assert _main(trace, run, cut, tmp_path / "o2") == 2
    assert not (tmp_path / "o2").exists()
    assert "ends before the run does" in capsys.readouterr().err
    (tmp_path / "o3").mkdir()
    (tmp_path / "o3" / "keep").write_text("x")
    assert _main(trace, run, journal, tmp_path / "o3") == 2
    assert (tmp_path / "o3" / "keep").read_text() == "x"
