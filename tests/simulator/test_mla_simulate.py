"""`simulate` of an MLA + MoE model on a CPU with the shipped DeepSeek-V2-Lite H200 profile."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "traces" / "samples" / "azure_conv_eagle_2k.parquet"


def _simulate(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specsched", "simulate", "--trace", str(SAMPLE),
                           "--model", "deepseek-v2-lite", "--limit", "60", "--no-report",
                           "--out", str(out), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_fixed_policy_runs_on_the_shipped_profile_and_width_8_is_refused(tmp_path):
    proc = _simulate(tmp_path / "fixed", "--policy", "fixed")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "fixed" / "summary.json").read_text())
    assert summary["backend"] == "profile" and summary["config"]["engine"]["mla"] is True
    assert summary["backend_detail"]["profile"].endswith("deepseek-v2-lite__H200.parquet")
    verify = pq.read_table(tmp_path / "fixed" / "steps.parquet").to_pandas()
    verify = verify[verify.kind.astype(str) == "verify"]
    assert set(verify.width) == {4} and verify.graph.all()
    # the shipped profile carries the MLA decode kernel's occupancy: backend.kv_lookup auto
    # resolves to the fluid lookup, and no warning says batches were looked up at their mean KV
    assert summary["config"]["backend"]["kv_lookup"] == "auto" and summary["kv_lookup"] == "fluid"
    assert not any("mean KV length" in w for w in summary["warnings"])
    steps = pq.read_table(tmp_path / "fixed" / "steps.parquet").to_pandas()
    dec = steps[steps.kind.astype(str) != "prefill"]
    mean_launch = dec.kv_mean * dec.bs / dec.bs_padded
    # fluid moves launches off their mean KV, either way (where the long rows sit in the launch
    # decides; a flat stretch of the uniform line inverts to its shortest KV)
    assert (dec.lookup_kv > mean_launch + 1).any() and (dec.lookup_kv < mean_launch - 1).any()

    proc = _simulate(tmp_path / "w8", "--set", "engine.num_draft_tokens=8")
    assert proc.returncode == 2 and not (tmp_path / "w8").exists()
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: engine.num_draft_tokens: 8 is not a width the AITER MLA decode kernels support "
        "(query lengths 1, 2 and 4 per request; 3 is padded to 4)")


def test_three_draft_tokens_on_mla_run_two_drafts_in_a_width_4_launch(tmp_path):
    """num_draft_tokens = 3 on an MLA model: SGLang drafts 2 tokens per request (num_steps 2)
    and the MLA kernels pad the 3-row query to 4, so every verify launch has width 4, each
    request one padded row, and no request commits more than 3 tokens in a step."""
    proc = _simulate(tmp_path / "w3", "--set", "engine.num_draft_tokens=3")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "w3" / "summary.json").read_text())
    steps = pq.read_table(tmp_path / "w3" / "steps.parquet").to_pandas()
    verify = steps[steps.kind.astype(str) == "verify"]
    assert set(verify.width) == {4} and (verify.padded_slots == verify.bs).all()
    # 2 drafts + the bonus token at most per step; one draft-model decode pass per round
    assert 1.0 < summary["accept_len_mean"] <= 3.0
    assert summary["draft_passes"] == summary["decode_iterations"]
    rs = pq.read_table(tmp_path / "w3" / "request_steps.parquet").to_pandas()
    assert rs.tokens.max() == 3


def test_unsafe_derived_on_mla_launches_at_num_draft_tokens(tmp_path):
    """SGLang's MLA metadata keeps num_draft_tokens (4): an unsafe-derived launch is the width-4
    launch whatever the requests proposed, and its violations count rows attributed by 4."""
    proc = _simulate(tmp_path / "u", "--policy", "unsafe-derived")
    assert proc.returncode == 0, proc.stderr
    steps = pq.read_table(tmp_path / "u" / "steps.parquet").to_pandas()
    verify = steps[steps.kind.astype(str) == "verify"]
    assert set(verify.width) == {4} and verify.graph.all()
    assert set(verify["mode"].astype(str)) == {"unsafe-derived"}
    # a launch whose requests all proposed 3 drafts (width 4) is right; rows go wrong only when
    # some request proposed fewer (the next request's rows shift back into its slots) or more
    full = verify[(verify.min_width == 4) & (verify.max_width == 4)]
    assert len(full) and (full.violations == 0).all()
    wrong = verify[verify.violations > 0]
    assert len(wrong) and ((wrong.min_width < 4) | (wrong.max_width > 4)).all()
    assert (wrong.max_width <= 4).any()                  # fewer drafts alone suffice
    assert (verify.violations <= verify.tokens).all()
    proc = _simulate(tmp_path / "u5", "--policy", "unsafe-derived", "--set",
                     "engine.num_draft_tokens=5")
    assert proc.returncode == 2 and "not a width the AITER MLA decode kernels" in proc.stderr


def test_fluid_lookup_moves_mixed_kv_launches_and_is_refused_without_mla(tmp_path):
    """backend.kv_lookup = fluid (backends/mla_fluid.py; the default, auto, on this profile) on
    the shipped V2-Lite profile: the summary says so, a run is byte-identical when repeated and
    to the default's, and mixed-KV verify launches are looked up at other KVs than the straggler
    rule's while uniform ones (one request, no padding) keep theirs; on a profile without the
    MLA decode's occupancy it is an error, and auto there is the straggler rule."""
    runs = {}
    for name, extra in (("rule", ["--set", "backend.kv_lookup=straggler"]),
                        ("fluid", ["--set", "backend.kv_lookup=fluid"]), ("again", [])):
        proc = _simulate(tmp_path / name, "--policy", "fixed", *extra)
        assert proc.returncode == 0, proc.stderr
        runs[name] = tmp_path / name
    summary = json.loads((runs["fluid"] / "summary.json").read_text())
    assert summary["kv_lookup"] == "fluid"
    assert ((runs["fluid"] / "steps.parquet").read_bytes()
            == (runs["again"] / "steps.parquet").read_bytes())
    a = pq.read_table(runs["rule"] / "steps.parquet").to_pandas()
    b = pq.read_table(runs["fluid"] / "steps.parquet").to_pandas()
    va, vb = a[a.kind.astype(str) == "verify"], b[b.kind.astype(str) == "verify"]
    one = (va.bs == 1).to_numpy() & (va.bs_padded == 1).to_numpy()
    n = min(len(va), len(vb))
    assert n > 0
    # steps diverge once one lookup differs; the first verify steps are the same batches
    assert (va.lookup_kv.to_numpy()[:n] != vb.lookup_kv.to_numpy()[:n]).any()
    first = np.flatnonzero(va.lookup_kv.to_numpy()[:n] != vb.lookup_kv.to_numpy()[:n])[0]
    assert not one[first]

    proc = subprocess.run([sys.executable, "-m", "specsched", "simulate", "--trace", str(SAMPLE),
                           "--model", "llama-3.1-8b", "--limit", "20", "--no-report", "--out",
                           str(tmp_path / "dense"), "--set", "backend.kv_lookup=fluid"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and not (tmp_path / "dense").exists()
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "error: backend.kv_lookup = fluid: needs an MLA profile")
    proc = subprocess.run([sys.executable, "-m", "specsched", "simulate", "--trace", str(SAMPLE),
                           "--model", "llama-3.1-8b", "--limit", "20", "--no-report", "--out",
                           str(tmp_path / "dense_auto")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "dense_auto" / "summary.json").read_text())["kv_lookup"] == \
        "straggler"


def test_member_kv_is_each_pass_in_launch_order_and_scores_fluid_as_the_engine_looked_up(tmp_path):
    """steps.parquet member_kv: each decode pass's members' KV (as many as its requests, their
    mean and longest the step's kv_mean and kv_max); within an iteration the draft pass, the
    verify launches together and the draft-extend pass hold the same requests. Looked up from
    those members, the fidelity side's fluid coordinate (analysis.fidelity.lookup.fluid_points,
    plain Python) is the one the compiled engine recorded (lookup_kv) on every verify and
    draft-extend step; with engine.record_member_kv off there is no column."""
    from analysis.fidelity.lookup import lookup_points
    from backends import make_executor

    proc = _simulate(tmp_path / "f", "--policy", "fixed", "--set", "backend.kv_lookup=fluid")
    assert proc.returncode == 0, proc.stderr
    steps = pq.read_table(tmp_path / "f" / "steps.parquet")
    d = steps.to_pydict()
    kinds = [str(k) for k in d["kind"]]
    by_iter: dict[int, dict[str, list]] = {}
    for i, k in enumerate(kinds):
        m = d["member_kv"][i]
        if k == "prefill":
            assert len(m) == d["bs"][i]
            continue
        assert len(m) == d["bs"][i] and max(m) == d["kv_max"][i]
        assert abs(sum(m) / len(m) - d["kv_mean"][i]) <= 1e-9 * max(1.0, d["kv_mean"][i])
        by_iter.setdefault(d["iteration"][i], {}).setdefault(k, []).extend(m)
    full = [v for v in by_iter.values() if {"draft", "verify", "draft_extend"} <= set(v)]
    assert len(full) > 50
    for v in full:
        assert sorted(v["draft"]) == sorted(v["verify"]) == sorted(v["draft_extend"])
    table = make_executor("profile", model="deepseek-v2-lite").latency_table()
    p = lookup_points(steps, table, "fluid")
    # "auto" (the recorded config's default) resolves to fluid on this MLA table, as in the engine
    np.testing.assert_array_equal(lookup_points(steps, table, "auto")["kv"], p["kv"])
    dec = np.isin(np.array(kinds), ("verify", "draft_extend"))
    engine = np.asarray(d["lookup_kv"], float)
    assert p["fluid"][dec].mean() > 0.9  # the form applies to (nearly) every launch
    np.testing.assert_allclose(p["kv"][p["fluid"]], engine[p["fluid"]], rtol=1e-9, atol=1e-6)
    mixed = p["fluid"] & (np.asarray(d["kv_max"]) > np.asarray(d["kv_mean"]) + 1)
    assert mixed.sum() > 20  # and mixed launches are among them
    # so the report scores the run's own verify and draft-extend steps exactly under fluid, and
    # not under the straggler rule
    from analysis.fidelity.stats import step_errors

    fl = step_errors(steps, table, kv_lookup="fluid")
    assert fl["fluid_steps"] == int(p["fluid"].sum())
    for k in ("verify", "draft_extend"):
        assert fl["by_kind"][k]["mape_pct"] < 1e-6
    assert step_errors(steps, table)["by_kind"]["verify"]["mape_pct"] > 0.05

    proc = _simulate(tmp_path / "off", "--policy", "fixed", "--set", "engine.record_member_kv=false")
    assert proc.returncode == 0, proc.stderr
    assert "member_kv" not in pq.read_schema(tmp_path / "off" / "steps.parquet").names


def test_bucket_on_mla_warns_of_widths_the_kernels_lack_and_max_draft_3_clears_it(tmp_path):
    """``bucket`` rounds the sample's proposals (up to 7 drafts) to widths 2, 4 and 8; on an MLA
    model width 8 is no kernel's, so the run says how many launches were that wide, and with
    engine.max_draft 3 (width 4 at most) none are and nothing is said."""
    proc = _simulate(tmp_path / "b", "--policy", "bucket")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    verify = pq.read_table(tmp_path / "b" / "steps.parquet").to_pandas()
    verify = verify[verify.kind.astype(str) == "verify"]
    wide = int((np.maximum(verify.width, verify.max_width) > 4).sum())
    assert wide > 0 and summary["verify_launches_over_mla_width"] == wide
    said = [w for w in summary["warnings"] if "MLA decode kernels do not take" in w]
    assert len(said) == 1 and said[0].startswith(f"{wide} of {len(verify)} verify launches")

    proc = _simulate(tmp_path / "b3", "--policy", "bucket", "--set", "engine.max_draft=3")
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((tmp_path / "b3" / "summary.json").read_text())
    verify = pq.read_table(tmp_path / "b3" / "steps.parquet").to_pandas()
    verify = verify[verify.kind.astype(str) == "verify"]
    assert set(verify.width) <= {2, 4} and summary["verify_launches_over_mla_width"] == 0
    assert not any("MLA decode kernels do not take" in w for w in summary["warnings"])


def test_a_live_mla_run_that_would_launch_too_wide_is_refused_before_it_starts():
    """`--backend aiter` on an MLA model stops at the first launch wider than 4 rows a request;
    the engine refuses such a run up front, naming the request that proposes the most drafts
    (row 1: 5 drafts, width 6) and the setting that avoids it. With max_draft 3 it runs."""
    from simulator import run
    from simulator.config import SimConfig
    from tests.simulator.helpers import make_trace, table_executor
    from traces.errors import SpecschedError

    trace = make_trace([0.0, 0.01], [64, 64], [6, 6], [[(1, 1)] * 5, [(5, 2), (2, 1)]])
    base = SimConfig().replace({"engine.mla": True, "backend.name": "aiter",
                                "engine.policy": "split"})
    try:
        run(trace, base, table_executor(), kv_capacity_tokens=1 << 16)
    except SpecschedError as exc:
        msg = str(exc)
    else:
        raise AssertionError("a split run launching width 6 on MLA was not refused")
    assert "width 6" in msg and "row 1, column draft_tokens" in msg and "proposes 5" in msg
    assert msg.endswith("set engine.max_draft 3")
    capped = base.replace({"engine.max_draft": 3})
    res = run(trace, capped, table_executor(), kv_capacity_tokens=1 << 16)
    assert res.summary["requests"] == 2 and res.summary["verify_launches_over_mla_width"] == 0
    # bucket rounds width 4 up to its bucket: buckets (2, 8) launch 8 even with max_draft 3
    try:
        run(trace, capped.replace({"engine.policy": "bucket", "engine.buckets": (2, 8)}),
            table_executor(), kv_capacity_tokens=1 << 16)
    except SpecschedError as exc:
        assert "width 8" in str(exc) and "engine.buckets within 4" in str(exc)
    else:
        raise AssertionError("bucket 8 on MLA was not refused")
