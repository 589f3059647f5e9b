"""benchmarks/journal_remeasure.py: a profile journal copied without the rows to measure again,
worked by hand."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def row(kind: str, graph: bool, bs: int) -> dict:
    return {"row": {"kind": kind, "graph": graph, "bs": bs, "width": 2, "kv_len": 512,
                    "tokens": bs * 2, "latency_s": 0.01, "p10_s": 0.01, "p90_s": 0.01, "reps": 5}}


LINES = [{"specsched_profile_journal": 1, "model": "m", "spec": {}, "executor_opts": {}},
         {"segment": 0, "first_call": 0, "gpu": {"uuid": "a"}},
         row("verify", True, 1), row("verify", True, 24), row("draft", False, 1),
         {"segment": 1, "first_call": 3, "gpu": {"uuid": "b"}},
         row("draft_extend", True, 30), row("verify", True, 8),
         {"segment": 2, "first_call": 5, "gpu": {"uuid": "c"}},
         row("verify", False, 16)]


def test_drops_graph_rows_from_a_batch_size_and_eager_rows_and_recounts_sittings(tmp_path):
    """Dropping graph rows of 22 requests or more and eager rows keeps verify bs 1 (sitting 0)
    and verify bs 8 (sitting 1): sitting 0 starts at row 0, sitting 1 at row 1, sitting 2 (whose
    one row went) at row 2; sittings_used then names sittings 0 and 1 only."""
    import journal_remeasure as m
    from backends.journal import sittings_used

    src, out = tmp_path / "j.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in LINES))
    assert m.main([str(src), str(out), "--graph-bs-from", "22", "--eager"]) == 0
    got = [json.loads(s) for s in out.read_text().splitlines()]
    assert got[0] == LINES[0]
    assert [(x["row"]["kind"], x["row"]["bs"]) for x in got if "row" in x] == [("verify", 1),
                                                                                ("verify", 8)]
    segs = [x for x in got if "segment" in x]
    assert [s["first_call"] for s in segs] == [0, 1, 2]
    assert [s["gpu"]["uuid"] for s in sittings_used(segs, 2)] == ["a", "b"]


def test_keeps_eager_rows_unless_asked_and_refuses_an_existing_file(tmp_path, capsys):
    """Without --eager the eager rows stay (4 of 6 kept at --graph-bs-from 22); an existing
    output, or a file that is not a profile journal, is an error with exit 2, left untouched."""
    import journal_remeasure as m

    src, out = tmp_path / "j.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in LINES))
    assert m.main([str(src), str(out), "--graph-bs-from", "22"]) == 0
    assert sum("row" in json.loads(s) for s in out.read_text().splitlines()) == 4
    before = out.read_text()
    assert m.main([str(src), str(out), "--eager"]) == 2
    assert out.read_text() == before
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"specsched_journal": 1}) + "\n")
    assert m.main([str(bad), str(tmp_path / "o2.jsonl")]) == 2
    assert not (tmp_path / "o2.jsonl").exists()
    err = capsys.readouterr().err
    assert err.count("error:") == 2
