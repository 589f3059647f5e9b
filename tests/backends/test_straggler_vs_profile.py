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


def test_fit_tail_recovers_the_exponent_a_case_was_measured_at():
    # plant 0.6: the mixed batch takes what the measured curve gives at the rule's KV under an
    # exponent of 0.6; the fit over 0, 0.05, ..., 1 must find 0.6 with no error, and 0.4 (the
    # default) must err, since the straggler moves the lookup between two KV lines
    table = _table()
    table.attention["tail_exponent"] = {"3d": 0.6}
    c, _, kv = _case(table, comm=0.0015, scale=1.0)
    del table.attention["tail_exponent"]
    before = dict(table.attention)
    fits = dict(_module().fit_tail([c], table))
    assert table.attention == before  # restored
    assert min(fits, key=fits.get) == pytest.approx(0.6)
    assert fits[0.6] == pytest.approx(0, abs=1e-9)
    assert fits[0.4] > 1e-3 and fits[1.0] > 1e-3
    assert 2048 < kv < 8192


def test_fit_tail_without_a_3d_kernel_case_is_an_error():
    table = _table()
    c, _, _ = _case(table, comm=0.0, scale=1.0)
    c.update(bs=512, real=512, spec="verify:512:8:2048:8192:1")  # the 2D kernel
    with pytest.raises(ValueError, match="3D split-KV"):
        _module().fit_tail([c], table)


def test_the_tail_fit_pools_runs_by_their_cases():
    # one run of 1 case erring 4% at 0.3 and 2% at 0.4, one of 3 cases erring 0% and 6%:
    # pooled 1% at 0.3 ((1 x 4 + 3 x 0) / 4) and 5% at 0.4 ((1 x 2 + 3 x 6) / 4)
    pooled = benchmark_script("straggler_tail_fit").pooled
    fits = {"a": (1, {0.3: 0.04, 0.4: 0.02}), "b": (3, {0.3: 0.0, 0.4: 0.06})}
    assert pooled(fits, ["a", "b"]) == pytest.approx({0.3: 0.01, 0.4: 0.05})
    assert pooled(fits, ["a"]) == pytest.approx({0.3: 0.04, 0.4: 0.02})
