"""Each request's simulated latency against its live one (analysis/fidelity/paired.py)."""

import pytest
from backends_helpers import bare_report, requests_table

from analysis.fidelity.paired import paired, paired_with_repeats
from analysis.fidelity.render import render_markdown


_requests = requests_table


LIVE = _requests([
    ("a", 0.0, 0.1, 1.1, 11),    # TTFT 0.1, TPOT 1.0 / 10 = 0.1, E2E 1.1
    ("b", 1.0, 1.2, 2.2, 6),     # TTFT 0.2, TPOT 1.0 / 5 = 0.2, E2E 1.2
    ("c", 2.0, 2.4, None, 5),    # TTFT 0.4; unfinished: no TPOT or E2E to pair
    ("d", 3.0, 3.05, 3.05, 1),   # TTFT 0.05, E2E 0.05; one token: no TPOT
])
SIM = _requests([
    ("a", 0.0, 0.11, 1.122, 11),  # TTFT +10%, E2E 1.122 / 1.1 = +2%, TPOT 0.1012 / 0.1 = +1.2%
    ("b", 1.0, 1.19, 2.2, 6),     # TTFT -5%, E2E 0%, TPOT 1.01 / 5 = 0.202: +1%
    ("c", 2.0, 2.4, 3.0, 5),      # TTFT 0%
    ("d", 3.0, 3.05, 3.05, 1),    # TTFT 0%, E2E 0%
    ("e", 4.0, 4.1, 4.2, 2),      # not in the live run: left out
])


def test_paired_differences_by_request_worked_by_hand():
    p = paired(LIVE, SIM, 3.0)
    # TTFT: +10, -5, 0, 0 -> sorted -5, 0, 0, 10: median 0; p10 at position 0.3 between -5 and
    # 0 = -3.5; p90 at position 2.7 between 0 and 10 = 7; within 3%: c and d, 2 of 4
    assert p["ttft"] == pytest.approx({"requests": 4, "median_pct": 0.0, "p10_pct": -3.5,
                                       "p90_pct": 7.0, "within_target_share": 0.5})
    # TPOT: a +1.2, b +1.0 (c unfinished live, d one token): median 1.1
    assert p["tpot"]["requests"] == 2
    assert p["tpot"]["median_pct"] == pytest.approx(1.1)
    assert p["tpot"]["within_target_share"] == 1.0
    # E2E: a +2, b 0, d 0: median 0, all within 3%
    assert p["e2e"] == pytest.approx({"requests": 3, "median_pct": 0.0, "p10_pct": 0.0,
                                      "p90_pct": 1.6, "within_target_share": 1.0})


def test_a_percentile_gap_moves_no_paired_figure():
    """Live TTFTs in two clusters of five (10 ms and 40 ms, the median between them) and a
    simulation 1% slower on every request: whatever a percentile at the gap does, every paired
    figure says +1%."""
    live = _requests([(str(i), float(i), i + (0.010 if i < 5 else 0.040), i + 1.0, 11)
                      for i in range(10)])
    sim = _requests([(str(i), float(i), i + 1.01 * (0.010 if i < 5 else 0.040), i + 1.0, 11)
                     for i in range(10)])
    p = paired(live, sim, 3.0)["ttft"]
    assert p["median_pct"] == pytest.approx(1.0) and p["p10_pct"] == pytest.approx(1.0)
    assert p["within_target_share"] == 1.0


def test_repeats_give_the_floor_under_the_median():
    rep = _requests([("a", 0.0, 0.1, 1.1, 11), ("b", 1.0, 1.2, 2.156, 6),  # b: E2E -3%
                     ("c", 2.0, 2.4, None, 5), ("d", 3.0, 3.05, 3.05, 1)])
    p = paired_with_repeats(LIVE, SIM, [LIVE, rep], 3.0)
    assert p["ttft"]["repeat_median_pct"] == 0.0
    # E2E of the second repeat: a 0, b -3.67% (1.156 / 1.2 - 1), d 0 -> median 0
    assert [r["median_pct"] for r in p["e2e"]["repeats"]] == pytest.approx([0.0, 0.0])
    # TPOT of the second repeat: a 0, b (2.156 - 1.2) / 5 = 0.1912 -> -4.4%: median -2.2%
    assert p["tpot"]["repeat_median_pct"] == pytest.approx(2.2)
    assert "repeats" not in paired_with_repeats(LIVE, SIM, [], 3.0)["ttft"]


def test_the_report_renders_the_per_request_table():
    p = paired_with_repeats(LIVE, SIM, [LIVE], 3.0)
    report = bare_report(paired=p)
    md = render_markdown(report, reference="aiter")
    assert "## Per request" in md
    assert "| TTFT | 4 | +0.00% | -3.50% | +7.00% | 50% | +0.00% | +0.00% .. +0.00% |" in md
    assert "| TPOT | 2 | +1.10% |" in md


def test_the_summary_over_reports_worked_by_hand():
    """``benchmarks/paired_bias.py``'s cell: three reports' per-request medians +1, -4 and +2%
    (the second with a repeat whose own median is 2%): median +1%, largest 4%, 2 of 3 within 3%,
    and the one with a repeat within 3 + 2%."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks.paired_bias import _cell

    vals = [(1.0, None, "a"), (-4.0, 2.0, "b"), (2.0, None, "c")]
    assert _cell(vals) == ("+1.00% (max 4.00%; 2 of 3 within 3%; 1 of 1 within target + "
                           "repeat)")
    assert _cell([]) == "-"
