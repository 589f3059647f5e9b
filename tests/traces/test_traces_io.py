"""write_trace / read_trace_arrays / iter_trace_batches: the contract of docs/ARCHITECTURE.md."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import traces
from traces import SpecschedError, read_trace_arrays, write_trace
from traces.schema import FORMAT_VERSION, TRACE_SCHEMA

from tracekit import make_table, write_raw


def test_roundtrip_identical_table(tmp_path):
    t = make_table(50, category=pa.array([f"c{i % 3}" for i in range(50)]),
                   ttft_slo_s=pa.array([1.0 if i % 2 else None for i in range(50)], pa.float64()))
    p = tmp_path / "t.parquet"
    write_trace(t, p, metadata={"source": {"format": "test"}})
    back = pq.read_table(p)
    assert back.schema.names == t.schema.names
    assert back.equals(t.cast(back.schema))
    streamed = pa.Table.from_batches(list(traces.iter_trace_batches(p)))
    assert streamed.equals(back)
    md = back.schema.metadata
    assert md[b"specsched.format_version"] == f'"{FORMAT_VERSION}"'.encode()


def test_write_is_independent_of_batching(tmp_path):
    t = make_table(300)
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    write_trace(t, a, metadata={"x": 1}, row_group_rows=64)
    write_trace(t.to_batches(max_chunksize=7), b, metadata={"x": 1}, row_group_rows=64)
    assert a.read_bytes() == b.read_bytes()
    assert pq.ParquetFile(a).metadata.num_row_groups == 5


def test_read_arrays_types_and_offsets(tmp_path):
    t = make_table(40)
    p = tmp_path / "t.parquet"
    write_trace(t, p, metadata={})
    ta = read_trace_arrays(p)
    assert len(ta) == 40
    assert ta.arrival_s.dtype == np.float64 and ta.prompt_tokens.dtype == np.int32
    assert ta.output_tokens.dtype == np.int32 and ta.step_offsets.dtype == np.int64
    assert ta.draft_tokens.dtype == np.int16 and ta.accepted_tokens.dtype == np.int16
    assert ta.step_offsets[0] == 0 and ta.step_offsets[-1] == ta.draft_tokens.size
    for i in range(40):
        lo, hi = ta.step_offsets[i], ta.step_offsets[i + 1]
        assert ta.draft_tokens[lo:hi].tolist() == t["draft_tokens"][i].as_py()
        assert ta.accepted_tokens[lo:hi].tolist() == t["accepted_tokens"][i].as_py()
    assert ta.category is None and ta.tenant is None and ta.ttft_slo_s is None
    assert ta.acceptance["kind"] == "recorded"
    assert len(ta.acceptance["position_accept_prob"]) >= 8
    assert ta.request_id.type == pa.string()


def test_unsorted_arrivals_sorted_stably_and_reported(tmp_path):
    t = make_table(6)
    arr = pa.array([5.0, 1.0, 1.0, 0.5, 7.0, 1.0])
    t = t.set_column(1, "arrival_s", arr)
    p = write_raw(t, tmp_path / "u.parquet")
    ta = read_trace_arrays(p)
    assert ta.arrival_s.tolist() == [0.5, 1.0, 1.0, 1.0, 5.0, 7.0]
    assert ta.request_id.to_pylist() == ["r3", "r1", "r2", "r5", "r0", "r4"]
    for new, old in enumerate([3, 1, 2, 5, 0, 4]):
        lo, hi = ta.step_offsets[new], ta.step_offsets[new + 1]
        assert ta.accepted_tokens[lo:hi].tolist() == t["accepted_tokens"][old].as_py()
    assert any("not sorted" in n and "rows moved" in n for n in ta.notes)
    report = traces.validate_trace(p)
    assert report.rows_moved == 4 and not report.sorted


def test_no_lists_needs_acceptance(tmp_path):
    p = write_raw(make_table(10, lists=False), tmp_path / "n.parquet")
    with pytest.raises(SpecschedError, match="acceptance"):
        read_trace_arrays(p)
    ta = read_trace_arrays(p, acceptance="geometric:k=3,alpha=0.6", seed=4)
    assert ta.acceptance["kind"] == "geometric" and ta.acceptance["seed"] == 4
    assert ta.acceptance["position_accept_prob"] == [0.6] * 8
    assert set(ta.draft_tokens.tolist()) <= {3}
    again = read_trace_arrays(p, acceptance="geometric:k=3,alpha=0.6", seed=4)
    assert np.array_equal(again.accepted_tokens, ta.accepted_tokens)


def test_acceptance_replaces_recorded_lists_with_a_note(tmp_path):
    p = write_raw(make_table(10), tmp_path / "r.parquet")
    ta = read_trace_arrays(p, acceptance="geometric:k=5,alpha=0.5")
    assert set(ta.draft_tokens.tolist()) == {5}
    assert any("replaced" in n for n in ta.notes)


def test_rate_scale(tmp_path):
    p = write_raw(make_table(10), tmp_path / "r.parquet")
    ta = read_trace_arrays(p)
    fast = ta.with_rate_scale(2.0)
    assert np.allclose(fast.arrival_s, ta.arrival_s / 2)
    assert fast.draft_tokens is ta.draft_tokens
    with pytest.raises(SpecschedError):
        ta.with_rate_scale(0)
    with pytest.raises(SpecschedError):
        ta.with_rate_scale(float("nan"))


def test_position_prob_estimated_when_metadata_lacks_it(tmp_path):
    n = 4
    t = make_table(n)
    p = write_raw(t, tmp_path / "e.parquet")
    ta = read_trace_arrays(p)
    d = ta.draft_tokens.astype(int)
    a = ta.accepted_tokens.astype(int)
    probs = ta.acceptance["position_accept_prob"]
    if (d >= 1).any():
        den = np.sum((d >= 1) & (a >= 0))
        assert probs[0] == pytest.approx(np.sum((d >= 1) & (a >= 1)) / den, abs=1e-6)


def test_canonical_schema_has_documented_columns():
    assert TRACE_SCHEMA.names == ["request_id", "arrival_s", "prompt_tokens", "output_tokens",
                                  "draft_tokens", "accepted_tokens", "category", "tenant",
                                  "ttft_slo_s", "tpot_slo_s", "prefix_hashes"]
    assert TRACE_SCHEMA.field("draft_tokens").type == pa.list_(pa.int16())
    assert TRACE_SCHEMA.field("prefix_hashes").type == pa.list_(pa.int64())


from hypothesis import given, settings
from hypothesis import strategies as st


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 120), seed=st.integers(0, 1000), chunk=st.integers(1, 50),
       rg=st.integers(1, 64), lists=st.booleans())
def test_roundtrip_property(tmp_path_factory, n, seed, chunk, rg, lists):
    """Any valid table, in any batching and row-group size: write then read gives it back."""
    t = make_table(n, lists=lists, seed=seed,
                   tenant=pa.array([None if i % 4 == 0 else f"t{i % 3}" for i in range(n)]))
    p = tmp_path_factory.mktemp("rt") / "t.parquet"
    write_trace(t.to_batches(max_chunksize=chunk), p, metadata={"case": seed}, row_group_rows=rg)
    back = pa.Table.from_batches(list(traces.iter_trace_batches(p)))
    assert back.equals(t.cast(back.schema))
    ta = read_trace_arrays(p, acceptance=None if lists else "geometric:k=2,alpha=0.5")
    assert ta.request_id.to_pylist() == t["request_id"].to_pylist()
    assert np.array_equal(ta.output_tokens, t["output_tokens"].to_numpy())
    assert ta.tenant.to_pylist() == t["tenant"].to_pylist()
