"""The report's views: fixed width colours, single-run and unsafe-derived handling, the per-class
table, TPOT in ms, pass kinds the report does not know, engine state counts, rate sweeps and the
difference against a baseline run.

Hand-built runs (tests/analysis/conftest.py) for the rules; simulations of the first requests
of ``traces/samples/azure_conv_eagle_2k.parquet`` (roofline backend) for the baseline table and
the rate sweep.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.report import build_html, print_summary, slo_verdict
from analysis.report_tables import summary_table
from analysis.slo import parse_slo

from analysis_helpers import ROOT, sample_head


def _fill(html: str, gid: str) -> str:
    """The fill colour of the SVG element matplotlib wrote with id ``gid``."""
    m = re.search(r'id="%s">\s*<path[^>]*?style="fill: (#[0-9a-f]{6})' % re.escape(gid), html)
    assert m, f"no element {gid}"
    return m.group(1)


def _req(**kw):
    base = dict(arrival_s=0.0, admit_s=0.0, first_token_s=0.5, finish_s=6.5, output_tokens=5,
                steps=2)
    base.update(kw)
    return base


def _verify(t, width, bs=1, **kw):
    return dict(kind="verify", start_s=t, iteration=int(t * 10), bs=bs, bs_padded=bs,
                width=width, tokens=bs * width, committed_tokens=bs, **kw)


# ----------------------------------------------------------------------------- item 11
def test_a_width_has_one_colour_in_every_panel_and_figure(make_run):
    """Run a launches widths 2 and 4, run b widths 4 and 6: width 4 is the same colour in both
    runs' width-mix panels and launch-width histograms (a per-panel palette gave it two)."""
    from analysis.plots import width_color

    a = make_run([_req()], [_verify(0.5, 2), _verify(1.0, 4, bs=3)], name="a")
    b = make_run([_req()], [_verify(0.5, 4), _verify(1.0, 6)], name="b")
    html, _ = build_html([a, b])
    w4 = {_fill(html, f"{fig}-{i}-w4") for fig in ("width-mix", "width-hist") for i in (0, 1)}
    assert w4 == {width_color(4)}
    assert _fill(html, "width-hist-0-w2") == _fill(html, "width-mix-0-w2") != width_color(4)
    assert _fill(html, "width-hist-1-w6") == width_color(6) not in (width_color(2), width_color(4))
    assert 'id="width-hist-0-w3"' not in html  # no launch of width 3: no bar


def test_tpot_in_ms_and_single_run_drops_comparisons(make_run):
    """TPOT = (6.5 - 0.5) / (5 - 1) = 1.5 s is shown as 1500.0 ms (not 1.500 s); TTFT 0.5 s as
    500.0 ms.  One run: no side-by-side figure, no whole-run padding bars."""
    run = make_run([_req()], [_verify(1.0, 3)], name="one")
    html, sums = build_html([run])
    rows = dict(summary_table(sums))
    assert rows["TPOT p50"] == ["1500.0 ms"] and rows["TTFT p50"] == ["500.0 ms"]
    assert "id='side-by-side'" not in html
    padding = html[html.index("id='padding'"):]
    assert "whole run" not in padding[padding.index("<svg"):]
    lat = html[html.index("id='latency-over-time'"):]
    assert "TPOT (ms)" in lat[lat.index("<svg"):]


def test_side_by_side_drops_panels_no_run_has(make_run):
    """Without an SLO no run has a goodput: its panel is left out, the others stay."""
    a = make_run([_req()], [_verify(1.0, 3)], name="a")
    b = make_run([_req()], [_verify(1.0, 2)], name="b")
    html, _ = build_html([a, b])
    side = html[html.index("id='side-by-side'"):]
    side = side[side.index("<svg"):side.index("</svg>")]
    assert "goodput" not in side and "TPOT p99 (ms)" in side and "throughput" in side


def test_misattributed_rows_flag_the_run_and_void_its_slo(make_run):
    """An unsafe-derived launch that put 7 query rows on the wrong request: the violations cell
    is red, the run is flagged, and its SLO is not "met" although its latencies meet it."""
    from rich.console import Console

    bad = make_run([_req()], [_verify(1.0, 3, violations=7)], name="unsafe")
    good = make_run([_req()], [_verify(1.0, 3)], name="pad")
    slo = parse_slo("ttft_p90<=2s")
    html, sums = build_html([good, bad], slo=slo)
    assert slo.check(bad).ok  # the latencies alone would meet it
    assert slo_verdict(slo.check(bad), sums[1]) == (False, "invalid: 7 rows misattributed")
    assert slo_verdict(slo.check(good), sums[0]) == (True, "met")
    assert "<td class='v fail'>invalid: 7 rows misattributed</td>" in html
    assert "<td class='v ok'>met</td>" in html
    assert ("<tr><th>uniformity violations (rows)</th><td class='v'>0</td>"
            "<td class='v fail'>7</td>") in html
    assert "unsafe: 7 rows misattributed" in html
    con = Console(record=True, width=200)
    print_summary([good, bad], sums, console=con, checks=[slo.check(good), slo.check(bad)])
    assert "invalid: 7 rows misattributed" in con.export_text()


def test_per_category_is_one_table_with_a_run_column(make_run):
    reqs = [_req(category="chat"), _req(category="chat"), _req(category="code")]
    a = make_run(reqs, [_verify(1.0, 3)], name="a")
    b = make_run(reqs, [_verify(1.0, 3)], name="b")
    html, _ = build_html([a, b])
    assert html.count("<h2>Per category</h2>") == 1 and "Per tenant" not in html
    table = html[html.index("<h2>Per category</h2>"):]
    table = table[:table.index("</table>")]
    assert table.count("<th>run</th>") == 1
    rows = re.findall(r"<tr><td>(\w+)</td><th>(\w+)</th><td class='v'>(\d+)</td>", table)
    assert rows == [("a", "chat", "2"), ("a", "code", "1"), ("b", "chat", "2"), ("b", "code", "1")]


# ----------------------------------------------------------------------------- pass kinds
def test_kinds_the_report_does_not_know_are_counted_and_drawn(make_run):
    """draft_extend (the coordinator's new pass) and an invented kind get their graph/eager rows
    and their own layer in the busy-time figure."""
    from analysis.plots_base import kind_color

    steps = [dict(kind="prefill", start_s=0.1, width=0, tokens=10, graph=False),
             dict(kind="draft", start_s=0.6, iteration=1),
             dict(kind="draft_extend", start_s=0.7, iteration=1),
             dict(kind="draft_extend", start_s=1.7, iteration=2, graph=False),
             dict(kind="mystery", start_s=1.8, iteration=2),
             _verify(0.8, 3)]
    run = make_run([_req()], steps, name="k")
    html, sums = build_html([run])
    assert sums[0]["verify"]["launches_by_kind"]["draft_extend"] == {"graph": 1, "eager": 1}
    assert sums[0]["verify"]["launches_by_kind"]["mystery"] == {"graph": 1, "eager": 0}
    rows = dict(summary_table(sums))
    assert rows["draft_extend graph replays"] == rows["draft_extend eager launches"] == ["1"]
    assert rows["mystery graph replays"] == ["1"]
    assert _fill(html, "busy-0-draft_extend") == kind_color("draft_extend")
    assert _fill(html, "busy-0-mystery") == kind_color("mystery")
    assert kind_color("mystery") not in {kind_color(k) for k in ("prefill", "draft", "verify")}


# ----------------------------------------------------------------------------- engine state
def test_running_and_queued_peaks_by_hand(make_run):
    """Requests (arrival, admit, finish): r0 (0, 1, 3) replica 0, r1 (0.5, 2, 4) replica 1,
    r2 (1, never, never) replica 0; bins of 1 s from 0 to 5.  Queued: 1 at 0, 2 at 0.5, still 2
    at 1 (r2 arrives as r0 is admitted), 1 from 2.  Running: 1 from 1, 2 from 2, 1 from 3, 0
    from 4."""
    from analysis.plots_state import request_state_peaks

    run = make_run([_req(arrival_s=0, admit_s=1, first_token_s=1.5, finish_s=3, replica=0),
                    _req(arrival_s=0.5, admit_s=2, first_token_s=2.5, finish_s=4, replica=1),
                    _req(arrival_s=1, admit_s=math.nan, first_token_s=math.nan,
                         finish_s=math.nan, replica=0)], [_verify(1.5, 2)])
    edges = np.arange(6.0)
    queued, running = request_state_peaks(run, edges)
    assert queued.tolist() == [2, 2, 1, 1, 1] and running.tolist() == [0, 1, 2, 1, 0]
    q1, r1 = request_state_peaks(run, edges, replica=1)
    assert q1.tolist() == [1, 1, 0, 0, 0] and r1.tolist() == [0, 0, 1, 1, 0]


def test_kv_peak_per_bin_and_pool_size(make_run):
    from analysis.plots_base import binned_max
    from analysis.plots_state import pool_pages

    got = binned_max(np.array([0.1, 0.2, 1.5]), np.array([10, 30, 20]), np.array([0.0, 1, 2, 3]))
    assert got[:2].tolist() == [30.0, 20.0] and math.isnan(got[2])
    run = make_run([_req()], [_verify(1.0, 2)],
                   summary={"kv_capacity_tokens": 1000, "config": {"engine": {"page_size": 16}}})
    assert pool_pages(run) == 62  # 1000 // 16
    steps = run.steps.append_column("kv_pages_used", pa.array([31], pa.int32()))
    run = type(run)(run.name, run.requests, steps, None, run.summary)
    html, _ = build_html([run])
    state = html[html.index("id='engine-state'"):]
    assert "KV pool used (peak)" in state[:state.index("</svg>")]


# ----------------------------------------------------------------------------- rate sweeps
def test_rate_series_groups_runs_that_differ_only_in_rate(make_run):
    from analysis.plots_compare import offered_rate, rate_series

    def run(policy, scale, trace="t.parquet"):
        cfg = {"seed": 0, "rate_scale": scale, "engine": {"policy": policy}}
        arr = [0.0, 1.0 / scale, 4.0 / scale]
        return make_run([_req(arrival_s=a, admit_s=a, first_token_s=a + .5, finish_s=a + 6.5)
                         for a in arr], [_verify(1.0, 2)], name=f"{policy}@{scale}",
                        summary={"config": cfg, "trace": {"path": trace}})

    runs = [run("pad", 1.0), run("split", 1.0), run("pad", 2.0), run("split", 2.0),
            run("pad", 4.0), run("pad", 1.0, trace="other.parquet")]
    series = rate_series(runs)
    assert [(s.label, s.runs, s.rate_scale) for s in series] == [
        ("policy=pad", (0, 2, 4), (1.0, 2.0, 4.0)), ("policy=split", (1, 3), (1.0, 2.0))]
    assert offered_rate(runs[0]) == pytest.approx(3 / 4.0)   # 3 requests over 4 s
    assert offered_rate(runs[4]) == pytest.approx(3 / 1.0)
    assert rate_series(runs[:2]) == []                       # no rate varies: no sweep
    html, _ = build_html(runs[:3])
    assert "id='rate-sweep'" in html
    assert "id='rate-sweep'" not in build_html(runs[:2])[0]



@pytest.fixture(scope="module")
def trace150(tmp_path_factory) -> Path:
    return sample_head(tmp_path_factory.mktemp("trace") / "conv150.parquet", 150)


def _cli(*args):
    proc = subprocess.run([sys.executable, "-m", "specsched", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc


def test_a_rate_scale_sweep_gets_the_rate_figure(trace150, tmp_path):
    from analysis.cli import _expand_sweeps
    from analysis.plots_compare import offered_rate, rate_series
    from analysis.results import load_run
    from analysis.sweep import load_grid, run_sweep

    g = tmp_path / "grid.toml"
    g.write_text(f'[sweep]\ntrace = "{trace150}"\n[base.backend]\nname = "roofline"\n'
                 f'[axes]\nrate_scale = [1.0, 2.0]\n')
    run_sweep(load_grid(g), tmp_path / "sweep", jobs=1)
    runs = [load_run(d) for d in _expand_sweeps([tmp_path / "sweep"])]
    (series,) = rate_series(runs)
    assert series.rate_scale == (1.0, 2.0)
    arr = pq.read_table(tmp_path / "sweep" / "rate_scale=1" / "requests.parquet")["arrival_s"]
    arr = np.asarray(arr)
    assert offered_rate(runs[0]) == pytest.approx(150 / (arr.max() - arr.min()))
    assert offered_rate(runs[1]) == pytest.approx(2 * offered_rate(runs[0]))
    _cli("report", tmp_path / "sweep", "-o", tmp_path / "r.html", "--slo", "ttft_p90<=2s")
    html = (tmp_path / "r.html").read_text()
    fig = html[html.index("id='rate-sweep'"):]
    assert "goodput" in fig[fig.index("<svg"):fig.index("</svg>")]


# ----------------------------------------------------------------------------- baseline
def test_baseline_differences_match_the_summary_files(trace150, tmp_path):
    """`report split --baseline pad`: each % difference is 100 * (split - pad) / pad of the
    values in the two summary.json files."""
    from simulator.config import SimConfig
    from specsched.setup import load_trace, simulate_to

    trace = load_trace(trace150)
    for policy in ("pad", "split"):
        cfg = SimConfig.load(None, {"backend.name": "roofline", "engine.policy": policy})
        simulate_to(trace, cfg, tmp_path / policy)
    out = tmp_path / "r.html"
    got = json.loads(_cli("report", tmp_path / "split", "--baseline", tmp_path / "pad", "-o",
                          out, "--json").stdout)
    assert [r["name"] for r in got["runs"]] == ["pad", "split"] and got["baseline"]["run"] == "pad"
    pad = json.loads((tmp_path / "pad" / "summary.json").read_text())
    split = json.loads((tmp_path / "split" / "summary.json").read_text())
    html = out.read_text()
    table = html[html.index("<table id='baseline'>"):]
    table = table[:table.index("</table>")]
    for label, key, q in (("TTFT p90", "ttft_s", "p90"), ("TPOT p99", "tpot_s", "p99"),
                          ("E2E p50", "e2e_s", "p50")):
        a, b = pad[key][q], split[key][q]
        d = got["baseline"]["metrics"][label]
        assert d["baseline"] == pytest.approx(a, rel=1e-9)
        assert d["runs"]["split"]["abs"] == pytest.approx(b - a, rel=1e-9)
        assert d["runs"]["split"]["pct"] == pytest.approx(100 * (b - a) / a, rel=1e-9)
        row = re.search(r"<tr><th>%s</th>(.*?)</tr>" % label, table).group(1)
        assert f"{100 * (b - a) / a:+.1f}%" in row
    # the baseline among the runs: the same table, no run added
    again = json.loads(_cli("report", tmp_path / "pad", tmp_path / "split", "--baseline",
                            tmp_path / "pad", "-o", out, "--json").stdout)
    assert again["baseline"] == got["baseline"]
