"""Every class of bad trace is refused, naming the file, the 0-based row and the column."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pytest

from traces import TraceValidationError, iter_trace_batches, read_trace_arrays, validate_trace
from traces.errors import SpecschedError

from tracekit import make_table, write_raw


def refused(path, *, row=None, column=None, text=None) -> TraceValidationError:
    """Assert that every reader refuses ``path`` with a problem at (row, column)."""
    errors = []
    for fn in (validate_trace, read_trace_arrays):
        with pytest.raises(TraceValidationError) as info:
            fn(path)
        errors.append(info.value)
    err = errors[0]
    msg = str(err)
    assert str(path) in msg
    assert any((row is None or p.row == row) and (column is None or p.column == column)
               and (text is None or text in p.message) for p in err.problems), msg
    if row is not None:
        assert f"row {row}" in msg
    if column is not None:
        assert f"column '{column}'" in msg
    return err


def set_col(t: pa.Table, name: str, arr) -> pa.Table:
    return t.set_column(t.schema.get_field_index(name), name, arr)


def test_valid_file_passes(tmp_path):
    p = write_raw(make_table(30), tmp_path / "ok.parquet")
    rep = validate_trace(p)
    assert rep.rows == 30 and rep.has_lists and rep.sorted


def test_missing_required_column(tmp_path):
    p = write_raw(make_table(5).drop_columns(["prompt_tokens"]), tmp_path / "m.parquet")
    refused(p, column="prompt_tokens", text="missing required column")


def test_unknown_column(tmp_path):
    t = make_table(5).append_column("colour", pa.array(["red"] * 5))
    refused(write_raw(t, tmp_path / "u.parquet"), column="colour", text="unknown column")


def test_only_one_list_column(tmp_path):
    t = make_table(5).drop_columns(["accepted_tokens"])
    refused(write_raw(t, tmp_path / "l.parquet"), column="accepted_tokens", text="both")


@pytest.mark.parametrize("name,arr", [
    ("arrival_s", pa.array(["0.5"] * 5)),
    ("prompt_tokens", pa.array([1.5] * 5)),
    ("request_id", pa.array(list(range(5)))),
    ("draft_tokens", pa.array([[1.0]] * 5)),
])
def test_wrong_types(tmp_path, name, arr):
    t = set_col(make_table(5), name, arr)
    refused(write_raw(t, tmp_path / "w.parquet"), column=name, text="wrong type")


def test_compatible_types_are_accepted(tmp_path):
    t = make_table(5)
    t = set_col(t, "prompt_tokens", t["prompt_tokens"].cast(pa.int64()))
    t = set_col(t, "arrival_s", t["arrival_s"].cast(pa.float32()))
    t = set_col(t, "draft_tokens", t["draft_tokens"].cast(pa.large_list(pa.int64())))
    ta = read_trace_arrays(write_raw(t, tmp_path / "c.parquet"))
    assert ta.prompt_tokens.dtype == np.int32 and ta.draft_tokens.dtype == np.int16


@pytest.mark.parametrize("name", ["request_id", "arrival_s", "prompt_tokens", "output_tokens"])
def test_nulls_in_required_columns(tmp_path, name):
    t = make_table(5)
    vals = t[name].to_pylist()
    vals[3] = None
    t = set_col(t, name, pa.array(vals, t.schema.field(name).type))
    refused(write_raw(t, tmp_path / "n.parquet"), row=3, column=name, text="null")


@pytest.mark.parametrize("value,text", [(-1.0, "negative"), (float("nan"), "NaN"),
                                        (float("inf"), "inf")])
def test_bad_arrival_times(tmp_path, value, text):
    t = make_table(5)
    vals = t["arrival_s"].to_pylist()
    vals[2] = value
    t = set_col(t, "arrival_s", pa.array(vals, pa.float64()))
    refused(write_raw(t, tmp_path / "a.parquet"), row=2, column="arrival_s", text=text)


def test_duplicate_request_ids(tmp_path):
    t = make_table(6)
    ids = t["request_id"].to_pylist()
    ids[4] = ids[1]
    t = set_col(t, "request_id", pa.array(ids))
    err = refused(write_raw(t, tmp_path / "d.parquet"), row=4, column="request_id",
                  text="duplicate request id")
    assert "first at row 1" in str(err)


@pytest.mark.parametrize("name", ["prompt_tokens", "output_tokens"])
@pytest.mark.parametrize("value", [0, -3])
def test_tokens_below_one(tmp_path, name, value):
    t = make_table(5, lists=False)
    vals = t[name].to_pylist()
    vals[1] = value
    t = set_col(t, name, pa.array(vals, pa.int32()))
    p = write_raw(t, tmp_path / "t.parquet")
    with pytest.raises(TraceValidationError) as info:
        validate_trace(p)
    assert any(pr.row == 1 and pr.column == name for pr in info.value.problems)


def _lists(t, drafts, accepts, outputs=None):
    t = set_col(t, "draft_tokens", pa.array(drafts, pa.list_(pa.int16())))
    t = set_col(t, "accepted_tokens", pa.array(accepts, pa.list_(pa.int16())))
    if outputs is not None:
        t = set_col(t, "output_tokens", pa.array(outputs, pa.int32()))
    return t


def test_lists_of_different_lengths(tmp_path):
    t = _lists(make_table(3), [[2, 2], [2], []], [[1, 1], [1, 0], []], [5, 3, 1])
    refused(write_raw(t, tmp_path / "l.parquet"), row=1, column="accepted_tokens",
            text="same length")


def test_accepted_more_than_drafted(tmp_path):
    t = _lists(make_table(3), [[2, 2], [2, 1], []], [[1, 1], [1, 2], []], [5, 6, 1])
    refused(write_raw(t, tmp_path / "a.parquet"), row=1, column="accepted_tokens",
            text="step 1: accepted 2 > drafted 1")


def test_negative_drafts(tmp_path):
    t = _lists(make_table(3), [[2, 2], [2, -1], []], [[1, 1], [0, 0], []], [5, 3, 1])
    refused(write_raw(t, tmp_path / "n.parquet"), row=1, column="draft_tokens",
            text="negative draft count")


def test_negative_accepted(tmp_path):
    t = _lists(make_table(3), [[2, 2], [2, 2], []], [[1, 1], [0, -1], []], [5, 2, 1])
    refused(write_raw(t, tmp_path / "n.parquet"), row=1, column="accepted_tokens",
            text="negative accepted")


def test_committed_tokens_fall_short(tmp_path):
    # row 0: 1 + (1+1) + (1+1) = 5 committed, output 6
    t = _lists(make_table(3), [[2, 2], [2], []], [[1, 1], [1], []], [6, 3, 1])
    refused(write_raw(t, tmp_path / "s.parquet"), row=0, column="accepted_tokens",
            text="fall short of output_tokens 6")


def test_no_steps_for_a_longer_output_falls_short(tmp_path):
    t = _lists(make_table(3), [[2, 2], [2], []], [[1, 1], [1], []], [5, 3, 2])
    refused(write_raw(t, tmp_path / "s.parquet"), row=2, column="accepted_tokens",
            text="fall short")


def test_committed_tokens_overshoot_by_more_than_last_step(tmp_path):
    # row 1: 1 + 2 + 3 = 6 committed; output 3 is reached before the last step
    t = _lists(make_table(3), [[2, 2], [2, 2], []], [[1, 1], [1, 2], []], [5, 3, 1])
    refused(write_raw(t, tmp_path / "o.parquet"), row=1, column="accepted_tokens",
            text="overshoot")


def test_overshoot_within_last_step_is_fine(tmp_path):
    # 1 + 2 + 3 = 6 committed, output 4: the last step was needed (4 > 1 + 2)
    t = _lists(make_table(3), [[2, 2], [2], []], [[1, 2], [1], []], [4, 3, 1])
    assert validate_trace(write_raw(t, tmp_path / "f.parquet")).rows == 3


def test_null_lists_and_null_elements(tmp_path):
    t = _lists(make_table(3), [[2, 2], None, []], [[1, 1], None, []], [5, 1, 1])
    refused(write_raw(t, tmp_path / "n.parquet"), row=1, column="draft_tokens", text="null list")
    t = _lists(make_table(3), [[2, None], [2], []], [[1, 1], [1], []], [5, 3, 1])
    refused(write_raw(t, tmp_path / "e.parquet"), row=0, column="draft_tokens", text="null inside")


def test_bad_slo(tmp_path):
    t = make_table(4, ttft_slo_s=pa.array([1.0, None, -2.0, float("nan")]))
    err = refused(write_raw(t, tmp_path / "s.parquet"), row=2, column="ttft_slo_s")
    assert any(p.row == 3 for p in err.problems)
    assert not any(p.row == 1 for p in err.problems)


def test_empty_files(tmp_path):
    zero = tmp_path / "zero.parquet"
    zero.write_bytes(b"")
    refused(zero, text="empty file")
    rows0 = write_raw(make_table(3).slice(0, 0), tmp_path / "rows0.parquet")
    refused(rows0, text="no rows")


def test_not_parquet(tmp_path):
    p = tmp_path / "x.parquet"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,1,2\n")
    for fn in (validate_trace, read_trace_arrays):  # one line saying what the file is
        with pytest.raises(SpecschedError) as info:
            fn(p)
        assert str(info.value) == (f"{p}: this is a text file (CSV?), not a parquet trace: convert "
                                   "a request log with `specsched trace convert --from "
                                   "azure|burstgpt|vidur`")


def test_missing_file_and_folder(tmp_path):
    with pytest.raises(SpecschedError, match="no such file"):
        validate_trace(tmp_path / "nope.parquet")
    with pytest.raises(SpecschedError, match="folder"):
        validate_trace(tmp_path)


def test_unsupported_format_version(tmp_path):
    p = write_raw(make_table(3), tmp_path / "v.parquet",
                  metadata={"specsched.format_version": json.dumps("99")})
    refused(p, text="format version '99'")


def test_malformed_position_probs(tmp_path):
    acc = {"kind": "recorded", "position_accept_prob": [0.5, 1.5]}
    p = write_raw(make_table(3), tmp_path / "m.parquet",
                  metadata={"specsched.acceptance": json.dumps(acc)})
    refused(p, text="position_accept_prob")


def test_unsorted_arrivals_are_reported_not_refused(tmp_path):
    t = make_table(5)
    t = set_col(t, "arrival_s", pa.array([3.0, 1.0, 2.0, 0.0, 4.0]))
    rep = validate_trace(write_raw(t, tmp_path / "u.parquet"))
    assert rep.rows_moved == 2   # order [3, 1, 2, 0, 4]: rows 0 and 3 swap
    assert any("not sorted" in n for n in rep.notes)


def test_many_problems_are_counted_and_capped(tmp_path):
    n = 500
    t = make_table(n, lists=False)
    t = set_col(t, "prompt_tokens", pa.array(np.zeros(n, np.int32)))
    with pytest.raises(TraceValidationError) as info:
        validate_trace(write_raw(t, tmp_path / "many.parquet"))
    assert info.value.total == n
    lines = str(info.value).splitlines()
    assert lines[0].endswith("refused, 500 problems:")
    assert [ln.split(":")[0].strip() for ln in lines[1:6]] == [
        f"row {i}, column 'prompt_tokens'" for i in range(5)]
    assert lines[6:] == ["  ... and 495 more in column 'prompt_tokens'"]


def test_each_column_lists_its_first_five_problems_and_a_count(tmp_path):
    n = 400
    t = make_table(n, lists=False)
    t = set_col(t, "prompt_tokens", pa.array(np.zeros(n, np.int32)))
    out = np.full(n, 5, np.int32)
    out[300:] = 0
    t = set_col(t, "output_tokens", pa.array(out))
    with pytest.raises(TraceValidationError) as info:
        validate_trace(write_raw(t, tmp_path / "two.parquet"))
    text = str(info.value)
    assert info.value.total == 500
    # the later column's problems are shown too, though the first one alone passes the cap
    assert "row 300, column 'output_tokens'" in text and "row 304, column 'output_tokens'" in text
    assert "row 305, column 'output_tokens'" not in text
    assert "  ... and 395 more in column 'prompt_tokens'" in text
    assert "  ... and 95 more in column 'output_tokens'" in text
    assert len(text.splitlines()) == 1 + 2 * (5 + 1)


def test_problems_in_later_row_groups_have_global_row_numbers(tmp_path):
    import pyarrow.parquet as pq
    t = make_table(100, lists=False)
    vals = t["output_tokens"].to_pylist()
    vals[77] = 0
    t = set_col(t, "output_tokens", pa.array(vals, pa.int32()))
    p = tmp_path / "rg.parquet"
    pq.write_table(t, p, row_group_size=10)
    with pytest.raises(TraceValidationError) as info:
        for _ in iter_trace_batches(p, batch_size=10):
            pass
    assert info.value.problems[0].row == 77


# ---- the vectorised checks agree with a plain per-row reading of the rules -------------------

from hypothesis import given, settings
from hypothesis import strategies as st

_step = st.tuples(st.integers(-1, 4), st.integers(-1, 4))
_row = st.tuples(st.lists(_step, max_size=6), st.integers(0, 2), st.integers(1, 30))


def _reference(rows):
    """(row, column, kind) of every list problem, by the rules in docs/traces.md."""
    out = set()
    for i, (steps, extra, output) in enumerate(rows):
        d = [s[0] for s in steps]
        a = [s[1] for s in steps] + [0] * extra          # extra != 0: lists of different lengths
        if len(a) != len(d):
            out.add((i, "accepted_tokens", "length"))
            if any(x < 0 for x in d):
                out.add((i, "draft_tokens", "negative"))
            if any(x < 0 for x in a):
                out.add((i, "accepted_tokens", "negative"))
            continue
        if any(x < 0 for x in d):
            out.add((i, "draft_tokens", "negative"))
        if any(x < 0 for x in a):
            out.add((i, "accepted_tokens", "negative"))
        if any(y > x for x, y in zip(d, a)):
            out.add((i, "accepted_tokens", ">"))
        committed = 1 + sum(x + 1 for x in a)
        if committed < output:
            out.add((i, "accepted_tokens", "short"))
        elif a and committed - (a[-1] + 1) >= output:
            out.add((i, "accepted_tokens", "overshoot"))
    return out


def _kind(message):
    for key, kind in (("same length", "length"), ("negative", "negative"), (" > drafted", ">"),
                      ("fall short", "short"), ("overshoot", "overshoot")):
        if key in message:
            return kind
    return message


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(_row, min_size=1, max_size=12))
def test_list_checks_match_a_plain_reading_of_the_rules(tmp_path_factory, rows):
    n = len(rows)
    t = make_table(n)
    t = _lists(t, [[s[0] for s in r[0]] for r in rows],
               [[s[1] for s in r[0]] + [0] * r[1] for r in rows], [r[2] for r in rows])
    p = write_raw(t, tmp_path_factory.mktemp("h") / "h.parquet")
    expected = _reference(rows)
    if not expected:
        assert validate_trace(p).rows == n
        return
    with pytest.raises(TraceValidationError) as info:
        validate_trace(p)
    got = {(pr.row, pr.column, _kind(pr.message)) for pr in info.value.problems}
    assert got == expected


def test_all_null_columns(tmp_path):
    t = make_table(3)
    t = set_col(t, "draft_tokens", pa.nulls(3))
    t = set_col(t, "accepted_tokens", pa.nulls(3))
    refused(write_raw(t, tmp_path / "n.parquet"), row=2, column="draft_tokens", text="null list")
    ok = make_table(3, tenant=pa.nulls(3))
    assert read_trace_arrays(write_raw(ok, tmp_path / "ok.parquet")).tenant.null_count == 3
