"""Helpers for the analysis tests: hand-built result tables with the contract's columns."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest

from analysis.results import from_tables

_REQ_DEFAULTS = {
    "request_id": None, "replica": 0, "arrival_s": 0.0, "admit_s": 0.0, "first_token_s": 0.0,
    "finish_s": 0.0, "prompt_tokens": 10, "output_tokens": 1, "steps": 0, "drafted_tokens": 0,
    "verified_drafts": 0, "accepted_tokens": 0, "truncated_drafts": 0, "padded_slots": 0,
    "retractions": 0, "max_gap_s": 0.0, "category": None, "tenant": None,
    "ttft_slo_s": None, "tpot_slo_s": None,
}
_REQ_TYPES = {
    "request_id": pa.string(), "replica": pa.int32(), "arrival_s": pa.float64(),
    "admit_s": pa.float64(), "first_token_s": pa.float64(), "finish_s": pa.float64(),
    "prompt_tokens": pa.int32(), "output_tokens": pa.int32(), "steps": pa.int32(),
    "drafted_tokens": pa.int32(), "verified_drafts": pa.int32(), "accepted_tokens": pa.int32(),
    "truncated_drafts": pa.int32(), "padded_slots": pa.int32(), "retractions": pa.int32(),
    "max_gap_s": pa.float64(), "category": pa.string(), "tenant": pa.string(),
    "ttft_slo_s": pa.float64(), "tpot_slo_s": pa.float64(),
}
_STEP_DEFAULTS = {
    "replica": 0, "iteration": 0, "launch": 0, "kind": "verify", "start_s": 0.0,
    "latency_s": 0.01, "bs": 1, "bs_padded": 1, "width": 1, "min_width": 1, "max_width": 1,
    "distinct_widths": 1, "iter_distinct_widths": 1, "tokens": 1, "padded_slots": 0,
    "graph_pad_slots": 0, "graph": True, "passes": 0, "kv_mean": 100.0, "kv_max": 100,
    "committed_tokens": 1, "violations": 0, "out_of_grid": False,
}
_STEP_TYPES = {
    "replica": pa.int32(), "iteration": pa.int64(), "launch": pa.int16(), "kind": pa.string(),
    "start_s": pa.float64(), "latency_s": pa.float64(), "bs": pa.int32(),
    "bs_padded": pa.int32(), "width": pa.int16(), "min_width": pa.int16(),
    "max_width": pa.int16(), "distinct_widths": pa.int16(), "iter_distinct_widths": pa.int16(),
    "tokens": pa.int32(), "padded_slots": pa.int32(), "graph_pad_slots": pa.int32(),
    "graph": pa.bool_(), "passes": pa.int16(), "kv_mean": pa.float64(), "kv_max": pa.int32(),
    "committed_tokens": pa.int32(), "violations": pa.int32(), "out_of_grid": pa.bool_(),
}


def table(rows, defaults, types):
    cols = {}
    for name, typ in types.items():
        vals = []
        for i, r in enumerate(rows):
            v = r.get(name, defaults[name])
            if name == "request_id" and v is None:
                v = f"r{i}"
            if isinstance(v, float) and math.isnan(v):
                v = None
            vals.append(v)
        cols[name] = pa.array(vals, type=typ)
    return pa.table(cols)


def build_run(requests, steps, request_steps=None, name="run", summary=None, dict_kind=True):
    req = table(requests, _REQ_DEFAULTS, _REQ_TYPES)
    st = table(steps, _STEP_DEFAULTS, _STEP_TYPES)
    if dict_kind:  # the engine writes kind dictionary-encoded
        i = st.column_names.index("kind")
        st = st.set_column(i, "kind", st["kind"].dictionary_encode())
    rs = None
    if request_steps is not None:
        rs = pa.table({"request": pa.array([r[0] for r in request_steps], pa.int32()),
                       "time_s": pa.array([r[1] for r in request_steps], pa.float64()),
                       "tokens": pa.array([r[2] for r in request_steps], pa.int16())})
    return from_tables(name, req, st, rs, summary or {})


@pytest.fixture
def make_run():
    return build_run


@pytest.fixture
def hand_run():
    """Three requests and five forward passes whose metrics are worked out in test_analysis_metrics."""
    requests = [
        dict(arrival_s=0.0, admit_s=0.1, first_token_s=0.5, finish_s=2.5, output_tokens=5,
             steps=2, drafted_tokens=6, verified_drafts=6, accepted_tokens=2, max_gap_s=1.0),
        dict(arrival_s=1.0, admit_s=1.0, first_token_s=1.2, finish_s=3.2, output_tokens=3,
             steps=1, drafted_tokens=3, verified_drafts=2, accepted_tokens=1, truncated_drafts=1,
             max_gap_s=2.0, retractions=1),
        dict(arrival_s=2.0, admit_s=2.5, first_token_s=3.0, finish_s=3.0, output_tokens=1),
    ]
    steps = [
        dict(iteration=0, kind="prefill", start_s=0.1, bs=1, bs_padded=1, width=0, tokens=10,
             graph=False, committed_tokens=1),
        dict(iteration=1, kind="draft", start_s=0.6, bs=2, bs_padded=2, passes=3, graph=True,
             committed_tokens=0, tokens=2),
        dict(iteration=1, kind="verify", start_s=0.9, bs=2, bs_padded=2, width=4,
             distinct_widths=2, iter_distinct_widths=2, tokens=8, padded_slots=2,
             graph_pad_slots=0, committed_tokens=4),
        dict(iteration=2, launch=0, kind="verify", start_s=2.0, bs=1, bs_padded=2, width=2,
             iter_distinct_widths=2, tokens=2, graph_pad_slots=2, committed_tokens=2),
        dict(iteration=2, launch=1, kind="verify", start_s=2.1, bs=1, bs_padded=1, width=3,
             iter_distinct_widths=2, tokens=3, graph=False, committed_tokens=1),
        dict(iteration=3, kind="verify", start_s=2.8, bs=1, bs_padded=1, width=3, tokens=3,
             committed_tokens=2),
    ]
    request_steps = [(0, 1.5, 3), (1, 3.2, 2), (0, 2.5, 1)]  # deliberately not sorted
    return build_run(requests, steps, request_steps, name="hand")
