"""``specsched calibrate`` end to end on the CPU (AITER's Triton kernels under the Triton
interpreter, graph sections launched eagerly: a CPU has no graphs)."""

from __future__ import annotations

import json

import pytest

from tests.aiter.conftest import INTERPRETED_MARKS, TINY_PROFILE, cpu_profiler_prelude, run_interpreted

pytestmark = INTERPRETED_MARKS
#: the pass group of each (kind, graph), as the calibration names its factors
GROUP = {("verify", True): "verify_graph", ("verify", False): "verify_eager",
         ("draft", True): "draft_graph", ("draft", False): "draft_eager",
         ("draft_extend", True): "extend_graph", ("draft_extend", False): "extend_eager",
         ("prefill", False): "prefill"}


def test_calibrate_scales_the_grid_by_the_fitted_factors(tmp_path):
    """A tiny base (with 3 held-out rows) is calibrated with 10 anchors and 4 new held-out
    points: every grid row of the base comes out scaled by its group's factor, which is the
    median of the group's measured / base ratios; the base's held-out rows are dropped, the new
    ones are split=heldout; the file loads as a profile and the base is untouched."""
    base, out = tmp_path / "tiny.parquet", tmp_path / "tiny_cal.parquet"
    res = run_interpreted(f"""
import hashlib, json
from backends.aiter import bridge, executor
from backends.aiter.runner import Runner
from backends.aiter.profiling import ProfileSpec, run_profile
from backends.aiter.calibrate_sweep import run_calibrate
from backends.models import ModelShape
from backends.profile import grid_rows, heldout_rows, load_profile, read_profile

{cpu_profiler_prelude('[1, 2, 3]')}
{TINY_PROFILE}
run_profile(m, {str(base)!r}, spec, command='pytest', heldout=3, heldout_seed=3)
sha = hashlib.sha256(open({str(base)!r}, 'rb').read()).hexdigest()
s = run_calibrate(m, {str(out)!r}, {str(base)!r}, spec, anchors=10, heldout=4, seed=5,
                  budget_s=600, command='pytest-cal')
b_rows, _ = read_profile({str(base)!r})
o_rows, meta = read_profile({str(out)!r})
t = load_profile({str(out)!r})
print(json.dumps({{'s': s, 'base': b_rows.to_pylist(), 'out': o_rows.to_pylist(),
                  'cal': meta['calibration'], 'notes': meta['notes'],
                  'src_cal': 'calibration' in t.source,
                  'sha_after': hashlib.sha256(open({str(base)!r}, 'rb').read()).hexdigest(),
                  'sha': sha}}))
""")
    d = json.loads(res.strip().splitlines()[-1])
    assert d["sha_after"] == d["sha"] and d["src_cal"]
    cal = d["cal"]
    # anchors: base grid rows, at least 2 in every group present, each ratio measured / base
    key = lambda r: (r["kind"], r["graph"], r["bs"], r["width"], r["kv_len"], r["tokens"])  # noqa: E731
    base_grid = {key(r): r for r in d["base"] if r["split"] == "grid"}
    assert len(cal["anchors"]) == d["s"]["anchors"] and cal["skipped_for_budget"] == []
    per = {}
    for a in cal["anchors"]:
        assert a["base_s"] == base_grid[key(a)]["latency_s"]
        assert a["ratio"] == pytest.approx(a["measured_s"] / a["base_s"])
        per.setdefault(GROUP[(a["kind"], a["graph"])], []).append(a["ratio"])
    assert set(per) == set(GROUP.values()) and all(len(v) >= 2 for v in per.values())
    for g, rs in per.items():
        rs = sorted(rs)
        med = (rs[(len(rs) - 1) // 2] + rs[len(rs) // 2]) / 2
        assert cal["factors"][g]["factor"] == pytest.approx(med) and cal["factors"][g]["n"] == len(rs)
    # the output: the base grid scaled per group, the base's 3 held-out rows dropped, 4 new ones
    out_grid = [r for r in d["out"] if r["split"] == "grid"]
    out_held = [r for r in d["out"] if r["split"] == "heldout"]
    assert sorted(map(key, out_grid)) == sorted(base_grid)
    for r in out_grid:
        f = cal["factors"][GROUP[(r["kind"], r["graph"])]]["factor"]
        b = base_grid[key(r)]
        assert (r["latency_s"], r["p10_s"], r["p90_s"]) == pytest.approx(
            (b["latency_s"] * f, b["p10_s"] * f, b["p90_s"] * f))
    assert cal["base_heldout_rows_dropped"] == 3 and len(out_held) == 4 == d["s"]["heldout"]
    assert not set(map(key, out_held)) & set(base_grid)
    assert cal["base"] == "tiny.parquet" and cal["base_sha256"] == d["sha"]
    assert cal["machine"]["name"] and cal["command"] == "pytest-cal"
    assert any(isinstance(n, str) and n.startswith("calibrated by `specsched calibrate`")
               for n in d["notes"])
    assert [n["heldout"]["points"] for n in d["notes"] if isinstance(n, dict) and "heldout" in n] == [4]


def test_calibrate_measures_the_anchors_a_workload_weights(tmp_path):
    """With a workload (``--trace``'s callback, given here by hand: 1 s on the verify graph of
    1 request at KV 16 and 1 s on the 8-token prefill), 4 anchors go 2 to verify graphs and 2 to
    prefill: the verify graph's weighted row and its other KV line, and the one weighted prefill
    row (the other is not where the workload runs).  Every other group gets none and takes the
    median of all anchors; the calibration records the workload."""
    base, out = tmp_path / "tiny.parquet", tmp_path / "tiny_cal.parquet"
    res = run_interpreted(f"""
import json
from backends.aiter import bridge, executor
from backends.aiter.runner import Runner
from backends.aiter.profiling import ProfileSpec, run_profile
from backends.aiter.calibrate_sweep import run_calibrate
from backends.heldout import HeldoutPoint
from backends.models import ModelShape
from backends.profile import read_profile

{cpu_profiler_prelude('[1, 2, 3]')}
{TINY_PROFILE}
run_profile(m, {str(base)!r}, spec, command='pytest', heldout=0)
w = {{HeldoutPoint('verify', True, 1, 1, 16, 1): 1.0, HeldoutPoint('prefill', False, 1, 0, 0, 8): 1.0}}
info = {{'trace': 'by-hand', 'requests': 0}}
run_calibrate(m, {str(out)!r}, {str(base)!r}, spec, anchors=4, budget_s=600, command='pytest-wl',
              workload=lambda grid: (w, info))
print(json.dumps(read_profile({str(out)!r})[1]['calibration']))
""")
    cal = json.loads(res.strip().splitlines()[-1])
    shapes = sorted((a["kind"], a["graph"], a["bs"], a["width"], a["kv_len"], a["tokens"])
                    for a in cal["anchors"])
    assert shapes == [("prefill", False, 1, 0, 0, 8), ("verify", True, 1, 1, 16, 1),
                      ("verify", True, 1, 1, 64, 1)]
    assert cal["workload"] == {"trace": "by-hand", "requests": 0}
    assert cal["groups"]["verify_graph"]["weight_share"] == 0.5
    assert {g for g, f in cal["factors"].items() if f["source"] == "all anchors"} == {
        "verify_eager", "draft_graph", "draft_eager", "extend_graph", "extend_eager"}


def _profiled_on_h200_calibrated_on_h100(base, out, residual: str = "group") -> str:
    """The start of an interpreted script: the tiny profile recorded as on an H200 to ``base``,
    then ``run_calibrate`` of it as on an H100 to ``out`` (summary ``s``), under ``residual``."""
    return f"""
import json
from backends.aiter import bridge, executor
from backends.aiter.runner import Runner
from backends.aiter.profiling import ProfileSpec, run_profile
from backends.aiter.calibrate_sweep import run_calibrate
from backends.models import ModelShape
from backends.profile import grid_rows, read_profile

{cpu_profiler_prelude('[1, 2, 3]')}
{TINY_PROFILE}
executor.gpu_info = lambda: {{'name': 'NVIDIA H200'}}
run_profile(m, {str(base)!r}, spec, command='pytest')
executor.gpu_info = lambda: {{'name': 'NVIDIA H100 80GB HBM3'}}
s = run_calibrate(m, {str(out)!r}, {str(base)!r}, spec, anchors=10, seed=5, budget_s=600,
                  command='pytest-cal', residual={residual!r})
"""


def test_calibrate_on_another_gpu_model_fits_against_the_fitted_prior(tmp_path):
    """``run_calibrate`` on an H100 (``gpu_info`` says so here) of a base recorded on an H200:
    the default prior is recorded as ``prior_for`` chooses it from the recorded anchors (the
    roofline at the attention power they choose: here both "GPUs" are this CPU, so which power
    wins is timing noise), and every grid row comes
    out as the base's times its group's factor times that prior; each factor is the median of
    its anchors' measured / (base x prior)."""
    base, out = tmp_path / "tiny.parquet", tmp_path / "tiny_h100.parquet"
    res = run_interpreted(_profiled_on_h200_calibrated_on_h100(base, out) + f"""
from backends.calibrate_prior import prior_for
key = ('kind', 'graph', 'bs', 'width', 'kv_len', 'tokens')
b = {{tuple(r[k] for k in key): r['latency_s']
     for r in grid_rows(read_profile({str(base)!r})[0]).to_pylist()}}
o_rows, meta = read_profile({str(out)!r})
cal = meta['calibration']
fn, note = prior_for(m, 'NVIDIA H200', 'NVIDIA H100 80GB HBM3', 'fitted', cal['anchors'])
prior = fn or (lambda r: 1.0)
rows = [dict(r, ratio=r['latency_s'] / b[tuple(r[k] for k in key)], prior=prior(r))
        for r in grid_rows(o_rows).to_pylist()]
resid = [a['measured_s'] / a['base_s'] / prior(a) for a in cal['anchors']]
print(json.dumps({{'s': s, 'prior': cal['prior'], 'note': note, 'factors': cal['factors'],
                  'rows': rows, 'anchors': cal['anchors'], 'resid': resid}}))
""")
    d = json.loads(res.strip().splitlines()[-1])
    assert d["prior"] == d["note"] and d["prior"]["rule"] == "fitted"
    assert (d["prior"]["base_sheet"], d["prior"]["here_sheet"]) == ("H200", "H100")
    assert d["s"]["prior"]["attention_power"] == d["note"]["attention_power"]
    assert d["note"]["attention_power"] in [i / 10 for i in range(11)]
    per = {}
    for a, r in zip(d["anchors"], d["resid"]):
        per.setdefault(GROUP[(a["kind"], a["graph"])], []).append(r)
    for g, rs in per.items():
        rs = sorted(rs)
        assert d["factors"][g]["factor"] == pytest.approx((rs[(len(rs) - 1) // 2]
                                                          + rs[len(rs) // 2]) / 2)
    for r in d["rows"]:
        f = d["factors"][GROUP[(r["kind"], r["graph"])]]
        want = f["factor"] * (r["prior"] if f.get("applied", True) else 1.0)
        assert r["ratio"] == pytest.approx(want, rel=1e-9)


def test_calibrate_with_residual_by_tokens_is_the_refit_of_its_own_anchors(tmp_path):
    """``run_calibrate(residual="tokens")`` on an H100 of an H200 base records its residual table
    and writes the rows that re-fitting its own anchors with ``--anchors-from --residual
    tokens`` writes (both paths share one fit); against the default re-fit of those anchors,
    each grid row at a token count the table lists is that row times its group's residual
    there, and the factors and prior are the default's."""
    base, out = tmp_path / "tiny.parquet", tmp_path / "tiny_h100_tokens.parquet"
    res = run_interpreted(_profiled_on_h200_calibrated_on_h100(base, out, "tokens") + f"""
from backends.calibrate_refit import refit_calibration
g = refit_calibration(m, {str(out)!r}, {str(base)!r}, {str(tmp_path / 'g.parquet')!r})
t = refit_calibration(m, {str(out)!r}, {str(base)!r}, {str(tmp_path / 't.parquet')!r},
                      residual='tokens')
rows = lambda p: grid_rows(read_profile(p)[0]).to_pylist()
print(json.dumps({{'s': s, 'g': g, 't': t, 'cal': read_profile({str(out)!r})[1]['calibration'],
                  'out': rows({str(out)!r}), 'rg': rows({str(tmp_path / 'g.parquet')!r}),
                  'rt': rows({str(tmp_path / 't.parquet')!r})}}))
""")
    d = json.loads(res.strip().splitlines()[-1])
    assert d["s"]["residual"] == "tokens" and d["g"]["residual"] == "group"
    assert d["s"]["factors"] == d["g"]["factors"] == d["t"]["factors"]
    assert d["s"]["prior"] == d["g"]["prior"]
    note = d["cal"]["residual"]
    assert note["form"] == "tokens" and note["by_group"]
    key = ("kind", "graph", "bs", "width", "kv_len", "tokens")
    assert [[r[k] for k in key] + [r["latency_s"]] for r in d["out"]] == \
        [[r[k] for k in key] + [r["latency_s"]] for r in d["rt"]]
    line = {g: {int(t): v for t, v in pts} for g, pts in note["by_group"].items()}
    plain = {tuple(r[k] for k in key): r["latency_s"] for r in d["rg"]}
    at_listed = 0
    for r in d["out"]:
        g = GROUP[(r["kind"], r["graph"])]
        want = plain[tuple(r[k] for k in key)]
        if g in line:
            if int(r["tokens"]) not in line[g]:
                continue  # between two listed counts: tests/backends/test_calibrate_residual.py
            want *= line[g][int(r["tokens"])]
            at_listed += 1
        assert r["latency_s"] == pytest.approx(want, rel=1e-5)
    assert at_listed > 0
