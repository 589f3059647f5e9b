"""Requests longer than the model's context: refused by default, dropped or truncated on request."""

from __future__ import annotations

import pytest

from simulator.config import SimConfig
from specsched.setup import simulate_to
from tests.simulator.helpers import make_trace
from traces.context import fit_context
from traces.errors import SpecschedError


def _trace():
    # Llama-3.1-8B's context is 131,072 tokens: request 1's prompt alone reaches it, request 2's
    # prompt + output exceeds it by one token; requests 0 and 3 fit
    steps = [[(3, 3)] * 2] * 4
    return make_trace([0.0, 0.1, 0.2, 0.3], [100, 131_072, 131_000, 50], [9, 9, 73, 9], steps)


def test_refused_by_default_naming_the_first_request():
    with pytest.raises(SpecschedError, match=r"2 request\(s\) exceed .* 131072 .*'r1' \(row 1"):
        fit_context(_trace(), 131_072)


def test_drop_keeps_the_others_with_their_step_lists():
    trace, rep = fit_context(_trace(), 131_072, "drop")
    assert rep["dropped"] == 2
    assert list(trace.request_id.to_pylist()) == ["r0", "r3"]
    assert list(trace.step_offsets) == [0, 2, 4] and len(trace.draft_tokens) == 4


def test_truncate_as_auto_truncate():
    trace, rep = fit_context(_trace(), 131_072, "truncate")
    assert rep["truncated"] == 2
    # prompt cut to 131,071, leaving one token; prompt 131,000 keeps 72 of its 73 output tokens
    assert list(trace.prompt_tokens) == [100, 131_071, 131_000, 50]
    assert list(trace.output_tokens) == [9, 1, 72, 9]


def test_simulate_counts_dropped_requests_in_the_summary(tmp_path):
    cfg = SimConfig.load(None, {"backend.name": "roofline", "engine.context_overflow": "drop",
                                "engine.kv_capacity_tokens": 400_000})
    res = simulate_to(_trace(), cfg, tmp_path / "run")
    assert res.summary["requests"] == 2 and res.summary["context"]["dropped"] == 2
    assert any("were dropped" in w for w in res.summary["warnings"])
    with pytest.raises(SpecschedError, match="exceed the model's context"):
        simulate_to(_trace(), SimConfig.load(None, {"backend.name": "roofline"}), tmp_path / "no")
    assert not (tmp_path / "no").exists()
