"""``benchmarks/straggler_vs_profile.py``: a straggler benchmark's batches against a profile,
split into the uniform curve's error and the straggler rule's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from backends_helpers import benchmark_script, shipped_table

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "straggler_vs_profile.py"


def _module():
    return benchmark_script("straggler_vs_profile")


def _table():
    return shipped_table("llama-3.1-70b", tp=8)


def _case(table, comm: float, scale: float) -> dict:
    """An eager width-8 case at 16 requests (a grid point) whose uniform points are the profile's
    own values at three of its KV lines, less ``comm``, and whose mixed batch takes ``scale``
    times what the profile predicts for it."""
    mod = _module()
    c = {"spec": "verify:16:8:2048:8192:1", "kind": "verify", "bs": 16, "real": 16, "width": 8,
         "short": 2048, "long": 8192, "nlong": 1, "graph": False, "comm_s": comm}
    c["uniform"] = {str(k): table.verify_s(16, 8, k, False)[0] - comm for k in (512, 2048, 8192)}
    pts = mod.lookup_points(mod.case_steps([c]), table)
    pred = float(mod.predict(pts, table)[0][0])
    c["mixed_s"] = scale * pred - comm
    return c, pred, float(pts["kv"][0])


def test_a_case_measured_as_the_profile_predicts_has_no_error():
    table = _table()
    c, pred, kv = _case(table, comm=0.0015, scale=1.0)
    assert 2048 < kv < 8192  # the straggler moves the lookup above the others' KV
    (r,) = _module().compare([c], table)
    assert [e for *_, e in r["uniform"]] == pytest.approx([0, 0, 0], abs=1e-12)
    assert r["predicted_s"] == pytest.approx(pred, rel=1e-12)
    assert r["mixed_err"] == pytest.approx(0, abs=1e-12)
    # the profile's curve is a straight line between its KV lines, as the measured one is read
    assert r["rule_err_measured_curve"] == pytest.approx(0, abs=1e-9)


def test_a_mixed_batch_10pct_slower_is_predicted_9_1pct_short_on_both_curves():
    table = _table()
    c, pred, _ = _case(table, comm=0.0015, scale=1.1)
    (r,) = _module().compare([c], table)
    assert r["mixed_s"] == pytest.approx(1.1 * pred)
    assert r["mixed_err"] == pytest.approx(1 / 1.1 - 1)
    assert r["rule_err_measured_curve"] == pytest.approx(1 / 1.1 - 1, rel=1e-6)


def test_a_file_that_is_no_benchmark_output_is_an_error(tmp_path):
    bad = tmp_path / "x.json"
    bad.write_text(json.dumps({"summary": {}}))
    r = subprocess.run([sys.executable, str(SCRIPT), str(bad), "--model", "llama-3.1-70b",
                        "--tp", "8"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith(f"error: {bad}")
