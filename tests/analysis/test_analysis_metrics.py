"""Metrics on hand-built tables; the right answers are worked out by hand in the comments."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.metrics import (goodput, inter_token_gaps, iteration_stats, quantile,
                              request_latencies, summarize, verify_stats)
from analysis.results import from_tables, load_run
from traces.errors import SpecschedError


def test_request_latencies_by_hand(hand_run):
    lat = request_latencies(hand_run)
    # TTFT = first - arrival: 0.5-0, 1.2-1, 3.0-2
    np.testing.assert_allclose(lat["ttft"], [0.5, 0.2, 1.0])
    # E2E = finish - arrival
    np.testing.assert_allclose(lat["e2e"], [2.5, 2.2, 1.0])
    # queue = admit - arrival
    np.testing.assert_allclose(lat["queue"], [0.1, 0.0, 0.5])
    # TPOT = (finish - first)/(out - 1): 2.0/4, 2.0/2, undefined for a one-token request
    np.testing.assert_allclose(lat["tpot"][:2], [0.5, 1.0])
    assert math.isnan(lat["tpot"][2])


def test_inter_token_gaps_by_hand(hand_run):
    step, token = inter_token_gaps(hand_run)
    # request 0: first token 0.5, deliveries at 1.5 (3 tokens) and 2.5 (1 token): steps 1.0, 1.0
    # request 1: first token 1.2, delivery at 3.2 (2 tokens): step 2.0
    np.testing.assert_allclose(np.sort(step), [1.0, 1.0, 2.0])
    # per token: 1.0/3 three times, 1.0 once, 2.0/2 twice
    np.testing.assert_allclose(np.sort(token), sorted([1 / 3] * 3 + [1.0] + [1.0, 1.0]))


def test_per_token_gaps_average_to_tpot(hand_run):
    # the per-token convention makes each request's mean gap equal its TPOT
    _, token = inter_token_gaps(hand_run)
    lat = request_latencies(hand_run)
    # request 0 contributes 4 gaps (1/3,1/3,1/3,1), request 1 two (1,1)
    assert np.mean(sorted(token)[:3] + [1.0]) == pytest.approx(lat["tpot"][0])


def test_goodput_global_and_per_request(hand_run, make_run):
    g = goodput(hand_run, ttft_s=0.6, tpot_s=0.6)
    # r0: ttft .5, tpot .5 -> good; r1: tpot 1.0 > .6 -> bad; r2: ttft 1.0 > .6 -> bad
    assert g["good_requests"] == 1
    assert g["fraction"] == pytest.approx(1 / 3)
    assert g["req_s"] == pytest.approx(1 / 3.2)  # duration = 3.2 - 0.0
    assert goodput(hand_run) is None  # no threshold anywhere
    # a per-request TPOT SLO of 1.5 s on r1 overrides the global 0.6 s
    req = hand_run.requests
    idx = req.column_names.index("tpot_slo_s")
    req = req.set_column(idx, "tpot_slo_s", pa.array([None, 1.5, None], pa.float64()))
    run = from_tables("x", req, hand_run.steps, hand_run.request_steps)
    assert goodput(run, ttft_s=0.6, tpot_s=0.6)["good_requests"] == 2
    # per-request columns alone are enough
    assert goodput(run)["good_requests"] == 3


def test_verify_stats_by_hand(hand_run):
    v = verify_stats(hand_run)
    # verify rows: (tokens, padded, graph_pad, committed, bs) =
    # (8,2,0,4,2), (2,0,2,2,1), (3,0,0,1,1), (3,0,0,2,1); tokens hold the width padding
    # (the first launch: 2 requests at width 4, 2 of its 8 rows padding), graph rows come on top
    assert v["launches"] == 4
    assert v["slots"] == 8 + (2 + 2) + 3 + 3
    assert v["real_rows"] == 16 - 2
    assert v["committed_tokens"] == 9
    assert v["verify_efficiency"] == pytest.approx(9 / 18)
    assert v["padding_waste"] == pytest.approx(4 / 18)
    assert v["width_pad_frac"] == pytest.approx(2 / 18)
    assert v["graph_pad_frac"] == pytest.approx(2 / 18)
    assert v["accept_len_mean"] == pytest.approx(9 / 5)
    assert v["launches_by_kind"] == {"prefill": {"graph": 0, "eager": 1},
                                     "draft": {"graph": 1, "eager": 0},
                                     "verify": {"graph": 3, "eager": 1}}


def test_plain_string_kind_gives_same_stats(hand_run):
    steps = hand_run.steps
    i = steps.column_names.index("kind")
    plain = steps.set_column(i, "kind", steps["kind"].cast(pa.string()))
    run = from_tables("plain", hand_run.requests, plain, hand_run.request_steps)
    assert verify_stats(run) == verify_stats(hand_run)
    assert iteration_stats(run) == iteration_stats(hand_run)


def test_iteration_stats_by_hand(hand_run):
    it = iteration_stats(hand_run)
    # decode iterations 1, 2, 3 (iteration 0 is a prefill only)
    assert it["iterations"] == 3
    assert it["verify_launches_per_iter"] == pytest.approx(4 / 3)
    # all launches in those iterations: 2 (draft+verify), 2, 1
    assert it["launches_per_iter"] == pytest.approx(5 / 3)
    assert it["mixed_iter_frac"] == pytest.approx(2 / 3)
    assert it["iter_distinct_widths"] == {1: 1, 2: 2}


def test_summarize_by_hand(hand_run):
    s = summarize(hand_run, ttft_s=0.6, tpot_s=0.6)
    assert s["duration_s"] == pytest.approx(3.2)
    assert s["throughput_tok_s"] == pytest.approx(9 / 3.2)
    assert s["throughput_req_s"] == pytest.approx(3 / 3.2)
    assert s["ttft_s"]["p50"] == pytest.approx(0.5)
    # p90 of [0.2, 0.5, 1.0]: rank 1.8 -> 0.5 + 0.8*(1.0-0.5)
    assert s["ttft_s"]["p90"] == pytest.approx(0.9)
    assert s["tpot_s"]["n"] == 2
    assert s["acceptance_rate"] == pytest.approx(3 / 8)
    assert s["retractions"] == 1 and s["truncated_drafts"] == 1
    assert s["goodput"]["fraction"] == pytest.approx(1 / 3)


def test_unfinished_requests_count_as_infinite(make_run):
    run = make_run([dict(arrival_s=0, admit_s=0, first_token_s=1, finish_s=2, output_tokens=3),
                    dict(arrival_s=0, admit_s=math.nan, first_token_s=math.nan,
                         finish_s=math.nan, output_tokens=3)], [dict()])
    lat = request_latencies(run)
    assert math.isinf(lat["ttft"][1]) and math.isinf(lat["e2e"][1])
    s = summarize(run, ttft_s=10, tpot_s=10)
    assert s["finished"] == 1
    assert s["ttft_s"]["p99"] is None  # +inf is not JSON: reported as null
    assert s["goodput"]["good_requests"] == 1


def test_quantile_matches_numpy():
    v = np.array([3.0, 1.0, 7.0, 2.0, 9.0])
    for q in (0, 0.1, 0.5, 0.9, 0.99, 1):
        assert quantile(np.sort(v), q) == pytest.approx(np.percentile(v, 100 * q))
    assert math.isinf(quantile(np.array([1.0, math.inf]), 0.99))
    assert quantile(np.array([1.0, math.inf]), 0.0) == 1.0


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.floats(0.001, 5), st.integers(1, 8)), min_size=1, max_size=20),
       st.floats(0, 10))
def test_gap_conservation(make_run, deliveries, first):
    """Per step and per token, a request's gaps add up to finish - first token; the per-token
    mean is the request's TPOT."""
    times = first + np.cumsum([g for g, _ in deliveries])
    tokens = [k for _, k in deliveries]
    out = 1 + sum(tokens)
    run = make_run([dict(arrival_s=0.0, admit_s=0.0, first_token_s=first, finish_s=times[-1],
                          output_tokens=out, steps=len(tokens))], [dict()],
                    [(0, float(t), k) for t, k in zip(times, tokens)])
    step, token = inter_token_gaps(run)
    assert len(step) == len(deliveries) and len(token) == out - 1
    assert step.sum() == pytest.approx(times[-1] - first)
    assert token.sum() == pytest.approx(times[-1] - first)
    assert token.mean() == pytest.approx(request_latencies(run)["tpot"][0])


def test_load_run_errors(tmp_path):
    with pytest.raises(SpecschedError, match="no such results folder"):
        load_run(tmp_path / "nope")
    (tmp_path / "f").write_text("x")
    with pytest.raises(SpecschedError, match="is not a folder"):
        load_run(tmp_path / "f")
    d = tmp_path / "run"
    d.mkdir()
    with pytest.raises(SpecschedError, match="requests.parquet is missing"):
        load_run(d)


def test_missing_column_is_named(hand_run, tmp_path):
    import pyarrow.parquet as pq

    d = tmp_path / "run"
    d.mkdir()
    pq.write_table(hand_run.requests.drop(["first_token_s"]), d / "requests.parquet")
    pq.write_table(hand_run.steps, d / "steps.parquet")
    with pytest.raises(SpecschedError) as e:
        load_run(d)
    assert "requests.parquet" in str(e.value) and "first_token_s" in str(e.value)
    pq.write_table(hand_run.requests, d / "requests.parquet")
    (d / "steps.parquet").write_text("not parquet")
    with pytest.raises(SpecschedError, match="cannot read as parquet"):
        load_run(d)


def test_breakdown_by_category(hand_run):
    from analysis.metrics import breakdown

    req = hand_run.requests
    i = req.column_names.index("category")
    req = req.set_column(i, "category", pa.array(["chat", "code", "chat"]))
    run = from_tables("x", req, hand_run.steps, hand_run.request_steps)
    rows = breakdown(run, "category", ttft_s=0.6, tpot_s=0.6)
    assert [r["category"] for r in rows] == ["chat", "code"]  # most requests first
    chat, code = rows
    assert chat["requests"] == 2 and code["requests"] == 1
    # chat = r0 (ttft .5, good) and r2 (ttft 1.0, not good); code = r1 (tpot 1.0, not good)
    assert chat["goodput_frac"] == pytest.approx(0.5) and code["goodput_frac"] == 0.0
    assert chat["ttft_p50_s"] == pytest.approx(0.75)
    # acceptance per request: r0 (2 accepted + 2 steps) / 2 steps; r2 has no steps
    assert chat["accept_len_mean"] == pytest.approx(2.0)
    assert code["accept_len_mean"] == pytest.approx(2.0)  # (1 + 1) / 1
    assert breakdown(hand_run, "tenant") is None  # all null
