"""SGLang's AITER target-verify rules, checked on the CPU (backends.aiter.metadata)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.aiter import metadata as md
from traces.errors import SpecschedError


def build(widths, kv, **kw):
    return md.build_verify_metadata(widths, kv, **kw).to_dict()


def test_ladder_is_sglangs_speculative_default():
    assert md.SPEC_CAPTURE_BS[:8] == tuple(range(1, 9))
    assert md.SPEC_CAPTURE_BS[8:20] == tuple(range(10, 33, 2))
    assert md.SPEC_CAPTURE_BS[20:27] == tuple(range(40, 65, 4))
    assert md.SPEC_CAPTURE_BS[27:] == tuple(range(72, 257, 8))
    assert md.padded_batch_size(9, md.SPEC_CAPTURE_BS) == 10
    assert md.padded_batch_size(10, md.SPEC_CAPTURE_BS) == 10  # bisect_left: exact sizes not padded
    assert md.padded_batch_size(65, md.SPEC_CAPTURE_BS) == 72
    assert md.padded_batch_size(257, md.SPEC_CAPTURE_BS) is None


def test_uniform_batch():
    d = build([4, 4, 4], [100, 200, 300], num_draft_tokens=4)
    assert d["path"] == "unified" and d["graph"] is True and d["padded_bs"] == 3
    assert d["width"] == 4 and d["max_seqlen_q"] == 4
    assert d["qo_indptr"] == [0, 4, 8, 12]
    assert d["kv_indptr"] == [0, 100, 300, 600]          # cumsum(seq_lens), not + width
    assert d["seqused_k"] == [104, 204, 304]             # seq_lens + width
    assert d["max_seqlen_k"] == 131072                   # constant: max blocks x page
    assert d["page_table_blocks"] == [7, 13, 19]
    assert d["kv_indices_needed"] == 600
    assert d["kv_indices_capacity"] == 256 * (8192 * 16 + 4)
    assert d["error"] is None and d["violation"] is None


def test_padded_graph_batch_uses_fill_value():
    kv = list(range(100, 1000, 100))                      # 9 requests -> padded to 10
    d = build([3] * 9, kv, num_draft_tokens=3)
    assert d["graph"] and d["padded_bs"] == 10
    assert d["seq_len_fill_value"] == 3
    assert d["seq_lens"] == kv + [3]
    assert d["qo_indptr"] == list(range(0, 33, 3))
    assert d["seqused_k"][-1] == 3 + 3
    assert d["kv_indices_needed"] == sum(kv) + 3          # seq_lens_sum + (bs - raw_bs) * fill
    assert d["violation"] is None


def test_mla_width_fixed_at_start_up():
    d = build([4, 4], [10, 20], mla=True, num_draft_tokens=4, num_heads=16)
    assert d["path"] == "mla" and d["width"] == 4 and d["max_seqlen_q"] == 4
    assert d["qo_indptr"] == [0, 4, 8]
    assert d["kv_indptr"] == [0, 14, 38]                  # cumsum(seq_lens + num_draft_tokens)
    assert d["seqused_k"] is None
    assert d["kv_last_page_len"] == [1, 1]
    assert d["max_seqlen_k"] == 20                        # max(seq_lens) on the graph path
    assert d["kv_indices_needed"] == 30 + 4 * 2
    assert d["mla"]["kernel_q_len"] == 4 and d["mla"]["kernel_heads"] == 16
    assert d["error"] is None and d["violation"] is None


def test_mla_padded_rows_count_draft_slack():
    d = build([2] * 9, [50] * 9, mla=True, num_draft_tokens=2)
    assert d["padded_bs"] == 10
    assert d["kv_indices_needed"] == 50 * 9 + 2 + 2 * 10
    assert d["kv_indptr"][-1] == d["kv_indices_needed"]


def test_mla_refused_width_and_heads():
    d = build([5, 5], [10, 20], mla=True, num_draft_tokens=5)
    assert d["error"] is not None and "1, 2 or 4" in d["error"]
    d3 = build([3, 3], [10, 20], mla=True, num_draft_tokens=3)
    assert d3["error"] is None and d3["mla"]["kernel_q_len"] == 4
    assert any("padded to 4" in n for n in d3["notes"])
    assert build([2], [5], mla=True, num_draft_tokens=2, num_heads=20)["error"] is not None
    h8 = build([2], [5], mla=True, num_draft_tokens=2, num_heads=8)["mla"]
    assert h8["kernel_heads"] == 16 and "repeated" in h8["heads_mode"]
    assert build([2], [5], mla=True, num_draft_tokens=2, num_heads=12)["mla"]["heads_mode"] == "zero-padded to 16"


def test_mla_width_mismatch_is_a_violation():
    d = build([2, 4], [10, 20], mla=True, num_draft_tokens=4)
    assert d["width"] == 4
    v = d["violation"]
    assert v is not None and v["phantom_rows"] == 2
    # rows 0,1 (request 0) land in request 0; rows 2..5 (request 1) land in request 0 and 1
    assert v["derived_row_request"] == [0, 0, 0, 0, 1, 1]
    assert v["misattributed_rows"] == 2


def test_beyond_the_ladder_runs_eagerly():
    d = build([4] * 300, [2000] * 300, num_draft_tokens=4)
    assert d["graph"] is False and d["padded_bs"] == 300
    assert "larger than the largest captured size 256" in d["eager_reason"]
    assert d["kv_indices_capacity"] is None and d["error"] is None
    assert d["qo_indptr"][-1] == 1200


def test_uncaptured_width_runs_eagerly():
    d = build([3, 3], [10, 10], capture_widths=[2, 4])
    assert d["graph"] is False and "width 3 has no captured graph" in d["eager_reason"]
    assert build([3, 3], [10, 10], capture_bs=[], allow_graph=False)["graph"] is False


def test_mixed_batch_unsafe_derived():
    d = build([4, 4, 2], [100, 200, 300])
    assert d["width"] == 3                                 # 10 // 3
    assert d["qo_indptr"] == [0, 3, 6, 9]
    assert d["seqused_k"] == [103, 203, 303]
    v = d["violation"]
    assert v["real_qo_indptr"] == [0, 4, 8, 10]
    assert v["row_request"] == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    assert v["derived_row_request"] == [0, 0, 0, 1, 1, 1, 2, 2, 2, -1]
    assert v["misattributed_rows"] == 4                    # rows 3, 6, 7 and 9 (past bs x width)
    assert v["misplaced_rows"] == 3                        # rows 4, 5, 8
    assert v["rows_past_layout"] == 1 and v["phantom_rows"] == 0
    assert v["kv_mismatch_requests"] == 3
    assert d["error"] is None                              # SGLang runs it: nothing raises


def test_mixed_batch_exact_counts():
    v = md.misattribution([8, 1], 4)                       # w = 9 // 2 = 4
    assert v.misattributed_rows == 5                       # rows 4..7 -> request 1, row 8 -> none
    assert v.rows_past_layout == 1
    v = md.misattribution([1, 1, 1, 5], 2)
    assert v.derived_row_request == [0, 0, 1, 1, 2, 2, 3, 3]
    assert v.row_request == [0, 1, 2, 3, 3, 3, 3, 3]
    assert v.misattributed_rows == 5


def test_capacity_overflow_is_reported_not_raised():
    d = build([4, 4], [200, 200], capture_bs=[1, 2], max_context=64)
    assert d["graph"] and d["kv_indices_capacity"] == 2 * (64 + 4)
    assert d["error"].startswith("assert_buffer_fits")
    e = build([4, 4, 4], [200, 200, 200], capture_bs=[1, 2], max_context=64)
    assert not e["graph"] and "KV positions" in e["error"]


def test_bad_arguments_raise():
    with pytest.raises(SpecschedError, match="kv_lens"):
        md.build_verify_metadata([4, 4], [10])
    with pytest.raises(SpecschedError, match="widths: item 1"):
        md.build_verify_metadata([4, 0], [10, 10])
    with pytest.raises(SpecschedError, match="at least one"):
        md.build_verify_metadata([], [])
    with pytest.raises(SpecschedError, match="num_draft_tokens"):
        md.build_verify_metadata([4], [10], mla=True)
    with pytest.raises(SpecschedError, match="not an integer"):
        md.build_verify_metadata([4.5], [10])


def test_ragged_metadata_is_exact():
    r = md.build_ragged_metadata([4, 1, 2], [10, 20, 30], padded_bs=4, fill=2)
    assert r["qo_indptr"].tolist() == [0, 4, 5, 7, 7]
    assert r["seqused_k"].tolist() == [14, 21, 32, 2]
    assert r["max_seqlen_q"] == 4


def test_page_table_layout():
    t = md.page_table([0, 5], 3, 6)
    assert t.tolist() == [[0, 1, 2], [5, 0, 1]]


def _brute(widths, width):
    rows = []
    for i, w in enumerate(widths):
        rows += [(i, j) for j in range(w)]
    bs = len(widths)
    mis = mpl = 0
    for r, (req, pos) in enumerate(rows):
        dreq = r // width if r // width < bs else -1
        if dreq != req:
            mis += 1
        elif r % width != pos:
            mpl += 1
    return mis, mpl


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=40))
def test_misattribution_matches_a_row_by_row_count(widths):
    width = sum(widths) // len(widths)
    v = md.misattribution(widths, width)
    if len(set(widths)) == 1:
        assert v is None
        return
    assert v is not None
    assert (v.misattributed_rows, v.misplaced_rows) == _brute(widths, width)
    total = sum(widths)
    assert v.rows_past_layout == total - len(widths) * width
    assert v.rows_past_layout <= v.misattributed_rows <= total


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 8), st.integers(1, 5000)), min_size=1, max_size=300))
def test_metadata_invariants(batch):
    widths = [w for w, _ in batch]
    kv = [k for _, k in batch]
    d = build(widths, kv)
    bs = len(widths)
    assert d["bs"] == bs and d["width"] == sum(widths) // bs
    assert d["padded_bs"] >= bs and len(d["qo_indptr"]) == d["padded_bs"] + 1
    assert np.all(np.diff(d["qo_indptr"]) == d["width"])
    assert d["seq_lens"][:bs] == kv
    assert all(s == d["seq_len_fill_value"] for s in d["seq_lens"][bs:])
    assert d["seqused_k"] == [s + d["width"] for s in d["seq_lens"]]
    assert d["kv_indptr"][-1] == d["kv_indices_needed"] == sum(d["seq_lens"])
    assert d["graph"] == (bs <= 256)
    assert (d["violation"] is None) == (len(set(widths)) == 1)
