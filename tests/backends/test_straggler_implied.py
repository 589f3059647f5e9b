"""``benchmarks/straggler_implied.py``: the KV at which a profile's uniform batch takes a
measured time, and the straggler shares it reports for a shipped live run."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from backends_helpers import benchmark_script, shipped_table

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "straggler_implied.py"
RUN = ROOT / "benchmarks" / "results" / "h200-2026-12-02e" / "live_long70b_pad"


def _module():
    return benchmark_script("straggler_implied")


def _table():
    return shipped_table("llama-3.1-70b", tp=8)


@pytest.mark.parametrize("bs, width, graph, kv", [(22, 6, False, 9159.0), (4, 4, True, 3000.0)])
def test_implied_kv_finds_the_kv_of_a_time_on_the_uniform_curve(bs, width, graph, kv):
    table = _table()
    t = table.verify_s(bs, width, kv, graph)[0]
    got = _module().implied_kv(table, bs, width, graph, t, 4 * kv)
    assert table.verify_s(bs, width, got, graph)[0] == pytest.approx(t, rel=1e-6)
    assert got == pytest.approx(kv, rel=1e-3)
    # a time beyond the curve's span is no KV, not the span's end
    assert math.isnan(_module().implied_kv(table, bs, width, graph, 10 * t, 4 * kv))


def test_the_70b_pad_run_reports_one_line_per_batch_size():
    out = subprocess.run([sys.executable, str(SCRIPT), str(RUN), "--model", "llama-3.1-70b",
                          "--tp", "8", "--eager", "--width", "6", "--bs", "9-32"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "534 verify steps with a straggler" in out
    rows = [ln.split() for ln in out.splitlines() if ln[:3].strip().isdigit()]
    assert [int(r[0]) for r in rows] == list(range(9, 27))
    assert sum(int(r[1]) for r in rows) == 534
    # the rule's share falls with batch size, and so does the share the measured times imply
    rule = [float(r[2]) for r in rows]
    assert all(a >= b for a, b in zip(rule, rule[1:]))
    assert float(rows[0][3]) > float(rows[-1][3])


def test_a_selection_without_stragglers_is_an_error():
    r = subprocess.run([sys.executable, str(SCRIPT), str(RUN), "--model", "llama-3.1-70b",
                        "--tp", "8", "--bs", "300-400"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error: ")
