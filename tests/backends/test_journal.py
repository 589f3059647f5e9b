"""Executor journals (backends/journal.py): a run cut off and resumed from its journal ends exactly
as an uninterrupted run, and a journal of another run, or a file that is no journal, is refused
and left as it was."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from backends import make_executor
from simulator.config import SimConfig
from specsched.setup import load_trace, simulate_to
from traces.errors import SpecschedError
from traces.synth import synth


@pytest.fixture(scope="module")
def trace_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("journal") / "t.parquet"
    synth(p, n=40, rate=6.0, acceptance="geometric:k=4,alpha=0.7", seed=5)
    return p


def _config(policy="split"):
    return SimConfig.load(None, {"backend.name": "roofline", "engine.policy": policy})


class Counting:
    """A roofline executor that counts its calls and, with ``fail_after``, dies at that call
    (as a live run does when its time limit kills it)."""

    def __init__(self, fail_after=None):
        self.inner = make_executor("roofline", model="llama-3.1-8b")
        self.name = self.inner.name
        self.calls = 0
        self.fail_after = fail_after

    def _count(self):
        if self.fail_after is not None and self.calls >= self.fail_after:
            raise KeyboardInterrupt("time limit")
        self.calls += 1

    def latency_table(self):
        return None

    def describe(self):
        return self.inner.describe()


def _counted(kind):
    def call(self, batch):
        self._count()
        return getattr(self.inner, kind)(batch)
    return call


for _kind in ("prefill", "draft", "draft_extend", "verify"):
    setattr(Counting, _kind, _counted(_kind))


def _run(trace_path, journal=None, executor=None, policy="split"):
    return simulate_to(load_trace(trace_path), _config(policy), None,
                       executor=executor or Counting(), journal=journal)


def _same(a: pa.Table, b: pa.Table) -> bool:
    """Byte-identical as parquet (``Table.equals`` counts NaN != NaN)."""
    import io

    import pyarrow.parquet as pq

    def raw(t):
        buf = io.BytesIO()
        pq.write_table(t, buf)
        return buf.getvalue()
    return raw(a) == raw(b)


def _calls(path):
    return [json.loads(x) for x in path.read_text().splitlines() if '"k"' in x]


def test_a_cut_off_run_resumes_from_its_journal_and_ends_as_an_uninterrupted_one(
        trace_path, tmp_path):
    plain = _run(trace_path)
    j = tmp_path / "run.jsonl"
    with pytest.raises(KeyboardInterrupt):
        _run(trace_path, journal=j, executor=Counting(fail_after=300))
    assert len(_calls(j)) == 300                     # every finished call is kept
    with open(j, "ab") as f:                         # and a line cut off mid-write
        f.write(b'{"i": 300, "k": "verify", "s": "0')
    resumed = Counting()
    res = _run(trace_path, journal=j, executor=resumed)
    total = len(_calls(j))
    assert resumed.calls == total - 300              # only what the journal lacked ran
    assert _same(res.steps, plain.steps) and _same(res.requests, plain.requests)
    jd = res.summary["backend_detail"]["journal"]
    assert (jd["replayed_calls"], jd["live_calls"], len(jd["segments"])) == (300, total - 300, 2)
    assert [s["first_call"] for s in jd["segments"]] == [0, 300]
    # every measured call is stamped with the wall time it returned at, in order (to align a
    # run with the GPU's telemetry); replaying adds no stamps and rewrites none
    stamps = [c["w"] for c in _calls(j)]
    assert len(stamps) == total and stamps == sorted(stamps)
    assert stamps[0] > 1.7e9 and stamps[299] <= stamps[300]
    assert any("measured in 2 sittings" in w and "different GPUs" not in w
               for w in res.summary["warnings"])
    # a third sitting replays everything and measures nothing
    again = Counting()
    res3 = _run(trace_path, journal=j, executor=again)
    assert again.calls == 0 and _same(res3.steps, plain.steps)
    assert len(_calls(j)) == total


def test_a_journal_of_another_run_or_no_journal_is_refused_and_left_as_it_was(trace_path, tmp_path):
    j = tmp_path / "run.jsonl"
    _run(trace_path, journal=j)
    before = j.read_bytes()
    with pytest.raises(SpecschedError, match="belongs to another run: its config_sha256"):
        _run(trace_path, journal=j, policy="pad")
    assert j.read_bytes() == before
    # the same configuration, but call 5 recorded for another batch: the runs diverged there
    lines = j.read_text().splitlines(keepends=True)
    k = next(i for i, x in enumerate(lines) if '"i": 5,' in x)
    rec = json.loads(lines[k])
    rec["s"] = "0" * 16
    lines[k] = json.dumps(rec) + "\n"
    j.write_text("".join(lines))
    with pytest.raises(SpecschedError, match=r"call 5: this run asks for .* the journal holds"):
        _run(trace_path, journal=j)
    other = tmp_path / "notes.txt"
    other.write_text("my notes\n")
    with pytest.raises(SpecschedError, match="is not a specsched journal"):
        _run(trace_path, journal=other)
    assert other.read_text() == "my notes\n"


def test_a_run_measured_on_two_gpus_says_so(trace_path, tmp_path):
    class OnGpu(Counting):
        def __init__(self, uuid, **kw):
            super().__init__(**kw)
            self.uuid = uuid

        def describe(self):
            return {**self.inner.describe(), "gpu": {"name": "NVIDIA H200", "uuid": self.uuid}}

    j = tmp_path / "run.jsonl"
    with pytest.raises(KeyboardInterrupt):
        _run(trace_path, journal=j, executor=OnGpu("aaaa", fail_after=100))
    res = _run(trace_path, journal=j, executor=OnGpu("bbbb"))
    (w,) = [w for w in res.summary["warnings"] if "sittings" in w]
    assert "from call 0 on aaaa; from call 100 on bbbb" in w and "on 2 different GPUs" in w


def test_simulate_journal_through_the_cli(trace_path, tmp_path, capsys):
    from specsched.cli import cli, run_cli

    def run(*args):
        with pytest.raises(SystemExit) as e:
            run_cli(cli, ["simulate", "--trace", str(trace_path), "--backend", "roofline",
                          "--policy", "split", "--no-report", "--json", *map(str, args)])
        out, err = capsys.readouterr()
        return e.value.code, out, err

    out, j = tmp_path / "out", tmp_path / "j.jsonl"
    code, _, err = run("--out", out, "--journal", j)
    assert code == 0, err
    steps = (out / "steps.parquet").read_bytes()
    code, stdout, err = run("--out", out, "--journal", j)
    assert code == 0, err
    assert (out / "steps.parquet").read_bytes() == steps
    assert json.loads(stdout)["backend_detail"]["journal"]["live_calls"] == 0
    # inside the results folder, which a run replaces whole: refused before anything runs
    code, _, err = run("--out", out, "--journal", out / "j.jsonl")
    assert code == 2 and err.count("error:") == 1 and "inside the results folder" in err
    assert "Traceback" not in err and not (out / "j.jsonl").exists()
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me")
    code, _, err = run("--out", tmp_path / "o2", "--journal", notes)
    assert code == 2 and err.count("error:") == 1 and "not a specsched journal" in err
    assert notes.read_text() == "keep me" and not (tmp_path / "o2").exists()


def test_any_cut_point_resumes_to_the_same_run(trace_path, tmp_path_factory):
    """Wherever the run is cut (hypothesis picks the call), the resumed run's tables are the
    uninterrupted run's, and the two sittings together measure each call exactly once."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    plain = _run(trace_path)
    total = Counting()
    _run(trace_path, executor=total)

    @settings(max_examples=6, deadline=None)
    @given(cut=st.integers(min_value=0, max_value=total.calls - 1))
    def check(cut):
        j = tmp_path_factory.mktemp("cut") / "run.jsonl"
        with pytest.raises(KeyboardInterrupt):
            _run(trace_path, journal=j, executor=Counting(fail_after=cut))
        second = Counting()
        res = _run(trace_path, journal=j, executor=second)
        assert cut + second.calls == total.calls
        assert _same(res.steps, plain.steps) and _same(res.requests, plain.requests)

    check()
