"""The SLO parser and checker."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from analysis.slo import parse_slo
from traces.errors import SpecschedError


def test_parse_full_example():
    slo = parse_slo("ttft_p90<=2s, tpot_p99<=200ms,e2e_p50<=10s,goodput>=0.9")
    assert [(t.metric, t.stat, t.op, t.bound) for t in slo.terms] == [
        ("ttft", "p90", "<=", 2.0), ("tpot", "p99", "<=", 0.2), ("e2e", "p50", "<=", 10.0),
        ("goodput", None, ">=", 0.9)]
    assert slo.ttft_s == 2.0 and slo.tpot_s == 0.2
    assert slo.text == "ttft_p90<=2s,tpot_p99<=200ms,e2e_p50<=10s,goodput>=0.9"


def test_parse_variants():
    slo = parse_slo("itl_p99.9<250ms,step_gap_mean<=1s,queue_max<=30s,goodput>90%")
    assert [(t.metric, t.stat, t.op) for t in slo.terms] == [
        ("itl", "p99.9", "<"), ("step_gap", "mean", "<="), ("queue", "max", "<="),
        ("goodput", None, ">")]
    assert slo.terms[0].percentile == 99.9 and slo.terms[3].bound == pytest.approx(0.9)
    assert slo.needs_gaps


def test_goodput_thresholds():
    # the loosest percentile bound of a metric is its per-request threshold
    assert parse_slo("ttft_p50<=1s,ttft_p99<=5s").ttft_s == 5.0
    # a bare term sets it explicitly and is not itself a constraint
    slo = parse_slo("ttft<=3s,tpot<=100ms,goodput>=0.8")
    assert slo.ttft_s == 3.0 and slo.tpot_s == pytest.approx(0.1)
    assert [t.metric for t in slo.constraints] == ["goodput"]


@pytest.mark.parametrize("text, fragment", [
    ("", "empty SLO"),
    ("ttft_p90<=2", "'ttft_p90<=2': give a unit"),
    ("ttft_p90<=2h", "unknown unit 'h'"),
    ("latency_p90<=2s", "unknown metric 'latency'"),
    ("ttft_p90>=2s", "upper bound"),
    ("goodput<=0.9", "lower bound"),
    ("goodput>=1.5", "between 0 and 1"),
    ("goodput>=0.9s", "fraction"),
    ("ttft_p0<=1s", "percentile must be in"),
    ("ttft_p101<=1s", "percentile must be in"),
    ("ttft_p90<=0s", "positive time"),
    ("ttft_p90<=2s,,tpot_p99<=1s", "empty term"),
    ("ttft_p90<=2s,ttft_p90<=3s", "given twice"),
    ("ttft_p90=2s", "use <= or <"),
    ("e2e<=2s", "name a statistic"),
    ("ttft<=2s", "no constraint"),
    (" ttft_p90 <= 2 s ", None),  # spaces are ignored: valid
    ("goodput_p90>=0.5", "no statistic"),
    ("tpot_p99<=abc", "expected METRIC_STAT"),
])
def test_parse_errors_name_option_and_part(text, fragment):
    if fragment is None:
        parse_slo(text)
        return
    with pytest.raises(SpecschedError) as e:
        parse_slo(text, option="--slo")
    msg = str(e.value)
    assert msg.startswith("--slo: ") and fragment in msg


@given(st.sampled_from(["ttft", "tpot", "e2e", "queue", "itl", "step_gap"]),
       st.sampled_from(["p50", "p90", "p99", "p99.9", "mean", "max"]),
       st.floats(1e-3, 1e4, allow_nan=False), st.sampled_from(["s", "ms"]))
def test_roundtrip(metric, stat, value, unit):
    text = f"{metric}_{stat}<={value!r}{unit}"
    slo = parse_slo(text)
    t = slo.terms[0]
    assert t.bound == pytest.approx(value / 1000 if unit == "ms" else value)
    assert parse_slo(slo.text).terms[0].bound == pytest.approx(t.bound, rel=1e-5)


def test_check_by_hand(hand_run):
    # TTFT [0.5, 0.2, 1.0]: p90 = 0.9; TPOT [0.5, 1.0] (one-token request left out): p50 = 0.75
    slo = parse_slo("ttft_p90<=1s,tpot_p50<=700ms,goodput>=0.3")
    c = slo.check(hand_run)
    v = {r.term.text: r for r in c.terms}
    assert v["ttft_p90<=1s"].value == pytest.approx(0.9) and v["ttft_p90<=1s"].ok
    assert v["ttft_p90<=1s"].slack == pytest.approx(0.1)
    assert v["tpot_p50<=700ms"].value == pytest.approx(0.75) and not v["tpot_p50<=700ms"].ok
    # goodput thresholds ttft 1 s, tpot 0.7 s: r0 good, r1 (tpot 1.0) bad, r2 (ttft 1.0) good
    assert v["goodput>=0.3"].value == pytest.approx(2 / 3) and v["goodput>=0.3"].ok
    assert not c.ok
    assert c.margin == pytest.approx((0.7 - 0.75) / 0.7)
    assert c.failed() == ["tpot_p50<=700ms (got 750ms)"]


def test_check_gaps(hand_run):
    # per-step gaps [1, 1, 2]: p50 = 1; per-token max = 1.0
    assert parse_slo("step_gap_p50<=1s,itl_max<=1s").check(hand_run).ok
    assert not parse_slo("step_gap_max<2s").check(hand_run).ok


def test_check_unfinished_fails_tail(make_run):
    run = make_run([dict(arrival_s=0, admit_s=0, first_token_s=0.1, finish_s=1, output_tokens=2)] * 199
                   + [dict(arrival_s=0, admit_s=math.nan, first_token_s=math.nan,
                           finish_s=math.nan, output_tokens=2)], [dict()])
    c = parse_slo("e2e_p99<=2s,e2e_max<=2s").check(run)
    assert c.terms[0].ok and not c.terms[1].ok and math.isinf(c.terms[1].value)


def test_goodput_without_any_threshold_is_refused(hand_run):
    with pytest.raises(SpecschedError, match="goodput needs TTFT/TPOT thresholds"):
        parse_slo("e2e_p99<=10s,goodput>=0.5").check(hand_run)
