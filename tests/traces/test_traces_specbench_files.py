"""Spec-Bench answer files other than EAGLE and SPS: the vanilla (no drafting) baseline, files
that accept more than k, repeated question ids, and a user-given k."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from traces import read_trace_arrays, write_trace
from traces.acceptance import parse_acceptance
from traces.convert import convert
from traces.errors import SpecschedError

VANILLA_ID = "vicuna-7b-v1.3-vanilla-float16-temp-0.0"


def answers(path: Path, model_id: str, rows: list[tuple[int, str, list[int]]]) -> Path:
    """A model_answer JSONL: rows of (question_id, category, accept_lengths)."""
    with open(path, "w") as fh:
        for qid, cat, al in rows:
            fh.write(json.dumps({"question_id": qid, "category": cat, "model_id": model_id,
                                 "choices": [{"index": 0, "accept_lengths": al}]}) + "\n")
    return path


@pytest.fixture
def vanilla(tmp_path) -> Path:
    return answers(tmp_path / "vanilla.jsonl", VANILLA_ID,
                   [(1, "writing", [1] * 40), (2, "coding", [1] * 25), (3, "writing", [1] * 60)])


def lengths_trace(path: Path, outputs: list[int]) -> Path:
    n = len(outputs)
    write_trace(pa.table({"request_id": [str(i) for i in range(n)],
                          "arrival_s": np.arange(n, dtype=float),
                          "prompt_tokens": np.full(n, 50, np.int32),
                          "output_tokens": np.asarray(outputs, np.int32)}), path, metadata={})
    return path


@pytest.mark.parametrize("extra", ["", ",k=0", ",drafts=fixed"])
def test_vanilla_answers_give_the_no_speculation_baseline(vanilla, extra):
    model = parse_acceptance(f"specbench:{vanilla}{extra}")
    assert model.k == 0 and model.method == "vanilla" and not model.speculation()
    meta = model.metadata(0)
    assert meta["speculation"] is False
    assert meta["params"]["method"] == "vanilla" and "no drafting" in meta["params"]["method_rule"]
    assert meta["position_accept_prob"] == [0.0] * 8
    lists = model.fill(np.array([1, 2, 17]), np.random.default_rng(0))
    # one token per step after the prefill's: output - 1 steps, nothing drafted or accepted
    assert np.diff(lists.offsets).tolist() == [0, 1, 16]
    assert not lists.draft_tokens.any() and not lists.accepted_tokens.any()


def test_an_unnamed_model_that_never_accepted_is_the_baseline_too(tmp_path):
    p = answers(tmp_path / "a.jsonl", "some-model", [(1, "qa", [1, 1, 1])])
    assert parse_acceptance(f"specbench:{p}").speculation() is False
    # ... unless the user says it drafted
    given = parse_acceptance(f"specbench:{p},k=2")
    assert given.k == 2 and given.speculation() and given.method is None


def test_a_vanilla_file_refuses_a_phantom_draft(vanilla):
    with pytest.raises(SpecschedError, match=r"did not draft .* leave k out \(or k=0\) instead "
                                             r"of k=1"):
        parse_acceptance(f"specbench:{vanilla},k=1")


def test_vanilla_trace_metadata_and_reader_say_speculation_is_off(vanilla, tmp_path):
    csv = tmp_path / "a.csv"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                   "2023-11-16 18:15:46.0000000,100,30\n2023-11-16 18:15:47.0000000,80,12\n")
    out = tmp_path / "v.parquet"
    convert("azure", csv, out, acceptance=f"specbench:{vanilla}")
    meta = json.loads(pq.read_schema(out).metadata[b"specsched.acceptance"])
    assert meta["speculation"] is False
    ta = read_trace_arrays(out)
    assert ta.acceptance["speculation"] is False
    assert not ta.draft_tokens.any() and np.diff(ta.step_offsets).tolist() == [29, 11]
    # filled on reading, the same
    ta2 = read_trace_arrays(lengths_trace(tmp_path / "l.parquet", [5, 9]),
                            acceptance=f"specbench:{vanilla}")
    assert ta2.acceptance["speculation"] is False and not ta2.draft_tokens.any()


def test_speculating_traces_read_as_speculating(tmp_path):
    ta = read_trace_arrays(lengths_trace(tmp_path / "l.parquet", [5, 9]),
                           acceptance="geometric:k=3,alpha=0.5")
    assert ta.acceptance["speculation"] is True
    assert "speculation" not in parse_acceptance("geometric:k=3,alpha=0.5").metadata(0)
    assert parse_acceptance("geometric:k=0,alpha=0.5").metadata(0)["speculation"] is False


def test_data_beyond_k_says_which_k_to_add(tmp_path):
    medusa = answers(tmp_path / "m.jsonl", "vicuna-medusa", [(1, "qa", [1, 9, 3])])
    with pytest.raises(SpecschedError, match=r"cannot tell how .* drafted: add k=N to the spec.*"
                                             r"accept up to 8"):
        parse_acceptance(f"specbench:{medusa}")
    with pytest.raises(SpecschedError, match=r"accept 8 drafts in one step, more than k=4: set "
                                             r"k=8 in the spec"):
        parse_acceptance(f"specbench:{medusa},k=4")
    eagle = answers(tmp_path / "e.jsonl", "vicuna-eagle-x", [(1, "qa", [1, 8, 3])])
    with pytest.raises(SpecschedError, match=r"more than k=5 \(EAGLE's own\): add k=7 to the spec"):
        parse_acceptance(f"specbench:{eagle}")
    assert parse_acceptance(f"specbench:{eagle},k=7").k == 7


def test_method_rule_reflects_a_user_given_k(tmp_path):
    eagle = answers(tmp_path / "e.jsonl", "vicuna-eagle-x", [(1, "qa", [1, 6, 3])])
    own = parse_acceptance(f"specbench:{eagle}").params()["method_rule"]
    assert parse_acceptance(f"specbench:{eagle},k=5").params()["method_rule"] == own
    rule = parse_acceptance(f"specbench:{eagle},k=7").params()["method_rule"]
    assert rule == own + "; k=7 given (the method's own k is 5)"
    other = answers(tmp_path / "o.jsonl", "lookahead", [(1, "qa", [1, 4])])
    assert parse_acceptance(f"specbench:{other},k=6").params()["method_rule"] == "k=6 given"


def test_repeated_question_ids_are_reported_and_used_once(tmp_path):
    # question 1 appears twice (an appended rerun); its second answer must not be used
    p = answers(tmp_path / "d.jsonl", "vicuna-eagle-x",
                [(1, "qa", [2, 2]), (2, "qa", [3, 3]), (1, "qa", [6, 6, 6]), (2, "qa", [4])])
    model = parse_acceptance(f"specbench:{p}")
    assert [s.tolist() for s in model.data.sequences] == [[2, 2], [3, 3]]
    assert model.params()["repeated_answers_dropped"] == 2
    assert model.params()["source_steps"] == 4
    (w,) = model.warnings()
    assert w.startswith(f"{p}: 2 answers repeat a question_id seen before")
    ta = read_trace_arrays(lengths_trace(tmp_path / "l.parquet", [5, 9]),
                           acceptance=f"specbench:{p}")
    assert ta.warnings == (w,)
    assert int(ta.accepted_tokens.max()) <= 2  # the dropped answer accepted 5 per step
    csv = tmp_path / "a.csv"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0000000,100,30\n")
    assert convert("azure", csv, tmp_path / "c.parquet", acceptance=f"specbench:{p}").warnings == (w,)
    # a file without repeats records no such key (earlier traces read the same)
    once = answers(tmp_path / "o.jsonl", "vicuna-eagle-x", [(1, "qa", [2, 2])])
    assert "repeated_answers_dropped" not in parse_acceptance(f"specbench:{once}").params()
    assert parse_acceptance(f"specbench:{once}").warnings() == []


def test_vanilla_trace_simulates_at_width_one_without_draft_passes(vanilla, tmp_path):
    from simulator.config import SimConfig
    from specsched.setup import simulate_to

    ta = read_trace_arrays(lengths_trace(tmp_path / "l.parquet", [5, 9, 30, 2]),
                           acceptance=f"specbench:{vanilla}")
    res = simulate_to(ta, SimConfig.load(None, {"backend.name": "roofline"}), None)
    kind = res.steps["kind"].cast(pa.string()).to_pylist()
    verify = [i for i, k in enumerate(kind) if k == "verify"]
    assert "draft" not in kind and len(verify) == res.summary["decode_iterations"] > 0
    assert set(res.steps["width"].to_numpy()[verify]) == {1}
    assert res.summary["width_pad_frac"] == 0 and res.summary["accept_len_mean"] == 1.0


def test_repeated_answers_warning_reaches_the_run_summary(tmp_path):
    from simulator.config import SimConfig
    from specsched.setup import simulate_to

    p = answers(tmp_path / "d.jsonl", "vicuna-eagle-x", [(1, "qa", [2, 2]), (1, "qa", [3])])
    ta = read_trace_arrays(lengths_trace(tmp_path / "l.parquet", [5, 9]),
                           acceptance=f"specbench:{p}")
    res = simulate_to(ta, SimConfig.load(None, {"backend.name": "roofline"}), None)
    assert [w for w in res.summary["warnings"] if "1 answer repeats a question_id" in w]


def test_a_line_that_is_not_json_is_refused_with_its_row(tmp_path):
    # rows count from 0 and blank lines count: the broken line is row 2
    p = answers(tmp_path / "d.jsonl", "vicuna-eagle-x", [(1, "qa", [2, 2])])
    p.write_text(p.read_text() + "\n{not json}\n")
    with pytest.raises(SpecschedError, match="not valid JSON") as err:
        parse_acceptance(f"specbench:{p}")
    assert err.value.problem.row == 2
