"""The capacity search algorithm on outcomes given as plain functions of the scale."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analysis.search import ScaleSearch


def drive(search: ScaleSearch, ok, k: int = 2) -> list[list[float]]:
    rounds = []
    while not search.done:
        scales = search.propose(k)
        if not scales:
            assert search.done
            break
        rounds.append(scales)
        for s in scales:
            search.record(s, ok(s))
    return rounds


@pytest.mark.parametrize("boundary", [0.013, 0.3, 1.0, 1.05, 3.7, 250.0])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_monotone_answer_is_checked_at_both_bounds(boundary, k):
    ok = lambda s: s <= boundary  # noqa: E731
    search = ScaleSearch(rel_tol=0.02, margin=1.1)
    drive(search, ok, k)
    a = search.answer
    assert search.status == "ok"
    # the answer met the SLO and 10% above it missed it -- both were simulated
    tried = {p.scale: p.ok for p in search.probes}
    assert tried[a] is True
    assert tried[search.above] is False
    assert search.above == pytest.approx(a * 1.1)
    # within the tolerance below the true boundary
    assert boundary / 1.02 <= a * (1 + 1e-9) and a <= boundary


def test_two_probes_per_round_need_fewer_rounds():
    ok = lambda s: s <= 5.3  # noqa: E731
    r1 = drive(ScaleSearch(), ok, 1)
    r2 = drive(ScaleSearch(), ok, 2)
    assert len(r2) < len(r1)
    assert all(len(r) <= 2 for r in r2)


def test_simulations_budget_for_a_typical_search():
    # a boundary 4-8x the recorded rate: bracket, narrow to 2%, check: at most 8 rounds of 2
    search = ScaleSearch()
    rounds = drive(search, lambda s: s <= 6.1, 2)
    assert len(rounds) <= 8 and len(search.probes) <= 15


def test_unattainable():
    search = ScaleSearch(min_scale=1e-3)
    drive(search, lambda s: False)
    assert search.status == "unattainable" and search.answer is None
    assert min(p.scale for p in search.probes) <= 1e-3
    assert "cannot be met" in search.notes[0]


def test_unbounded():
    search = ScaleSearch(max_scale=100)
    drive(search, lambda s: True)
    assert search.status == "unbounded" and search.answer == 100


def test_not_monotone_continues_above():
    # met up to 2, missed in (2, 2.1], met again up to 3.3 (e.g. a graph-ladder effect)
    ok = lambda s: s <= 2 or 2.1 < s <= 3.3  # noqa: E731
    search = ScaleSearch(start=1.0, rel_tol=0.02, margin=1.1)
    drive(search, ok, 1)
    a = search.answer
    tried = {p.scale: p.ok for p in search.probes}
    assert tried[a] and not tried[search.above]
    assert not ok(a * 1.1) and ok(a)


def test_budget_stops():
    search = ScaleSearch(max_probes=3)
    drive(search, lambda s: s <= 1.37, 1)
    assert search.status == "budget" and len(search.probes) == 3


def test_no_duplicate_simulations():
    search = ScaleSearch()
    drive(search, lambda s: s <= 2.0, 2)  # 2.0 is tried while bracketing
    scales = [p.scale for p in search.probes]
    assert len(scales) == len(set(scales))


def test_bad_parameters():
    with pytest.raises(ValueError):
        ScaleSearch(margin=1.01, rel_tol=0.02)
    with pytest.raises(ValueError):
        ScaleSearch(start=0)


@settings(max_examples=150, deadline=None)
@given(st.floats(0.002, 5000), st.integers(1, 4), st.floats(0.005, 0.08),
       st.sampled_from([0.25, 1.0, 7.0]))
def test_property_checked_answer(boundary, k, tol, start):
    search = ScaleSearch(start=start, rel_tol=tol, margin=1.1)
    drive(search, lambda s: s <= boundary, k)
    assert search.status == "ok"
    a = search.answer
    assert a <= boundary < a * 1.1
    assert a >= boundary / (1 + tol) * (1 - 1e-9)
    assert not math.isnan(a)
