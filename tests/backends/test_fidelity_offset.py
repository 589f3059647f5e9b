"""The offset column of the fidelity report: each whole-run check with every pass 1% off."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from analysis.fidelity import fidelity, run_fidelity
from analysis.fidelity.offset import ScaledExecutor, apply_offset, offset_checks
from analysis.fidelity.report import WHOLE_RUN_CHECKS
from backends.latency_table import TableExecutor
from backends.profile import load_profile, profile_metadata, write_profile
from backends.protocol import DraftBatch, DraftExtendBatch, PrefillBatch, VerifyBatch
from backends_helpers import roofline_profile_rows
from traces.synth import synth

LIMIT = 40


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("off")
    synth(d / "t.parquet", n=LIMIT, rate=8.0, acceptance="geometric:k=4,alpha=0.7", seed=3)
    m, rows = roofline_profile_rows()
    write_profile(rows, d / "p.parquet", profile_metadata(m, {"name": "H200"}))
    return d


def _fid(setup, **kw):
    return run_fidelity(setup / "t.parquet", "llama-3.1-8b", reference="roofline",
                        profile=str(setup / "p.parquet"), **kw)


def test_every_pass_is_scaled_by_the_factor(setup):
    inner = TableExecutor("profile", load_profile(setup / "p.parquet"))
    ex = ScaledExecutor(inner, 1.25)
    kv = np.full(4, 3000)
    pre = PrefillBatch(tokens=np.array([700]), prefix=np.array([0]))
    dr = DraftBatch(bs_real=4, bs_padded=4, kv_lens=kv, passes=1, graph=True)
    de = DraftExtendBatch(bs_real=4, bs_padded=4, width=4, kv_lens=kv, graph=True)
    ve = VerifyBatch(bs_real=4, bs_padded=4, widths=np.full(4, 4), kv_lens=kv, launch_width=4,
                     mode="uniform", graph=True)
    assert ex.prefill(pre) == pytest.approx(1.25 * inner.prefill(pre), rel=1e-12)
    assert ex.draft(dr) == pytest.approx(1.25 * inner.draft(dr), rel=1e-12)
    assert ex.draft_extend(de) == pytest.approx(1.25 * inner.draft_extend(de), rel=1e-12)
    assert ex.verify(ve).latency_s == pytest.approx(1.25 * inner.verify(ve).latency_s, rel=1e-12)
    # no table: the engine asks the executor for each pass, as it asks a live one
    assert ex.latency_table() is None and ex.describe()["latency_factor"] == 1.25


def test_a_verdict_flips_when_either_offset_crosses_the_target():
    """Worked by hand at a 3% target: +2.5 (passes) with -2.0 / +3.2 flips; -2.9 (passes) with
    -2.0 / -2.9 does not; +3.5 (fails) with +2.9 / +4.0 flips; +6.0 (fails) with +5.0 / +7.0 does
    not. Per-step checks and a check with no value get no offset."""
    def c(v):
        return {"value_pct": v, "target_pct": 3.0, "pass": None if v is None else abs(v) <= 3.0}

    checks = {"ttft_p50": c(2.5), "ttft_p90": c(-2.9), "tpot_p50": c(3.5), "tpot_p90": c(6.0),
              "e2e_p50": c(None), "step_mape_all": c(5.0)}
    report = {"checks": checks}
    apply_offset(report, {"pct": 1.0, "values_pct": {
        "ttft_p50": [-2.0, 3.2], "ttft_p90": [-2.0, -2.9], "tpot_p50": [2.9, 4.0],
        "tpot_p90": [5.0, 7.0], "e2e_p50": [None, None]}})
    assert [checks[n].get("offset_flips") for n in checks] == [True, False, True, False, None,
                                                               None]
    assert checks["ttft_p50"]["offset_pct"] == [-2.0, 3.2] and "offset_pct" not in checks["e2e_p50"]
    assert [c["pass"] for c in checks.values()] == [True, True, False, False, None, False]
    assert report["offset"]["pct"] == 1.0


def test_the_offset_adds_its_keys_and_changes_nothing_else(setup):
    plain = _fid(setup)
    assert "offset" not in plain
    off = _fid(setup, offset_pct=1.0)
    vals = off.pop("offset")["values_pct"]
    assert set(vals) == set(WHOLE_RUN_CHECKS)
    for name, c in off["checks"].items():
        if name in WHOLE_RUN_CHECKS:
            assert c.pop("offset_pct") == vals[name] and isinstance(c.pop("offset_flips"), bool)
    assert json.dumps(off, sort_keys=True, default=str) == json.dumps(plain, sort_keys=True,
                                                                      default=str)


def test_slower_passes_lengthen_the_profile_side(setup):
    """The 40 requests arrive at 8 a second, well under the engine's capacity: with every pass
    1% slower each request's E2E and TPOT grow, so the profile side's difference from the
    reference rises from x0.99 through x1 to x1.01."""
    rep = _fid(setup, offset_pct=1.0)
    for name in ("e2e_p50", "tpot_p50"):
        lo, hi = rep["checks"][name]["offset_pct"]
        assert lo < rep["checks"][name]["value_pct"] < hi, name


def test_a_zero_offset_reproduces_the_checks_through_the_executor_path(setup):
    """pct 0: both runs go through ScaledExecutor at x1, which must give the table path's
    numbers (the engine times an executor without a table pass by pass)."""
    from specsched.setup import load_trace, prepare, simulate_to
    from simulator.config import SimConfig

    cfg = SimConfig.load(None, {"model.name": "llama-3.1-8b", "backend.name": "profile",
                                "backend.profile": str(setup / "p.parquet")})
    trace = load_trace(setup / "t.parquet", seed=cfg.seed)
    ex = prepare(cfg).executor
    base = simulate_to(trace, cfg, None, executor=ex).summary
    off = offset_checks(lambda e: simulate_to(trace, cfg, None, executor=e).summary, ex, base,
                        pct=0.0)
    assert all(v == [0.0, 0.0] for k, v in off["values_pct"].items()), off["values_pct"]


def test_cli_option(setup):
    args = ["--trace", str(setup / "t.parquet"), "--model", "llama-3.1-8b", "--reference",
            "roofline", "--profile", str(setup / "p.parquet"), "--jitter-runs", "0", "--json"]
    r = CliRunner().invoke(fidelity, args + ["--out", str(setup / "c1")], standalone_mode=False)
    assert r.exception is None, r.output
    assert json.loads(r.output)["offset"]["pct"] == 1.0
    for bad in ("-1", "100"):
        r = CliRunner().invoke(fidelity, args + ["--out", str(setup / "c2"), "--offset-pct", bad])
        assert r.exit_code == 2 and "offset-pct" in r.output, bad
