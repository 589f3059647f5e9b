"""End-to-end: plan, uniformity, sweep and report on real simulations of a shipped sample trace.

The simulations use the roofline backend (no profile file needed) on the first requests of
``traces/samples/azure_conv_eagle_2k.parquet``.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from analysis_helpers import ROOT, SAMPLE, sample_head


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory) -> Path:
    return sample_head(tmp_path_factory.mktemp("trace") / "conv300.parquet", 300)


@pytest.fixture(scope="module")
def roofline():
    from simulator.config import SimConfig

    return SimConfig.load(None, {"backend.name": "roofline"})


def _cli(*args, check_rc=0):
    proc = subprocess.run([sys.executable, "-m", "specsched", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == check_rc, proc.stderr + proc.stdout
    return proc


def _simulate_check(trace, config, scale, slo, out):
    """Simulate as `specsched simulate` does, write the folder, check the SLO from the files."""
    from analysis.results import load_run
    from specsched.setup import load_trace, simulate_to

    cfg = config.replace({"rate_scale": scale})
    simulate_to(load_trace(trace, seed=cfg.seed), cfg, out)
    return slo.check(load_run(out))


# ----------------------------------------------------------------------------- plan
@pytest.mark.parametrize("backend", ["profile", "roofline"])
def test_plan_answer_holds(small_trace, backend, tmp_path):
    from analysis.plan import plan
    from analysis.slo import parse_slo
    from simulator.config import SimConfig
    from specsched.setup import prepare
    from traces.errors import SpecschedError

    config = SimConfig.load(None, {"backend.name": backend})
    try:
        prepare(config)
    except SpecschedError as exc:
        pytest.skip(f"the {backend} backend is unavailable here: {exc}")
    slo = parse_slo("ttft_p90<=500ms,tpot_p99<=20ms")
    res = plan(str(small_trace), slo, config=config, jobs=2)
    best = res.best
    assert best is not None and best.search.status == "ok"
    scale = best.search.answer
    assert best.rate == pytest.approx(scale * res.base_rate)
    # independently of the search: simulate at the reported rate, and at 10% more
    at = _simulate_check(small_trace, config, scale, slo, tmp_path / "at")
    above = _simulate_check(small_trace, config, scale * 1.1, slo, tmp_path / "above")
    assert at.ok, at.failed()
    assert not above.ok
    d = res.to_dict()
    assert d["best"]["checked"]["at"]["meets_slo"] and not d["best"]["checked"]["above"]["meets_slo"]
    # the recorded rate: n / (last - first arrival)
    arr = pq.read_table(small_trace, columns=["arrival_s"])["arrival_s"].to_numpy()
    assert res.base_rate == pytest.approx(len(arr) / (arr[-1] - arr[0]))


def test_plan_cli_json_replicas_and_determinism(small_trace, tmp_path):
    import shlex

    slo = "ttft_p90<=500ms,tpot_p99<=20ms"
    args = ["plan", "--trace", small_trace, "--slo", slo, "--backend", "roofline",
            "--target-rate", "60", "--json", "--jobs", "2"]
    a = json.loads(_cli(*args).stdout)
    b = json.loads(_cli(*args).stdout)
    assert a == b  # same inputs, same answer, byte for byte
    assert a["max_rate_req_s"] > 0
    r = a["replicas"]
    assert r["replicas"] >= math.ceil(60 / a["max_rate_req_s"] - 1e-9)
    assert r["checked"][-1]["meets_slo"] is True
    # the printed `specsched simulate` command replays the answer, which meets the SLO
    cmd = shlex.split(a["reproduce"])
    assert cmd[:2] == ["specsched", "simulate"]
    _cli(*cmd[1:], "--out", tmp_path / "repro", "--no-report", "--no-progress")
    rep = json.loads(_cli("report", tmp_path / "repro", "-o", tmp_path / "r.html", "--slo", slo,
                          "--json").stdout)
    assert rep["slo"]["repro"]["ok"] is True
    assert rep["slo"]["repro"] == a["best"]["checked"]["at"]["check"]


def test_plan_search_ranks_configurations(small_trace, roofline):
    from analysis.grid import parse_axis
    from analysis.plan import plan
    from analysis.slo import parse_slo

    res = plan(str(small_trace), parse_slo("ttft_p90<=500ms,tpot_p99<=8ms"), config=roofline,
               search_axes=[parse_axis("policy=pad,split")], jobs=2, tolerance=0.05)
    ranked = res.ranked()
    assert [p.params["policy"] for p in ranked] != [] and len(ranked) == 2
    rates = [p.rate or 0.0 for p in ranked]
    assert rates == sorted(rates, reverse=True)
    d = res.to_dict()
    assert d["best"]["params"]["policy"] == ranked[0].params["policy"]
    assert len(d["configurations"]) == 2
    if rates[1] > 0:
        assert d["margin_over_runner_up"] == pytest.approx(rates[0] / rates[1] - 1)


@pytest.mark.parametrize("args, fragment", [
    (["--slo", "ttft_p90<=2"], "--slo: 'ttft_p90<=2': give a unit"),
    (["--slo", "ttft_p90<=2s", "--search", "policy"], "--search: 'policy': expected KEY=V1,V2"),
    (["--slo", "ttft_p90<=2s", "--search", "policy=pad,nope"], "unknown policy 'nope'"),
    (["--slo", "ttft_p90<=2s", "--set", "engine.nope=1"], "unknown"),
])
def test_plan_cli_errors(small_trace, args, fragment):
    p = _cli("plan", "--trace", small_trace, "--backend", "roofline", *args, check_rc=2)
    assert fragment in p.stderr and "Traceback" not in p.stderr
    assert p.stderr.startswith("error: ")


# ----------------------------------------------------------------------------- uniformity
def test_uniformity_all_policies(small_trace, roofline, tmp_path):
    from analysis.metrics import col, kind_mask
    from analysis.results import load_run
    from analysis.sweep import write_folder
    from analysis.uniformity import POLICIES, uniformity

    rep = uniformity(str(small_trace), config=roofline, keep_files=True, jobs=2)
    rows = {r["policy"]: r for r in rep["policies"]}
    assert list(rows) == list(POLICIES)
    # the mixing fraction is the ragged run's, one value per iteration from steps.parquet
    write_folder(tmp_path / "ragged", rep["files"]["ragged"])
    steps = load_run(tmp_path / "ragged").steps
    v = kind_mask(steps, "verify")
    it = col(steps, "iteration", np.int64)[v]
    _, first = np.unique(it, return_index=True)
    idw = col(steps, "iter_distinct_widths", np.int64)[v][first]
    assert rep["mixing"]["mixed_iter_frac"] == pytest.approx(np.mean(idw > 1))
    assert rep["mixing"]["iterations"] == len(first)
    assert rep["mixing"]["mixed_iter_frac"] > 0.1  # EAGLE drafts do vary
    # each policy's cost is what it should be
    assert rows["ragged"]["verify_launches_per_iter"] == 1.0
    assert rows["split"]["verify_launches_per_iter"] > 1.0
    assert rows["pad"]["padded_slots"] > 0 and rows["ragged"]["padded_slots"] == 0
    assert rows["truncate"]["truncated_drafts"] > 0 and rows["truncate"]["lost_accepted_tokens"] > 0
    assert rows["pad"]["lost_accepted_tokens"] == 0 and rows["split"]["lost_accepted_tokens"] == 0
    assert rows["ragged"]["throughput_change"] == 0.0
    for p in POLICIES:
        assert (rows[p]["violations"] > 0) == (p == "unsafe-derived")
    u = rep["unsafe_derived"]
    assert u["misattributed_rows"] == rows["unsafe-derived"]["violations"] > 0
    assert 0 < u["misattributed_row_frac"] < 1
    assert rep["gpu_check"] is None


def test_uniformity_on_an_mla_model_runs_fixed_at_each_kernel_width(small_trace):
    """DeepSeek-V2-Lite (MLA): `fixed` runs once per width the MLA kernels take; width 1 drafts
    nothing, width w commits at most w tokens a step, width 3 launches at 4 with one padded row
    per request; the other policies are labelled what-ifs."""
    from analysis.uniformity import uniformity
    from simulator.config import SimConfig

    cfg = SimConfig.load(None, {"model.name": "deepseek-v2-lite"})
    rep = uniformity(str(small_trace), config=cfg, policies=("fixed", "pad"), jobs=1)
    rows = {r["policy"]: r for r in rep["policies"]}
    assert list(rows) == ["fixed@1", "fixed@2", "fixed@3", "fixed@4", "pad"]
    assert rows["fixed@1"]["accept_len_mean"] == 1.0 and rows["fixed@1"]["padded_slots"] == 0
    for w in (2, 3, 4):
        assert 1.0 < rows[f"fixed@{w}"]["accept_len_mean"] <= w
    assert rows["fixed@3"]["padded_slots"] > 0 and rows["fixed@4"]["padded_slots"] == 0
    assert rep["mla"]["what_if_policies"] == ["pad", "ragged"]
    assert rep["mla"]["fixed_widths"] == [1, 2, 3, 4]


def test_uniformity_aiter_needs_a_gpu(small_trace):
    from backends.aiter import bridge

    if bridge.runtime() != "none":
        pytest.skip("a GPU (or the Triton interpreter) is present: the check would run")
    p = _cli("uniformity", "--trace", small_trace, "--backend", "aiter", check_rc=2)
    assert "error: " in p.stderr and "GPU" in p.stderr and "Traceback" not in p.stderr


def test_rebuild_batch_matches_recorded_shape():
    from analysis.uniformity import rebuild_batch

    w, kv = rebuild_batch(bs=6, min_w=2, max_w=6, distinct=3, tokens=22, kv_mean=1000.0,
                          kv_max=3000)
    assert len(w) == 6 and min(w) == 2 and max(w) == 6 and len(set(w)) == 3
    assert sum(w) == 22
    assert max(kv) == 3000 and abs(np.mean(kv) - 1000) < 1


# ----------------------------------------------------------------------------- sweep
GRID = """
[sweep]
trace = "{trace}"

[base]
seed = 0
[base.backend]
name = "roofline"

[axes]
policy = ["pad", "split"]
max_draft = [3, 0]
"""


def _same_results(a: Path, b: Path, names) -> None:
    for n in names:
        for f in ("requests.parquet", "steps.parquet", "request_steps.parquet", "point.json"):
            assert (a / n / f).read_bytes() == (b / n / f).read_bytes(), f"{n}/{f}"
        sa = json.loads((a / n / "summary.json").read_text())
        sb = json.loads((b / n / "summary.json").read_text())
        sa.pop("wall_s"), sb.pop("wall_s")
        assert sa == sb
    assert (a / "manifest.json").read_bytes() == (b / "manifest.json").read_bytes()
    assert (a / "sweep.parquet").read_bytes() == (b / "sweep.parquet").read_bytes()


def test_sweep_pool_inline_identical_and_resume(small_trace, tmp_path):
    from analysis.sweep import load_grid, run_sweep

    g = tmp_path / "grid.toml"
    g.write_text(GRID.format(trace=small_trace))
    grid = load_grid(g)
    names = [p.name for p in grid.points]
    assert names == ["policy=pad__max_draft=3", "policy=pad__max_draft=0",
                     "policy=split__max_draft=3", "policy=split__max_draft=0"]
    pool = run_sweep(grid, tmp_path / "pool", jobs=2)
    inline = run_sweep(grid, tmp_path / "inline", jobs=1)
    assert len(pool.ran) == len(inline.ran) == 4 and not pool.failed
    _same_results(tmp_path / "pool", tmp_path / "inline", names)
    table = pq.read_table(tmp_path / "pool" / "sweep.parquet")
    assert table["point"].to_pylist() == names and "ttft_p90_s" in table.column_names
    # `specsched report OUT` stands for every finished point of the sweep, in grid order
    from analysis.cli import _expand_sweeps

    assert _expand_sweeps([str(tmp_path / "pool")]) == [str(tmp_path / "pool" / n) for n in names]

    # resume: a missing folder and a stray temporary (a killed run) -> only that point runs
    shutil.rmtree(tmp_path / "inline" / names[2])
    (tmp_path / "inline" / f".{names[2]}.tmp-x").mkdir()
    again = run_sweep(grid, tmp_path / "inline", jobs=1)
    assert again.ran == [names[2]] and sorted(again.skipped) == sorted(set(names) - {names[2]})
    assert not list((tmp_path / "inline").glob(".*tmp*"))
    _same_results(tmp_path / "pool", tmp_path / "inline", names)

    # an interruption keeps the finished points; the next run does the rest
    def stop(name, done, total):
        raise KeyboardInterrupt

    cut = run_sweep(grid, tmp_path / "cut", jobs=1, on_point=stop)
    assert cut.interrupted and len(cut.ran) == 1
    man = json.loads((tmp_path / "cut" / "manifest.json").read_text())
    assert [p["status"] for p in man["points"]].count("done") == 1
    rest = run_sweep(grid, tmp_path / "cut", jobs=2)
    assert len(rest.ran) == 3 and len(rest.skipped) == 1
    _same_results(tmp_path / "pool", tmp_path / "cut", names)


def test_sweep_refuses_a_changed_grid(small_trace, tmp_path):
    g = tmp_path / "grid.toml"
    g.write_text(GRID.format(trace=small_trace).replace('["pad", "split"]', '["pad"]')
                 .replace("[3, 0]", "[3]"))
    _cli("sweep", g, "-o", tmp_path / "out", "--jobs", "1")
    g.write_text(g.read_text().replace("seed = 0", "seed = 1"))
    p = _cli("sweep", g, "-o", tmp_path / "out", "--jobs", "1", check_rc=2)
    assert "different configuration" in p.stderr and "--force" in p.stderr
    p = _cli("sweep", g, "-o", tmp_path / "out", "--jobs", "1", "--force", "--json")
    assert json.loads(p.stdout)["ran"] == 1


@pytest.mark.parametrize("text, fragment", [
    ("[sweep]\n", "sweep.trace is required"),
    ("[sweep]\ntrace='nope.parquet'\n", "no such file"),
    ("[sweep]\ntrace='{trace}'\n[axes]\npolicy=[]\n", "non-empty list"),
    ("[sweep]\ntrace='{trace}'\n[axes]\npolicy=['pad','pad']\n", "twice"),
    ("[sweep]\ntrace='{trace}'\n[axes]\npolicy=['pad','nope']\n", "unknown policy 'nope'"),
    ("[sweep]\ntrace='{trace}'\n[axes]\n\"engine.nope\"=[1]\n", "unknown configuration key"),
    ("[sweep]\ntrace='{trace}'\n[oops]\n", "unknown section 'oops'"),
    ("[sweep\n", "not valid TOML"),
])
def test_grid_errors_name_the_file(small_trace, tmp_path, text, fragment):
    from analysis.sweep import load_grid
    from traces.errors import SpecschedError

    g = tmp_path / "g.toml"
    g.write_text(text.replace("{trace}", str(small_trace)))
    with pytest.raises(SpecschedError) as e:
        load_grid(g)
    assert str(g) in str(e.value) and fragment in str(e.value)


@pytest.mark.slow
def test_sweep_16_configurations_ray_equals_pool(small_trace, tmp_path):
    pytest.importorskip("ray", reason="ray is not installed (pip install 'specsched[ray]')")
    from analysis.sweep import load_grid, run_sweep

    g = tmp_path / "grid.toml"
    g.write_text(GRID.format(trace=small_trace).replace('["pad", "split"]',
                                                        '["pad", "split", "bucket", "ragged"]')
                 + "rate_scale = [1.0, 4.0]\n")
    grid = load_grid(g)
    assert len(grid.points) == 16
    pool = run_sweep(grid, tmp_path / "pool", jobs=2)
    ray = run_sweep(grid, tmp_path / "ray", ray="local", jobs=2)
    assert len(pool.ran) == len(ray.ran) == 16 and not ray.failed
    assert ray.backend.startswith("ray")
    _same_results(tmp_path / "pool", tmp_path / "ray", [p.name for p in grid.points])


# ----------------------------------------------------------------------------- report
@pytest.fixture(scope="module")
def two_runs(small_trace, roofline, tmp_path_factory):
    from specsched.setup import load_trace, simulate_to

    base = tmp_path_factory.mktemp("runs")
    trace = load_trace(small_trace)
    for policy in ("pad", "split"):
        simulate_to(trace, roofline.replace({"engine.policy": policy}), base / policy)
    return base / "pad", base / "split"


def test_report_cli_self_contained_and_deterministic(two_runs, tmp_path):
    out = tmp_path / "r.html"
    p = _cli("report", *two_runs, "-o", out, "--slo", "ttft_p90<=2s,tpot_p99<=50ms")
    assert "specsched summary" in p.stdout and "TTFT p90" in p.stdout
    html = out.read_text()
    assert html.count("<figure class='plot'") == 10 and html.count("<svg") >= 10
    lowered = html.lower()
    for external in ("<link", "src=\"http", "src='http", "href=\"http", "url(http", "@import",
                     "<script src"):
        assert external not in lowered
    first = out.read_bytes()
    _cli("report", *two_runs, "-o", out, "--slo", "ttft_p90<=2s,tpot_p99<=50ms")
    assert out.read_bytes() == first  # same inputs, same bytes


def test_report_json_matches_library(two_runs, tmp_path):
    from analysis.metrics import summarize
    from analysis.results import load_run

    p = _cli("report", two_runs[0], "-o", tmp_path / "r.html", "--json")
    got = json.loads(p.stdout)["runs"][0]
    want = json.loads(json.dumps(summarize(load_run(two_runs[0]))))
    assert got == want
    # the engine's own summary agrees where both define the same quantity
    s = json.loads((two_runs[0] / "summary.json").read_text())
    assert got["verify"]["accept_len_mean"] == pytest.approx(s["accept_len_mean"])
    assert got["iterations"]["mixed_iter_frac"] == pytest.approx(s["mixed_iter_frac"])
    assert got["ttft_s"]["p90"] == pytest.approx(s["ttft_s"]["p90"])
    assert got["tpot_s"]["p99"] == pytest.approx(s["tpot_s"]["p99"])


def test_report_errors(tmp_path):
    p = _cli("report", tmp_path / "missing", "-o", tmp_path / "r.html", check_rc=2)
    assert p.stderr.startswith("error: ") and "no such results folder" in p.stderr
    assert not (tmp_path / "r.html").exists()


def _shot():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import screenshot_report as shot
    finally:
        sys.path.pop(0)
    if shot.find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return shot


#: The figures of a report of two runs that are not a rate sweep, in order.
TWO_RUN_FIGURES = ["latency-cdfs", "latency-over-time", "engine-state", "busy-by-kind",
                   "batch-over-time", "histograms", "width-mix", "width-distribution", "padding",
                   "side-by-side"]


def test_report_renders_in_chromium_without_console_problems(two_runs, tmp_path):
    """Headless Chromium: every figure laid out and drawn, and nothing on the console."""
    shot = _shot()
    out = tmp_path / "r.html"
    _cli("report", *two_runs, "-o", out, "--slo", "ttft_p90<=2s,tpot_p99<=50ms",
         "--baseline", two_runs[0])
    res = shot.check(out, tmp_path / "r.png")
    assert [f["figure"] for f in res["per_figure"]] == TWO_RUN_FIGURES
    assert res["figures_rendered"] == res["figures"] == 10
    assert res["console_problems"] == []
    assert res["ok"], res


def test_chromium_console_check_catches_problems(tmp_path):
    """The console check is not blind: a page with an exception, a console.error and a missing
    image gives one problem each."""
    shot = _shot()
    page = tmp_path / "bad.html"
    page.write_text("<html><body><img src='missing.png'><script>console.log('fine');"
                    "console.error('boom');undefinedFn();</script></body></html>")
    problems = shot.page_problems(page)["problems"]
    assert len(problems) == 3, problems
    assert any("console.error: boom" in p for p in problems)
    assert any("undefinedFn is not defined" in p for p in problems)
    assert any("missing.png" in p for p in problems)


def test_goodput_uses_per_request_slo_columns(tmp_path, roofline):
    """A trace with per-request SLO columns: they override the global threshold per request."""
    import pyarrow as pa

    from analysis.results import load_run
    from analysis.slo import parse_slo
    from specsched.setup import load_trace, simulate_to
    from traces import write_trace

    pf = pq.ParquetFile(SAMPLE)
    meta = {k.decode(): json.loads(v) for k, v in pf.metadata.metadata.items()
            if k.decode().startswith("specsched.") and k != b"specsched.format_version"}
    t = pf.read().slice(0, 200)
    tight = pa.array([1e-4 if i % 2 == 0 else None for i in range(200)], pa.float64())
    t = t.append_column("ttft_slo_s", tight)
    write_trace(t, tmp_path / "slo.parquet", metadata=meta)
    simulate_to(load_trace(tmp_path / "slo.parquet"), roofline, tmp_path / "run")
    run = load_run(tmp_path / "run")
    check = parse_slo("ttft_p90<=10s,goodput>=0.1").check(run)
    r = run.requests
    ttft = (r["first_token_s"].to_numpy() - r["arrival_s"].to_numpy())
    odd = np.arange(200) % 2 == 1
    # even requests must reach their first token within 0.1 ms (impossible); odd ones within 10 s
    want = (np.sum(odd & (ttft <= 10.0)) + np.sum(~odd & (ttft <= 1e-4))) / 200
    assert check.goodput["fraction"] == pytest.approx(want)
    assert 0.4 <= want <= 0.5
    assert check.goodput["thresholds"]["per_request_ttft"] == 100


def test_plan_answer_does_not_depend_on_workers(small_trace, roofline):
    from analysis.plan import plan
    from analysis.slo import parse_slo

    slo = parse_slo("ttft_p90<=500ms,tpot_p99<=20ms")
    one = plan(str(small_trace), slo, config=roofline, jobs=1).to_dict()
    two = plan(str(small_trace), slo, config=roofline, jobs=2).to_dict()
    assert one == two
