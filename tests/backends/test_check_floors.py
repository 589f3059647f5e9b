"""``benchmarks/check_floors_by_length.py``: how far a 1% offset of every pass and per-pass noise
move each whole-run figure, on the shipped 8B profile and the first conversation requests (CPU)."""

from __future__ import annotations

from pathlib import Path

from backends_helpers import benchmark_script

ROOT = Path(__file__).resolve().parents[2]


def _module():
    return benchmark_script("check_floors_by_length")


def test_a_one_percent_offset_moves_tpot_by_at_least_one_percent():
    """Every pass 1% slower makes each output token at least about 1% slower (the same batches
    would give exactly 1%; a longer queue gives more), so TPOT p50 moves by 0.9% or more, while
    throughput, set by the trace's arrivals on an open-loop run, moves by far less."""
    mod = _module()
    res = mod.floors(mod.TRACE, "llama-3.1-8b", None, "fixed", 40, jitter_runs=2)
    checks = res["checks"]
    assert res["requests"] == 40
    assert set(checks) >= {"ttft_p50", "tpot_p50", "e2e_p99", "throughput"}
    assert checks["tpot_p50"]["offset_pct"] >= 0.9
    assert checks["throughput"]["offset_pct"] < checks["tpot_p50"]["offset_pct"] / 2
    assert all(c["jitter_pct"] is not None and c["jitter_pct"] >= 0 for c in checks.values())


def test_the_table_prints_a_row_per_check(capsys):
    mod = _module()
    assert mod.main(["--limits", "20"]) == 0
    out = capsys.readouterr().out
    assert "| tpot_p50 | " in out and "20 req" in out
