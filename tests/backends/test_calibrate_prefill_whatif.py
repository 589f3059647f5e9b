"""benchmarks/calibrate_prefill_whatif.py: a calibrated profile with its prefill rows unscaled."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_unscaled_prefill_divides_prefill_rows_by_the_factor_alone(tmp_path):
    """The V2-Lite calibration of 2026-12-05 (prefill factor 1.0303): every prefill row of the
    copy is the calibrated row / 1.0303 (latency, p10 and p90), every other row is unchanged,
    and the calibrated file is left as it was."""
    import calibrate_prefill_whatif as m
    from backends.profile import read_profile
    from backends.shipped import file_sha256

    cal = ROOT / "benchmarks/results/h200-2026-12-05/deepseek-v2-lite__H200.calibrated_conv_bucket150.parquet"
    sha = file_sha256(cal)
    out = tmp_path / "u.parquet"
    f = m.unscaled_prefill(cal, out)
    assert f == pytest.approx(1.0303305769979694)
    a, _ = read_profile(cal)
    b, meta = read_profile(out)
    a, b = a.to_pylist(), b.to_pylist()
    assert len(a) == len(b) and file_sha256(cal) == sha
    for x, y in zip(a, b):
        for k in ("latency_s", "p10_s", "p90_s"):
            assert y[k] == pytest.approx(x[k] / f if x["kind"] == "prefill" else x[k], rel=1e-12)
    assert any("prefill rows divided" in n for n in meta["notes"] if isinstance(n, str))
