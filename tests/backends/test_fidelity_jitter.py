"""The jitter floor of the fidelity report: per-pass noise of the profile's own spread."""

import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from analysis.fidelity import fidelity, run_fidelity
from analysis.fidelity.jitter import FIGURES, apply_jitter, profile_sigma
from backends.profile import profile_metadata, write_profile
from backends_helpers import roofline_profile_rows
from traces.synth import synth

LIMIT = 40


def _profile(path, spread):
    """The roofline profile with each row's p10 at its latency and p90 ``spread(i)`` above it."""
    m, rows = roofline_profile_rows()
    rows = [dict(r, p10_s=r["latency_s"], p90_s=r["latency_s"] * (1 + spread(i)))
            for i, r in enumerate(rows)]
    write_profile(rows, path, profile_metadata(m, {"name": "H200"}))
    return str(path)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("jit")
    synth(d / "t.parquet", n=LIMIT, rate=8.0, acceptance="geometric:k=4,alpha=0.7", seed=3)
    return d


def _fid(setup, profile, **kw):
    return run_fidelity(setup / "t.parquet", "llama-3.1-8b", reference="roofline",
                        profile=profile, **kw)


def test_sigma_is_the_median_spread_over_the_normal_p10_p90_width(tmp_path):
    """Rows spread 1%, 2% and 6% in turn (a third each): the median is 2%, and p10..p90 of a
    normal is 2.563 sigma, so sigma = 0.02 / 2.563 = 0.7803%."""
    from backends.profile import load_profile

    p = _profile(tmp_path / "p.parquet", lambda i: (0.01, 0.02, 0.06)[i % 3])
    assert profile_sigma(load_profile(p)) == pytest.approx(0.02 / 2.563, rel=1e-9)
    flat = _profile(tmp_path / "flat.parquet", lambda i: 0.0)
    assert profile_sigma(load_profile(flat)) == 0.0
    # a table that is not read from a profile file has no measured spread
    assert profile_sigma(SimpleNamespace(source={"kind": "test"})) is None


def test_same_inputs_give_byte_identical_reports(setup):
    p = _profile(setup / "p5.parquet", lambda i: 0.05)
    a, b = setup / "a", setup / "b"
    _fid(setup, p, out_dir=a, jitter_runs=3)
    _fid(setup, p, out_dir=b, jitter_runs=3)
    for name in ("fidelity.json", "fidelity.md"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    rep = json.loads((a / "fidelity.json").read_text())
    assert rep["jitter"]["runs"] == 3 and len(rep["jitter"]["diffs_pct"]["ttft_p90"]) == 3
    assert "jitter floor" in (a / "fidelity.md").read_text()


def test_no_jitter_runs_gives_the_report_without_them(setup):
    """K = 0 leaves the report as it was; K > 0 adds the jitter keys and changes nothing else."""
    p = _profile(setup / "p5.parquet", lambda i: 0.05)
    plain = _fid(setup, p, jitter_runs=0)
    assert "jitter" not in plain
    assert not any("jitter_pct" in c or "within_noise" in c for c in plain["checks"].values())
    jit = _fid(setup, p, jitter_runs=2)
    assert set(jit["jitter"]["floor_pct"]) == set(FIGURES)
    jit.pop("jitter")
    for c in jit["checks"].values():
        c.pop("jitter_pct", None)
        c.pop("within_noise", None)
    assert json.dumps(jit, sort_keys=True, default=str) == json.dumps(plain, sort_keys=True,
                                                                      default=str)


def test_a_profile_without_spread_has_zero_floors(setup):
    """p10 == p90 everywhere: sigma 0, so every jittered run is the profile run itself (which
    also holds the executor path the jitter runs through equal to the table path)."""
    rep = _fid(setup, _profile(setup / "flat.parquet", lambda i: 0.0), jitter_runs=2)
    assert rep["jitter"]["sigma_pct"] == 0.0
    assert all(v == 0.0 for v in rep["jitter"]["floor_pct"].values() if v is not None)
    assert rep["checks"]["ttft_p90"]["jitter_pct"] == 0.0


def test_a_larger_spread_gives_a_larger_floor(setup):
    """Spread 1% (sigma 0.39%) against 20% (sigma 7.8%) on the same 40 requests: the floors
    grow with sigma (TTFT p50 of 40 requests is left out: it jumps between neighbouring
    requests, 3.2% already at sigma 0.39%)."""
    small = _fid(setup, _profile(setup / "s.parquet", lambda i: 0.01), jitter_runs=4)["jitter"]
    big = _fid(setup, _profile(setup / "b.parquet", lambda i: 0.20), jitter_runs=4)["jitter"]
    assert big["sigma_pct"] == pytest.approx(20 / 2.563) and small["sigma_pct"] == pytest.approx(
        1 / 2.563)
    for name in ("ttft_p90", "tpot_p50", "tpot_p90", "e2e_p50", "e2e_p90", "throughput"):
        assert big["floor_pct"][name] > small["floor_pct"][name], name
    assert big["floor_pct"]["e2e_p50"] > 1.0


def test_a_miss_within_target_plus_floor_is_tagged_within_noise():
    """Pass and fail stay as they were; only a miss gets the tag, by |value| <= target + floor."""
    checks = {"ttft_p50": {"value_pct": -4.35, "target_pct": 3.0, "pass": False},
              "ttft_p90": {"value_pct": 6.0, "target_pct": 3.0, "pass": False},
              "tpot_p50": {"value_pct": 0.5, "target_pct": 3.0, "pass": True},
              "step_mape_all": {"value_pct": 5.0, "target_pct": 3.0, "pass": False}}
    report = {"checks": checks}
    apply_jitter(report, {"floor_pct": {"ttft_p50": 1.4, "ttft_p90": 2.9, "tpot_p50": 0.1}})
    assert checks["ttft_p50"]["within_noise"] is True      # 4.35 <= 3 + 1.4
    assert checks["ttft_p90"]["within_noise"] is False     # 6.0 > 3 + 2.9
    assert "within_noise" not in checks["tpot_p50"] and checks["tpot_p50"]["jitter_pct"] == 0.1
    assert "jitter_pct" not in checks["step_mape_all"]     # per-step checks have no jitter floor
    assert [c["pass"] for c in checks.values()] == [False, False, True, False]


def test_cli_option(setup):
    p = _profile(setup / "p5.parquet", lambda i: 0.05)
    args = ["--trace", str(setup / "t.parquet"), "--model", "llama-3.1-8b", "--reference",
            "roofline", "--profile", p, "--json"]
    r = CliRunner().invoke(fidelity, args + ["--out", str(setup / "c1"), "--jitter-runs", "2"],
                           standalone_mode=False)
    assert r.exception is None, r.output
    assert json.loads(r.output)["jitter"]["runs"] == 2
    r = CliRunner().invoke(fidelity, args + ["--out", str(setup / "c2"), "--jitter-runs", "-1"])
    assert r.exit_code == 2 and "jitter-runs" in r.output
