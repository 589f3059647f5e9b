"""benchmarks/calibrate_prefill_whatif.py: a calibrated profile with its prefill rows the other
way round (unscaled where the factor was applied, scaled where it was kept)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
RESULTS = ROOT / "benchmarks/results/h200-2026-12-05"


def _check(cal: Path, out: Path, mult: float, verb: str) -> None:
    """Every prefill row of ``out`` is ``cal``'s times ``mult`` (latency, p10, p90), every other
    row is unchanged, the note says so, and ``cal`` is left as it was."""
    from backends.profile import read_profile

    a, _ = read_profile(cal)
    b, meta = read_profile(out)
    a, b = a.to_pylist(), b.to_pylist()
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for k in ("latency_s", "p10_s", "p90_s"):
            assert y[k] == pytest.approx(x[k] * mult if x["kind"] == "prefill" else x[k], rel=1e-12)
    assert any(f"prefill rows {verb}" in n for n in meta["notes"] if isinstance(n, str))


def test_applied_prefill_factor_is_divided_out(tmp_path):
    """The V2-Lite calibration of 2026-12-05 as recorded (prefill factor 1.0303 applied): the
    copy's prefill rows are the calibrated ones / 1.0303."""
    import calibrate_prefill_whatif as m
    from backends.shipped import file_sha256

    cal = RESULTS / "deepseek-v2-lite__H200.calibrated_conv_bucket150.parquet"
    sha = file_sha256(cal)
    f, applied = m.other_prefill(cal, tmp_path / "u.parquet")
    assert (f, applied) == (pytest.approx(1.0303305769979694), True)
    _check(cal, tmp_path / "u.parquet", 1 / f, "divided")
    assert file_sha256(cal) == sha


def test_kept_prefill_factor_is_applied(tmp_path):
    """The same anchors re-fitted under ``calibrate --prefill auto`` (prefill rows the base's,
    the 1.0303 recorded as measured): the copy's prefill rows are those x 1.0303, which is the
    calibration as first recorded."""
    import calibrate_prefill_whatif as m
    from backends.profile import read_profile

    kept = RESULTS / "deepseek-v2-lite__H200.calibrated_conv_bucket150_prefill_base.parquet"
    f, applied = m.other_prefill(kept, tmp_path / "s.parquet")
    assert (f, applied) == (pytest.approx(1.0303305769979694), False)
    _check(kept, tmp_path / "s.parquet", f, "multiplied")
    first = {(r["kind"], r["graph"], r["bs"], r["width"], r["kv_len"], r["tokens"]): r["latency_s"]
             for r in read_profile(RESULTS / "deepseek-v2-lite__H200.calibrated_conv_bucket150.parquet")[0]
             .to_pylist() if r["kind"] == "prefill"}
    got = {(r["kind"], r["graph"], r["bs"], r["width"], r["kv_len"], r["tokens"]): r["latency_s"]
           for r in read_profile(tmp_path / "s.parquet")[0].to_pylist() if r["kind"] == "prefill"}
    assert got.keys() == first.keys()
    assert all(got[k] == pytest.approx(first[k], rel=1e-9) for k in first)
