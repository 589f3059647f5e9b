"""The fidelity comparison, exercised on the CPU (reference = roofline instead of live aiter)."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

import simulator
from analysis.fidelity import (compare_runs, fidelity, predict_steps, run_fidelity,
                               step_errors)
from backends import make_executor
from backends.models import load_model
from backends.profile import profile_metadata, write_profile
from backends_helpers import roofline_profile_rows
from simulator.config import SimConfig
from traces import read_trace_arrays
from traces.errors import SpecschedError
from traces.synth import synth


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("fid")
    m, rows = roofline_profile_rows()
    write_profile(rows, d / "p.parquet", profile_metadata(m, {"name": "H200"}))
    synth(d / "t.parquet", n=150, rate=8.0, acceptance="geometric:k=4,alpha=0.7", seed=3)
    return d


def _run(trace_path, backend, policy="pad", executor=None):
    cfg = SimConfig.load(None, {"backend.name": backend, "engine.policy": policy})
    ex = executor or make_executor(backend, model="llama-3.1-8b")
    cap = load_model("llama-3.1-8b").kv_capacity_tokens("H200")
    return simulator.run(read_trace_arrays(trace_path), cfg, ex, kv_capacity_tokens=cap), ex


@pytest.mark.parametrize("policy", ["pad", "split", "ragged"])
def test_predicting_a_run_with_its_own_table_is_exact(setup, policy):
    """Shape pairing reproduces the engine's lookups: a run predicted by the table that timed it
    has zero error (any mistake in the bs/width/KV reconstruction would show up here)."""
    res, ex = _run(setup / "t.parquet", "roofline", policy)
    pred, oog = predict_steps(res.steps, ex.latency_table())
    lat = res.steps.column("latency_s").to_numpy()
    assert np.allclose(pred, lat, rtol=1e-12)
    rep = step_errors(res.steps, ex.latency_table())
    assert rep["mape_all_pct"] < 1e-9 and rep["steps"] == res.steps.num_rows


@pytest.mark.parametrize("policy", ["pad", "ragged"])
def test_straggler_lookups_are_recomputed_as_the_engine_made_them(setup, policy):
    """With the profile's attention metadata, fidelity predicts each step at the straggler-aware
    KV recomputed from kv_mean and kv_max (a live run records only the mean): a profile run is
    then predicted exactly by its own table, although its lookup_kv column is ignored."""
    import pyarrow as pa

    from backends.profile import ProfileExecutor

    m, rows = roofline_profile_rows()
    meta = profile_metadata(m, {"name": "H200"})
    meta["attention"] = {"sms": 132, "kv_heads": 8, "block_q": 4, "target_programs": 528,
                         "min_segments": 16, "max_segments": 128,
                         "slots_per_sm": {"2d": 4, "2d_decode": 6, "3d": 8}}
    path = setup / f"att_{policy}.parquet"
    write_profile(rows, path, meta)
    ex = ProfileExecutor(path, model=load_model("llama-3.1-8b"))
    res, _ = _run(setup / "t.parquet", "profile", policy, executor=ex)
    assert res.summary["kv_lookup"] == "straggler"
    steps = res.steps
    i = steps.column_names.index("lookup_kv")
    kind = np.asarray(steps.column("kind").to_pylist())
    mean = (steps.column("kv_mean").to_numpy() * steps.column("bs").to_numpy()
            / steps.column("bs_padded").to_numpy())
    recorded = steps.column("lookup_kv").to_numpy()
    assert np.any(recorded[kind != "prefill"] > mean[kind != "prefill"] + 1)
    as_live = steps.set_column(i, "lookup_kv", pa.array(np.where(kind == "prefill", recorded, mean)))
    pred, _ = predict_steps(as_live, ex.latency_table())
    assert np.allclose(pred, steps.column("latency_s").to_numpy(), rtol=1e-9)


def test_step_errors_against_a_profile(setup):
    res, _ = _run(setup / "t.parquet", "roofline")
    prof = make_executor("profile", model="llama-3.1-8b", profile=setup / "p.parquet")
    rep = step_errors(res.steps, prof.latency_table(), worst=5)
    assert rep["off_grid_steps"] + rep["on_grid_steps"] == rep["steps"]
    assert set(rep["by_kind"]) == {"verify", "draft", "draft_extend", "prefill"}
    assert len(rep["worst"]) == 5
    errs = [abs(w["error_pct"]) for w in rep["worst"]]
    assert errs == sorted(errs, reverse=True)
    assert sum(b["steps"] for b in rep["by_shape"]) == rep["off_grid_steps"]
    # the profile was made from the roofline, so decode steps are reproduced closely
    assert rep["by_kind"]["verify"]["mape_pct"] < 1.0


def test_compare_runs_side_by_side():
    a = {"ttft_s": {"p50": 0.1, "p90": 0.2, "p99": 0.4, "mean": 0.15},
         "tpot_s": {"p50": 0.01, "p90": 0.02, "p99": 0.03, "mean": 0.012},
         "e2e_s": {"p50": 1, "p90": 2, "p99": 3, "mean": 1.5}, "throughput_tok_s": 100.0,
         "duration_s": 10.0}
    b = json.loads(json.dumps(a))
    b["ttft_s"]["p50"] = 0.103
    c = compare_runs(a, b)
    assert c["ttft_s"]["p50"]["diff_pct"] == pytest.approx(3.0)
    assert c["tpot_s"]["p99"]["diff_pct"] == 0.0


def test_run_fidelity_writes_everything(setup):
    out = setup / "out"
    rep = run_fidelity(setup / "t.parquet", "llama-3.1-8b", out_dir=out, reference="roofline",
                       profile=str(setup / "p.parquet"))
    for name in ("fidelity.json", "fidelity.md", "reference/steps.parquet", "profile/steps.parquet",
                 "reference/summary.json"):
        assert (out / name).exists(), name
    saved = json.loads((out / "fidelity.json").read_text())
    assert saved["checks"].keys() == rep["checks"].keys()
    assert set(saved["checks"]) >= {"step_mape_off_grid", "step_mape_all", "step_mape_verify",
                                    "step_mape_draft", "step_mape_prefill", "ttft_p50", "ttft_p90",
                                    "ttft_p99", "tpot_p50", "tpot_p90", "tpot_p99", "e2e_p50",
                                    "e2e_p99", "throughput"}
    assert any("p10..p90 spread" in x for x in rep["not_captured"])
    assert any("eager verify" in x for x in rep["not_captured"])
    md = (out / "fidelity.md").read_text()
    assert "## What the profile model does not capture" in md and "TTFT p99" in md


def test_cli(setup):
    out = setup / "cli"
    r = CliRunner().invoke(fidelity, ["--trace", str(setup / "t.parquet"), "--model", "llama-3.1-8b",
                                      "--reference", "roofline", "--profile", str(setup / "p.parquet"),
                                      "--out", str(out), "--json"], standalone_mode=False)
    assert r.exception is None, r.output
    assert json.loads(r.output)["model"] == "llama-3.1-8b"
    assert "Example" in fidelity.help
    with pytest.raises(SpecschedError):
        run_fidelity(setup / "t.parquet", "llama-3.1-8b", reference="profile")
    # a missing profile is a clean error listing what is shipped, and nothing is written
    bad = setup / "nothing"
    with pytest.raises(SpecschedError, match="no such profile"):
        run_fidelity(setup / "t.parquet", "llama-3.1-8b", out_dir=bad, reference="roofline",
                     profile=str(setup / "missing.parquet"))
    assert not bad.exists()


def test_recorded_reference_run_gives_the_same_report(setup):
    """A reference run recorded by `simulate` (as on a GPU machine) and read back with
    --reference-run gives the report that running the reference in place gives."""
    from specsched.cli import cli as cli_main

    rec = setup / "recorded"
    r = CliRunner().invoke(cli_main, ["simulate", "--trace", str(setup / "t.parquet"),
                                      "--backend", "roofline", "--model", "llama-3.1-8b",
                                      "--no-report", "--out", str(rec)], standalone_mode=False)
    assert r.exception is None, r.output
    live = run_fidelity(setup / "t.parquet", "llama-3.1-8b", reference="roofline",
                        profile=str(setup / "p.parquet"))
    out = setup / "from_recorded"
    got = run_fidelity(setup / "t.parquet", "llama-3.1-8b", reference="roofline",
                       profile=str(setup / "p.parquet"), reference_run=rec, out_dir=out)
    assert got["runs"] == live["runs"] and got["steps"] == live["steps"]
    assert got["reference"]["recorded_run"] == str(rec)
    assert (out / "fidelity.json").exists() and not (out / "reference").exists()
    # a run of something else is refused, naming what differs, and nothing is written
    for kw, match in ((dict(limit=100), "requests"),
                      (dict(overrides={"engine.policy": "split"}), "engine.policy")):
        bad = setup / f"bad_{match}"
        with pytest.raises(SpecschedError, match=match):
            run_fidelity(setup / "t.parquet", "llama-3.1-8b", reference="roofline",
                         profile=str(setup / "p.parquet"), reference_run=rec, out_dir=bad, **kw)
        assert not bad.exists()
    with pytest.raises(SpecschedError, match="not a results folder"):
        run_fidelity(setup / "t.parquet", "llama-3.1-8b", reference="roofline",
                     profile=str(setup / "p.parquet"), reference_run=setup)


@pytest.mark.parametrize("damage, match", [
    ("passes", "steps.parquet has no 'passes' column"),
    ("kv_mean", "steps.parquet has no 'kv_mean' column"),
    ("unfinished", "the recorded run finished no request")])
def test_a_recorded_run_lacking_what_the_comparison_needs_is_refused(setup, tmp_path, damage,
                                                                       match):
    """A results folder loads without the optional ``passes`` and ``kv_mean`` step columns, and
    with a summary whose requests all lack TTFT and E2E (none finished), but a comparison needs
    them: each is refused naming what is missing, and nothing is written."""
    import pyarrow.parquet as pq

    from specsched.cli import cli as cli_main

    rec = tmp_path / "rec"
    r = CliRunner().invoke(cli_main, ["simulate", "--trace", str(setup / "t.parquet"),
                                      "--backend", "roofline", "--model", "llama-3.1-8b",
                                      "--no-report", "--out", str(rec)], standalone_mode=False)
    assert r.exception is None, r.output
    if damage == "unfinished":
        summary = json.loads((rec / "summary.json").read_text())
        summary.update(ttft_s=None, tpot_s=None, e2e_s=None)
        (rec / "summary.json").write_text(json.dumps(summary))
    else:
        steps = pq.read_table(rec / "steps.parquet")
        pq.write_table(steps.drop_columns([damage]), rec / "steps.parquet")
    out = tmp_path / "out"
    with pytest.raises(SpecschedError, match=match):
        run_fidelity(setup / "t.parquet", "llama-3.1-8b", reference="roofline",
                     profile=str(setup / "p.parquet"), reference_run=rec, out_dir=out)
    assert not out.exists()


def test_a_recorded_run_names_its_own_trace_and_model(setup, tmp_path, monkeypatch):
    """`fidelity --reference-run RUN` alone takes the trace and model RUN's summary.json
    recorded; without a recorded run both are asked for; a recorded trace that is not there is
    refused, naming it."""
    import shutil

    from specsched.cli import cli as cli_main

    trace = tmp_path / "t.parquet"
    shutil.copy(setup / "t.parquet", trace)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli_main, ["simulate", "--trace", "t.parquet", "--backend", "roofline",
                                      "--model", "llama-3.1-8b", "--no-report", "--out", "rec"],
                           standalone_mode=False)
    assert r.exception is None, r.output
    common = ["--reference", "roofline", "--profile", str(setup / "p.parquet"), "--json",
              "--jitter-runs", "0", "--offset-pct", "0", "--reference-run", "rec"]
    r = CliRunner().invoke(fidelity, [*common, "--out", "a"], standalone_mode=False)
    assert r.exception is None, r.output
    short = json.loads(r.output)
    r = CliRunner().invoke(fidelity, [*common, "--out", "b", "--trace", "t.parquet",
                                      "--model", "llama-3.1-8b"], standalone_mode=False)
    assert r.exception is None, r.output
    full = json.loads(r.output)
    assert short["model"] == "llama-3.1-8b"
    assert short["steps"] == full["steps"] and short["runs"] == full["runs"]
    r = CliRunner().invoke(fidelity, ["--reference", "roofline", "--model", "llama-3.1-8b",
                                      "--out", "c"], standalone_mode=False)
    assert isinstance(r.exception, SpecschedError) and "--trace: required unless" in str(r.exception)
    trace.rename(tmp_path / "moved.parquet")
    r = CliRunner().invoke(fidelity, [*common, "--out", "d"], standalone_mode=False)
    assert isinstance(r.exception, SpecschedError)
    assert "replayed t.parquet, which is not there" in str(r.exception)
    assert not (tmp_path / "c").exists() and not (tmp_path / "d").exists()


def test_a_recorded_run_of_the_first_requests_is_compared_over_those_requests(setup):
    """A run recorded with `simulate --limit 100` is compared over the trace's first 100
    requests without restating --limit; a --limit that contradicts it is refused."""
    from specsched.cli import cli as cli_main

    rec = setup / "recorded100"
    r = CliRunner().invoke(cli_main, ["simulate", "--trace", str(setup / "t.parquet"),
                                      "--backend", "roofline", "--model", "llama-3.1-8b",
                                      "--limit", "100", "--no-report", "--out", str(rec)],
                           standalone_mode=False)
    assert r.exception is None, r.output
    kw = dict(reference="roofline", profile=str(setup / "p.parquet"), reference_run=rec)
    stated = run_fidelity(setup / "t.parquet", "llama-3.1-8b", limit=100, **kw)
    implied = run_fidelity(setup / "t.parquet", "llama-3.1-8b", **kw)
    assert implied["runs"] == stated["runs"] and implied["steps"] == stated["steps"]
    assert implied["requests"] == 100
    assert any("first 100 requests" in n for n in implied["reference"]["config_notes"])
    assert not any("first" in n for n in stated["reference"]["config_notes"])
    with pytest.raises(SpecschedError, match="80 requests|100 requests"):
        run_fidelity(setup / "t.parquet", "llama-3.1-8b", limit=80, **kw)


def test_profiles_recorded_before_queued_timing_are_flagged():
    from types import SimpleNamespace

    from analysis.fidelity import not_captured as _not_captured

    old = SimpleNamespace(source={"notes": ["latency_s = median of GPU time (CUDA events)"]})
    new = SimpleNamespace(source={"notes": ["latency_s = median of GPU time; each timed launch "
                                            "queued behind a hold kernel"]})
    flag = "recorded before queued timing"
    assert any(flag in x for x in _not_captured(old, {}))
    assert not any(flag in x for x in _not_captured(new, {}))
    assert not any(flag in x for x in _not_captured(SimpleNamespace(source={}), {}))


def test_debiased_what_if(setup):
    """The report carries the whole-run comparison with each kind's time-weighted signed error
    divided out of the profile, and the table scaling behind it is exact."""
    from analysis.fidelity import debiased_table

    prof = make_executor("profile", model="llama-3.1-8b", profile=setup / "p.parquet")
    table = prof.latency_table()
    t2, f = debiased_table(table, {"verify": {"mean_signed_pct": 25.0},
                                   "draft": {"mean_signed_pct": -20.0}, "prefill": {}})
    assert f == {"verify": 0.8, "draft": 1.25, "prefill": 1.0}
    assert np.allclose(t2.verify_graph.values, table.verify_graph.values * 0.8)
    assert np.allclose(t2.verify_eager.values, table.verify_eager.values * 0.8)
    assert np.allclose(t2.draft_eager.values, table.draft_eager.values * 1.25)
    assert np.array_equal(t2.prefill.values, table.prefill.values)
    assert t2.source["debiased"] == f and "debiased" not in table.source
    # the time-weighted error is used when the report has it (a report written before it: the mean)
    _, f = debiased_table(table, {"prefill": {"mean_signed_pct": 5.0, "time_signed_pct": 9.0}})
    assert f == {"prefill": pytest.approx(1 / 1.09)}
    rep = run_fidelity(setup / "t.parquet", "llama-3.1-8b", reference="roofline",
                       profile=str(setup / "p.parquet"))
    deb = rep["runs_debiased"]
    assert set(deb["factors"]) == {"verify", "draft", "draft_extend", "prefill"}
    for kind, d in rep["steps"]["by_kind"].items():
        assert deb["factors"][kind] == pytest.approx(1 / (1 + d["time_signed_pct"] / 100))
    assert deb["ttft_s"]["p50"]["reference"] == rep["runs"]["ttft_s"]["p50"]["reference"]


def test_repeats_of_the_reference_show_the_floor_under_each_check(setup):
    """--repeat-run: the reference against another recorded run of it. A repeat on another
    "GPU" (here: the roofline with every latency 4% higher) shows up in the whole-run
    differences, in the matched-shape ratio (+4% per kind) and as repeat_pct on the checks."""
    import dataclasses

    from analysis.fidelity import build_report, matched_shape_ratio, render_markdown
    from backends.latency_table import Grid, TableExecutor

    res, ex = _run(setup / "t.parquet", "roofline")
    t = ex.latency_table()

    def scale(g):
        return Grid(axes=g.axes, values=g.values * 1.04)

    slow = dataclasses.replace(t, verify_graph=scale(t.verify_graph),
                               verify_eager=scale(t.verify_eager), draft_graph=scale(t.draft_graph),
                               draft_eager=scale(t.draft_eager), prefill=scale(t.prefill),
                               extend_graph=scale(t.extend_graph),
                               extend_eager=scale(t.extend_eager))
    rep, _ = _run(setup / "t.parquet", "roofline", executor=TableExecutor("roofline", slow))
    ratio = matched_shape_ratio(res.steps, rep.steps)
    for k in ("verify", "draft", "prefill"):
        # the slower run schedules differently, so a bucket's KV mix moves a little
        assert ratio[k]["shapes"] > 0 and ratio[k]["ratio"] == pytest.approx(1.04, abs=0.01)
    assert matched_shape_ratio(res.steps, res.steps)["verify"]["ratio"] == pytest.approx(1.0)
    prof = make_executor("profile", model="llama-3.1-8b", profile=setup / "p.parquet")
    report = build_report(res.steps, res.summary, res.summary, prof.latency_table(),
                          repeats=[("slow", rep.summary, rep.steps)])
    r = report["reference_repeats"][0]
    assert r["runs"]["tpot_s"]["p50"]["diff_pct"] > 2.0  # 4% slower passes show in the runs
    for name in ("ttft_p50", "ttft_p90", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_p50"):
        metric, q = name.rsplit("_", 1)
        assert report["checks"][name]["repeat_pct"] == pytest.approx(
            abs(r["runs"][f"{metric}_s"][q]["diff_pct"]))
    assert report["checks"]["throughput"]["repeat_pct"] == pytest.approx(
        abs(r["runs"]["throughput_tok_s"]["diff_pct"]))
    # per-step figures: every pass of a shape both runs have is 4% slower in the repeat
    for name in ("step_mape_off_grid", "step_mape_all", "step_mape_verify", "step_mape_draft"):
        assert report["checks"][name]["repeat_pct"] == pytest.approx(4.0, abs=1.0), name
    md = render_markdown(report, reference="roofline")
    assert "against a repeat of it" in md and "a repeat differs by" in md
    assert "| verify | " in md and md.count("a repeat differs by |") >= 5  # kinds, axes, shapes,
    # whole runs and checks each carry the floor


def test_repeat_runs_through_the_cli_are_checked_like_the_reference(setup):
    from specsched.cli import cli as cli_main

    recs = []
    # rep_b was recorded without member_kv (as runs before 2026-12-03): it still repeats rep_a
    for name, extra in (("rep_a", []), ("rep_b", ["--set", "engine.record_member_kv=false"]),
                        ("rep_split", ["--policy", "split"])):
        rec = setup / name
        r = CliRunner().invoke(cli_main, ["simulate", "--trace", str(setup / "t.parquet"),
                                          "--backend", "roofline", "--model", "llama-3.1-8b",
                                          "--no-report", "--out", str(rec), *extra],
                               standalone_mode=False)
        assert r.exception is None, r.output
        recs.append(rec)
    got = run_fidelity(setup / "t.parquet", "llama-3.1-8b", reference="roofline",
                       profile=str(setup / "p.parquet"), reference_run=recs[0],
                       repeat_runs=(recs[1],))
    (r,) = got["reference_repeats"]
    assert r["run"] == str(recs[1]) and r["runs"]["ttft_s"]["p99"]["diff_pct"] == 0.0
    assert all(v["ratio"] == pytest.approx(1.0) for v in r["matched_shape_ratio"].values())
    assert got["checks"]["tpot_p99"]["repeat_pct"] == 0.0
    with pytest.raises(SpecschedError, match="engine.policy"):
        run_fidelity(setup / "t.parquet", "llama-3.1-8b", reference="roofline",
                     profile=str(setup / "p.parquet"), reference_run=recs[0],
                     repeat_runs=(recs[2],))


def test_batches_with_a_straggler_are_reported_at_both_coordinates(setup):
    """The report says how many verify and draft steps had a straggler and what the straggler
    rule is worth on them: their error at the profile's coordinate and at the mean KV.  A run
    predicted by the table that timed it (with attention metadata) is exact at the rule's
    coordinate and not at the mean."""
    from backends.profile import ProfileExecutor

    m, rows = roofline_profile_rows()
    meta = profile_metadata(m, {"name": "H200"})
    meta["attention"] = {"sms": 132, "kv_heads": 8, "block_q": 4, "target_programs": 528,
                         "min_segments": 16, "max_segments": 128,
                         "slots_per_sm": {"2d": 4, "2d_decode": 6, "3d": 8}}
    path = setup / "att_straggler.parquet"
    write_profile(rows, path, meta)
    ex = ProfileExecutor(path, model=load_model("llama-3.1-8b"))
    res, _ = _run(setup / "t.parquet", "profile", "pad", executor=ex)
    st = step_errors(res.steps, ex.latency_table())["stragglers"]
    kind = np.asarray(res.steps.column("kind").to_pylist())
    kv_mean = res.steps.column("kv_mean").to_numpy()
    kv_max = res.steps.column("kv_max").to_numpy()
    expect = int(np.sum((kind != "prefill") & (kv_max >= 1.5 * kv_mean) & (kv_max >= 1024)))
    assert st["steps"] == expect > 0
    assert st["mape_pct"] < 1e-9
    assert st["mape_at_mean_kv_pct"] > 0.1 and st["mean_signed_at_mean_kv_pct"] < 0
    from analysis.fidelity import build_report, render_markdown

    md = render_markdown(build_report(res.steps, res.summary, res.summary, ex.latency_table()),
                         reference="aiter")
    assert "## Batches with a straggler" in md and f"{expect} verify and draft steps" in md
    # a run without kv_max (an older results folder) has no such section
    old = res.steps.drop_columns(["kv_max", "lookup_kv"])
    assert step_errors(old, ex.latency_table())["stragglers"] is None


def test_time_signed_error_weighs_long_passes():
    """Worked by hand: two prefills measured 1 ms and 9 ms, predicted 1 ms and 9.9 ms.  Their
    mean per-step error is (0 + 10%) / 2 = +5%; in total time the profile says 10.9 ms for
    10 ms, +9%: what a queue behind them sees, and what the debiased what-if divides out."""
    import pyarrow as pa

    from analysis.fidelity.stats import step_errors

    from backends.latency_table import Grid

    class Table:  # a prefill lookup by hand; its grid lines miss both passes (off the grid)
        attention = None
        source = {}
        prefill = Grid(axes=(np.array([50.0, 8000.0]), np.array([0.0, 1.0])),
                       values=np.ones((2, 2)))

        def prefill_s(self, tokens, prefix):
            return (9.9e-3 if tokens > 1000 else 1e-3), False

    n = 2
    steps = pa.table({
        "kind": ["prefill"] * n, "graph": [False] * n, "bs": [1] * n, "bs_padded": [1] * n,
        "width": [0] * n, "tokens": [100, 4000], "kv_mean": [0.0] * n, "passes": [1] * n,
        "lookup_kv": [0.0] * n, "latency_s": [1e-3, 9e-3]})
    d = step_errors(steps, Table())["by_kind"]["prefill"]
    assert d["mean_signed_pct"] == pytest.approx(5.0)
    assert d["time_signed_pct"] == pytest.approx(9.0)


def test_the_report_says_whether_profile_and_reference_ran_on_the_same_gpu(setup):
    from analysis.fidelity import build_report, render_markdown
    from analysis.fidelity.report import recording_machines

    run = {"backend_detail": {"gpu": {"name": "NVIDIA H200", "uuid": "625d"}}}
    assert recording_machines({"gpu": {"uuid": "e3d6"}}, run) == {
        "profile_gpu": "e3d6", "reference_gpu": "625d", "same_gpu": False, "shared_gpus": []}
    assert recording_machines({"gpu": {"uuid": "625d"}}, run)["same_gpu"] is True
    # a calibrated profile counts as recorded where it was calibrated
    cal = {"gpu": {"uuid": "e3d6"}, "calibration": {"machine": {"uuid": "625d"}}}
    assert recording_machines(cal, run)["same_gpu"] is True
    assert recording_machines({"gpu": {"uuid": "e3d6"}}, run)["shared_gpus"] == []
    # recorded before GPUs' UUIDs were kept: unknown, not a guess
    assert recording_machines({"gpu": {"name": "NVIDIA H200"}}, run) == {
        "profile_gpu": None, "reference_gpu": "625d", "same_gpu": None, "shared_gpus": []}
    assert recording_machines({"gpu": {"uuid": "e3d6"}}, {"backend_detail": None})["same_gpu"] is None
    # in a whole report: a roofline-recorded run and a profile carry no UUIDs, so no line
    res, _ = _run(setup / "t.parquet", "roofline", "pad")
    from backends.profile import ProfileExecutor

    table = ProfileExecutor(setup / "p.parquet", model=load_model("llama-3.1-8b")).latency_table()
    report = build_report(res.steps, res.summary, res.summary, table)
    assert report["machines"]["same_gpu"] is None
    assert "Recorded on:" not in render_markdown(report, reference="aiter")
    report["machines"] = recording_machines({"gpu": {"uuid": "e3d6"}}, run)
    assert ("Recorded on: the profile on GPU e3d6, the reference run on GPU 625d: another GPU."
            in render_markdown(report, reference="aiter"))


def _segment(first, uuid):
    return {"first_call": first, "gpu": {"name": "NVIDIA H200", "uuid": uuid}}


def test_a_profile_or_run_recorded_over_sittings_names_every_gpu_it_used():
    """A profile grown from a journal over three sittings and a run finished from its journal
    on a second GPU: the line names each side's GPUs and the one they share, never "the same
    GPU" from the last sitting alone."""
    from analysis.fidelity.render import recorded_on
    from analysis.fidelity.report import recording_machines

    prof = {"gpu": {"uuid": "82c0"},  # the last sitting's GPU
            "notes": ["text", {"journal": {"gpus": ["12be", "0641", "82c0"]}}]}
    # 7,502 calls replayed from sittings on a122 (two) and 3,514 measured on 0641; a sitting
    # that added nothing (first_call 11,016 of 11,016) is not a GPU the run used
    run = {"backend_detail": {"gpu": {"uuid": "0641"}, "journal": {
        "replayed_calls": 7502, "live_calls": 3514,
        "segments": [_segment(0, "a122"), _segment(4329, "a122"), _segment(7502, "0641"),
                     _segment(11016, "ffff")]}}}
    m = recording_machines(prof, run)
    assert m == {"profile_gpu": "0641, 12be, 82c0", "reference_gpu": "0641, a122",
                 "same_gpu": False, "shared_gpus": ["0641"]}
    assert recorded_on(m) == ("Recorded on: the profile on GPUs 0641, 12be, 82c0, the reference "
                              "run on GPUs 0641, a122: GPU 0641 recorded part of both.")
    # the same profile against a run on a fourth GPU: nothing shared
    other = recording_machines(prof, {"backend_detail": {"gpu": {"uuid": "9bc8"}}})
    assert (other["same_gpu"], other["shared_gpus"]) == (False, [])
    assert recorded_on(other).endswith("the reference run on GPU 9bc8: no GPU in common.")


def test_the_report_names_runs_that_outran_their_holds():
    from analysis.fidelity.report import starved_notes

    run = {"backend_detail": {"runner": {"timing": {
        "timed_runs_still_starved": 53, "still_starved_by_kind": {"eager prefill": 53}}}}}
    prof = {"notes": ["latency_s = median ...", {"held_timing": {
        "timed_runs_still_starved": 4, "still_starved_by_kind": {"eager verify": 4}}}]}
    ref, mine = starved_notes(prof, run)
    assert ref.startswith("the reference run has 53 timed runs") and "eager prefill" in ref
    assert mine.startswith("the profile has 4 timed runs") and "eager verify" in mine
    clean = {"backend_detail": {"runner": {"timing": {"timed_runs_still_starved": 0}}}}
    assert starved_notes({"notes": [{"held_timing": {"timed_runs_still_starved": 0}}]}, clean) == []
    # runs and profiles recorded before the count existed, and roofline runs: nothing to say
    assert starved_notes({}, {"backend_detail": {"gpu": "H200"}}) == []
    assert starved_notes({"notes": None}, {}) == []


def test_a_run_recorded_over_sittings_is_scored_per_sitting():
    """Six steps, the first three replayed from a sitting on a122 and the last three measured on
    0641 (a third sitting added nothing): each sitting's MAPE and mean signed error, overall and
    by kind, over its own steps only; a step the table cannot predict is left out."""
    from analysis.fidelity.render import _sittings_section
    from analysis.fidelity.report import sitting_errors

    err = np.array([-0.10, -0.20, 0.30, -0.02, 0.04, np.nan])
    arrays = {"err": err, "ok": np.isfinite(err),
              "kind": np.array(["verify", "draft", "verify", "verify", "prefill", "prefill"])}
    run = {"backend_detail": {"journal": {
        "replayed_calls": 3, "live_calls": 3,
        "segments": [_segment(0, "a122"), _segment(3, "0641"), _segment(6, "ffff")]}}}
    a, b = sitting_errors(arrays, run)
    assert (a["gpu"], a["first_step"], a["steps"]) == ("a122", 0, 3)
    assert a["mape_pct"] == pytest.approx(20.0)           # (10 + 20 + 30) / 3
    assert a["mean_signed_pct"] == pytest.approx(0.0)     # (-10 - 20 + 30) / 3
    assert a["by_kind"]["verify"]["mean_signed_pct"] == pytest.approx(10.0)  # (-10 + 30) / 2
    assert a["by_kind"]["draft"]["mean_signed_pct"] == pytest.approx(-20.0)
    assert (b["gpu"], b["first_step"], b["steps"]) == ("0641", 3, 2)
    assert b["mape_pct"] == pytest.approx(3.0)            # (2 + 4) / 2
    assert b["by_kind"]["prefill"]["mean_signed_pct"] == pytest.approx(4.0)
    assert "draft" not in b["by_kind"]
    # one sitting, no journal, or a journal that does not cover the steps: no per-sitting figures
    one = {"backend_detail": {"journal": {"replayed_calls": 0, "live_calls": 6,
                                          "segments": [_segment(0, "0641")]}}}
    assert sitting_errors(arrays, one) is None
    assert sitting_errors(arrays, {"backend_detail": {"gpu": {"uuid": "0641"}}}) is None
    short = {"backend_detail": {"journal": {**run["backend_detail"]["journal"], "live_calls": 2}}}
    assert sitting_errors(arrays, short) is None
    # the report's section: one row per sitting
    md = _sittings_section([a, b])
    rows = [ln for ln in md if ln.startswith("| 0 (") or ln.startswith("| 1 (")]
    assert rows[0].split(" | ")[1:5] == ["a122", "0", "3", "20.00%"]
    assert rows[1].split(" | ")[1:5] == ["0641", "3", "2", "3.00%"]
    assert rows[1].endswith("| -2.00% | - | +4.00% |")  # verify, draft, prefill


@pytest.mark.parametrize("n, not_applied, text", [
    (4, 1.03, "prefill 1.0000 (anchors 1.0300, not applied)"),
    (0, None, "prefill 1.0000 (no anchors, not applied)")])
def test_a_calibration_that_kept_its_prefill_rows_says_so(setup, tmp_path, n, not_applied, text):
    """A calibrated profile whose prefill factor was fitted but not applied (``calibrate
    --prefill keep``, or ``auto`` on a MoE model): the report's JSON names the anchors' factor
    under ``not_applied`` and its text prints it beside the factor used, 1; with no prefill
    anchor (its 1.03 the other groups' median) it says so, not 1.03."""
    m, rows = roofline_profile_rows()
    cal = {"machine": {"name": "NVIDIA H200", "uuid": "625d"}, "at": "2026-12-05T00:00:00Z",
           "base": "p.parquet", "anchors": [],
           "factors": {"verify_graph": {"factor": 1.0}, "prefill": {
               "factor": 1.0, "measured": 1.03, "applied": False, "mode": "keep", "n": n}}}
    write_profile(rows, tmp_path / "cal.parquet",
                  dict(profile_metadata(m, {"name": "H200"}), calibration=cal))
    r = CliRunner().invoke(fidelity, ["--trace", str(setup / "t.parquet"), "--model", "llama-3.1-8b",
                                      "--reference", "roofline", "--profile", str(tmp_path / "cal.parquet"),
                                      "--json", "--jitter-runs", "0", "--offset-pct", "0",
                                      "--out", str(tmp_path / "out")], standalone_mode=False)
    assert r.exception is None, r.output
    rep = json.loads(r.output)
    assert rep["profile"]["calibration"]["factors"] == {"verify_graph": 1.0, "prefill": 1.0}
    assert rep["profile"]["calibration"]["not_applied"] == {"prefill": not_applied}
    md = (tmp_path / "out" / "fidelity.md").read_text()
    assert f"factors {text}, verify_graph 1.0000." in md
