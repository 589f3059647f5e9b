"""``benchmarks/fidelity_table.py``: the verdict table computed from fidelity reports' JSON, on
hand-built reports with the real key layout, worked by hand; a malformed report exits 2."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

CONV = "traces/samples/azure_conv_eagle_2k.parquet"
LONG = "traces/samples/synth_longctx_200.parquet"
SHIPPED = "backends/profiles/llama-3.1-8b__H200.parquet"


def _check(ok):
    return {"pass": ok, "target_pct": 3.0, "value_pct": 1.0 if ok else 4.0}


def _report(trace, policy, checks, profile, *, same_gpu=None, kv_lookup="straggler",
            requests=150):
    """A fidelity.json as ``analysis.fidelity.run`` writes it, less the figures."""
    return {
        "all_pass": all(v for v in checks.values() if v is not None),
        "checks": {k: _check(v) for k, v in checks.items()},
        "config": {"backend": {"capture": "all", "gpu": "H200", "kv_lookup": kv_lookup,
                               "name": "profile", "profile": profile["file"]},
                   "cluster": {"replicas": 1, "router": "round-robin"},
                   "controller": {"schedule": ""},
                   "engine": {"policy": policy, "controller": "static", "num_draft_tokens": 4},
                   "model": {"name": "llama-3.1-8b", "tp": 0}, "rate_scale": 1.0, "seed": 0},
        "machines": {"profile_gpu": "a", "reference_gpu": "a" if same_gpu else "b",
                     "same_gpu": same_gpu, "shared_gpus": []},
        "model": "llama-3.1-8b", "not_captured": [], "profile": profile,
        "reference": {"backend": "aiter", "config_notes": [], "describe": "aiter", "detail": {},
                      "recorded_run": "benchmarks/results/x/live"},
        "requests": requests, "runs": {}, "runs_debiased": {}, "steps": {}, "trace": trace}


def _shipped(sha):
    return {"file": f"/somewhere/{SHIPPED}", "sha256": sha, "gpu": {"name": "NVIDIA H200"},
            "validation": {"file": SHIPPED, "status": "validated"}}


CALIBRATED = {"file": "benchmarks/results/d2/llama-3.1-8b__H200.calibrated.parquet",
              "sha256": "c" * 64, "gpu": {"name": "NVIDIA H200"},
              "calibration": {"anchors": 24, "at": "2026-12-04T08:10:14Z",
                              "base": "llama-3.1-8b__H200.parquet", "factors": {"verify_graph": 1.0},
                              "gpu": "NVIDIA H200"},
              "validation": {"status": "not shipped"}}


def _write(results: Path, name: str, report: dict) -> Path:
    path = results / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report))
    path.with_suffix(".md").write_text("# report\n")
    return path


def _results(tmp_path: Path) -> Path:
    """Four reports. d1 (shipped, today's file): conversation, fixed, 4 of 4; d2 (calibrated,
    same GPU): the same, misses the worst band and TTFT p50, 2 of 4; d3 (shipped, today's file):
    the same, misses throughput, 3 of 4; d4 (shipped, an earlier file, backend.kv_lookup=fluid):
    long-context, split, 180 requests, misses TPOT p99 and the held-out check (no value), 1 of 3."""
    today = hashlib.sha256((ROOT / SHIPPED).read_bytes()).hexdigest()
    four = ("step_mape_off_grid", "step_mape_worst_band", "ttft_p50", "throughput")
    r = tmp_path / "results"
    _write(r, "d1/fidelity_conv.json",
           _report(CONV, "fixed", dict.fromkeys(four, True), _shipped(today), same_gpu=False))
    _write(r, "d2/fidelity_conv_calibrated.json",
           _report(CONV, "fixed", {**dict.fromkeys(four, True), "step_mape_worst_band": False,
                                   "ttft_p50": False}, CALIBRATED, same_gpu=True))
    _write(r, "d3/fidelity_conv.json",
           _report(CONV, "fixed", {**dict.fromkeys(four, True), "throughput": False},
                   _shipped(today)))
    _write(r, "d4/fidelity_long_split_fluid.json",
           _report(LONG, "split", {"step_mape_prefill": True, "tpot_p99": False,
                                   "heldout_mape": None}, _shipped("0" * 64),
                   kv_lookup="fluid", requests=180))
    return r


def test_rows_and_summary_worked_by_hand(tmp_path, capsys):
    import fidelity_table as ft

    r = _results(tmp_path)
    out_json = tmp_path / "rows.json"
    assert ft.main(["--results", str(r), "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    got = json.loads(out_json.read_text())
    rows = {Path(x["report"]).parent.name: x for x in got["rows"]}
    assert [Path(x["report"]).parent.name for x in got["rows"]] == ["d2", "d1", "d3", "d4"]
    assert {k: (x["profile"], x["profile_current"]) for k, x in rows.items()} == {
        "d1": ("shipped", True), "d2": ("calibrated", None), "d3": ("shipped", True),
        "d4": ("shipped", False)}
    assert {k: (x["met"], x["checks"], x["missed"]) for k, x in rows.items()} == {
        "d1": (4, 4, []), "d2": (2, 4, ["step_mape_worst_band", "ttft_p50"]),
        "d3": (3, 4, ["throughput"]), "d4": (1, 3, ["heldout_mape", "tpot_p99"])}
    assert {k: (x["trace"], x["policy"], x["requests"], x["same_gpu"], x["what_ifs"])
            for k, x in rows.items()} == {
        "d1": ("conversation", "fixed", 150, False, []),
        "d2": ("conversation", "fixed", 150, True, []),
        "d3": ("conversation", "fixed", 150, None, []),
        "d4": ("long-context", "split", 180, None, ["backend.kv_lookup=fluid"])}
    lines = out.splitlines()
    assert (f"| llama-3.1-8b | conversation | fixed | 150 | calibrated | yes | - | 2 of 4 | "
            f"MAPE worst band, TTFT p50 | {r}/d2/fidelity_conv_calibrated.md |") in lines
    assert (f"| llama-3.1-8b | long-context | split | 180 | shipped† | ? | "
            f"backend.kv_lookup=fluid | 1 of 3 | MAPE held-out, TPOT p99 | "
            f"{r}/d4/fidelity_long_split_fluid.md |") in lines
    # the summary: the best shipped report of the conversation runs is d1 (4 of 4, of two);
    # the long-context split what-if has no calibrated report
    assert ("| llama-3.1-8b | conversation | fixed | - | 2 of 4 (d2/fidelity_conv_calibrated.md; "
            "all met in 0 of 1 report) | 4 of 4 (d1/fidelity_conv.md; all met in 1 of 2 "
            "reports) |") in lines
    assert ("| llama-3.1-8b | long-context | split | backend.kv_lookup=fluid | none | "
            "1 of 3† (d4/fidelity_long_split_fluid.md; all met in 0 of 1 report) |") in lines
    assert [s["calibrated"] and s["calibrated"]["report"] for s in got["summary"]] == [
        f"{r}/d2/fidelity_conv_calibrated.md", None]


def test_coverage_matrix_worked_by_hand(tmp_path):
    """The matrix keeps default runs only: d1 (4 of 4, today's shipped file) outranks d3 (3 of 4)
    in the conversation `fixed` cell, d2 is its calibrated best (2 of 4); d4 is a what-if on an
    earlier file, so long-context `split` stays empty, as does every cell of a model no report
    names."""
    import fidelity_table as ft

    rows = ft.load_rows(_results(tmp_path))
    cells = ft.matrix(rows, ["llama-3.1-8b", "other"])
    conv = cells[("llama-3.1-8b", "conversation", "fixed")]
    assert Path(conv["shipped"]["report"]).parent.name == "d1" and conv["reports"] == 3
    assert Path(conv["calibrated"]["report"]).parent.name == "d2"
    assert cells[("llama-3.1-8b", "long-context", "split")] == {
        "shipped": None, "calibrated": None, "reports": 0}
    table = ft.render_matrix(cells, ["llama-3.1-8b", "other"]).splitlines()
    assert table[0].startswith("| model | conversation `fixed` | conversation `split` |")
    assert table[2] == "| llama-3.1-8b | 4/4 ✓ · cal 2/4 | - | - | - | - | - | - | - |"
    assert table[3] == "| other | - | - | - | - | - | - | - | - |"


def test_calibrated_only_keeps_the_gap(tmp_path, capsys):
    import fidelity_table as ft

    r = _results(tmp_path)
    assert ft.main(["--results", str(r), "--calibrated-only"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln for ln in lines if ln.startswith("| llama")] == [
        f"| llama-3.1-8b | conversation | fixed | 150 | calibrated | yes | - | 2 of 4 | "
        f"MAPE worst band, TTFT p50 | {r}/d2/fidelity_conv_calibrated.md |",
        "| llama-3.1-8b | conversation | fixed | - | 2 of 4 (d2/fidelity_conv_calibrated.md; "
        "all met in 0 of 1 report) |",
        "| llama-3.1-8b | long-context | split | backend.kv_lookup=fluid | none |"]


def test_a_malformed_report_exits_2_with_one_error_line(tmp_path):
    r = _results(tmp_path)
    bad = r / "d5" / "fidelity_bad.json"
    bad.parent.mkdir()
    bad.write_text('{"model": "llama-3.1-8b", ')
    script = str(ROOT / "benchmarks" / "fidelity_table.py")
    res = subprocess.run([sys.executable, script, "--results", str(r)], cwd=tmp_path,
                         capture_output=True, text=True)
    assert res.returncode == 2
    assert res.stdout == ""
    assert res.stderr.splitlines() == [res.stderr.strip()]
    assert res.stderr.startswith(f"error: {bad}: cannot be read as JSON")
    # a report that lacks a key names the file and the key
    bad.write_text(json.dumps({k: v for k, v in json.loads((r / "d1/fidelity_conv.json")
                                                           .read_text()).items()
                               if k != "checks"}))
    res = subprocess.run([sys.executable, script, "--results", str(r)], cwd=tmp_path,
                         capture_output=True, text=True)
    assert (res.returncode, res.stderr) == (2, f"error: {bad}: lacks key 'checks'\n")


def test_a_report_of_todays_profile_outranks_one_of_an_earlier_version():
    import fidelity_table as ft

    def row(met, current, report):
        return {"model": "m", "trace": "conversation", "policy": "fixed", "what_ifs": [],
                "profile": "shipped", "profile_current": current, "met": met, "checks": 4,
                "missed": [], "report": report}

    # 4 of 4 on an earlier version of the file loses to 3 of 4 on today's
    (s,) = ft.summarize([row(4, False, "old.md"), row(3, True, "new.md")])
    assert (s["shipped"]["report"], s["shipped"]["met"], s["shipped"]["all_met"],
            s["shipped"]["reports"]) == ("new.md", 3, 1, 2)
    assert s["calibrated"] is None


def test_docs_writes_the_summary_between_the_markers(tmp_path):
    import fidelity_table as ft

    r = _results(tmp_path)
    doc = tmp_path / "doc.md"
    doc.write_text(f"# T\n\nbefore\n{ft.BEGIN}\nstale table\n{ft.END}\nafter\n")
    assert ft.main(["--results", str(r), "--docs", str(doc)]) == 0
    text = doc.read_text()
    table = ft.render_summary(ft.summarize(ft.load_rows(r)), r)
    assert text == f"# T\n\nbefore\n{ft.BEGIN}\n{table}{ft.END}\nafter\n"
    assert "stale" not in text and table.count("\n") == 4  # header, rule, two groups
    # without the markers: one error line, exit 2, the file as it was
    doc.write_text("no markers\n")
    script = str(ROOT / "benchmarks" / "fidelity_table.py")
    res = subprocess.run([sys.executable, script, "--results", str(r), "--docs", str(doc)],
                         cwd=tmp_path, capture_output=True, text=True)
    assert (res.returncode, res.stdout) == (2, "")
    assert res.stderr.startswith(f"error: {doc}: lacks the lines") and res.stderr.count("\n") == 1
    assert doc.read_text() == "no markers\n"


def test_the_docs_table_is_what_the_shipped_reports_give():
    """docs/backends.md's fidelity table is computed from benchmarks/results, not typed."""
    import fidelity_table as ft

    results = ROOT / "benchmarks" / "results"
    doc = ROOT / "docs" / "backends.md"
    text = doc.read_text()
    i, j = ft.docs_block(text, doc)
    rows = ft.load_rows(results)
    want = ft.render_summary(ft.summarize(rows), results)
    assert text[i:j] == want, "run: python benchmarks/fidelity_table.py --docs docs/backends.md"
    i, j = ft.docs_block(text, doc, ft.MATRIX_BEGIN, ft.MATRIX_END)
    models = ft.shipped_models()
    assert models == ["deepseek-v2-lite", "deepseek-v3", "llama-3.1-70b", "llama-3.1-8b"]
    assert text[i:j] == ft.render_matrix(ft.matrix(rows, models), models), \
        "run: python benchmarks/fidelity_table.py --docs docs/backends.md"


def test_a_calibration_is_current_only_of_todays_file_and_rule(tmp_path, monkeypatch):
    """A calibrated profile counts as today's when its base's sha256 is the shipped file's
    and, on a MoE model, its prefill factor carries the settled rule (``applied``; under
    ``--prefill auto`` kept on the base's GPU model and applied on another); a base of another
    sha256, a MoE fit without the rule or settled the other way, a ``--residual tokens``
    re-fit, and a file not kept in the repository do not (the last: None, cannot tell)."""
    import fidelity_table as ft

    from backends.profile import profile_metadata, write_profile
    from backends.shipped import file_sha256
    from tests.backends.backends_helpers import roofline_profile_rows

    m, rows = roofline_profile_rows()
    today = file_sha256(ROOT / SHIPPED)

    def cal(name, sha, prefill, machine=None, **extra):
        meta = dict(profile_metadata(m, {"name": "H200"}),
                    calibration={"base": "llama-3.1-8b__H200.parquet", "base_sha256": sha,
                                 "factors": {"prefill": prefill}, "base_gpu": {"name": "H200"},
                                 "machine": {"name": machine or "NVIDIA H200"}, **extra})
        write_profile(rows, tmp_path / name, meta)
        return {"file": name}

    monkeypatch.setattr(ft, "ROOT", tmp_path)
    ft._calibration_meta.cache_clear()
    settled = {"factor": 1.0, "measured": 1.03, "applied": False}
    assert ft.calibration_current(cal("a.parquet", today, {"factor": 1.03}), moe=False) is True
    assert ft.calibration_current(cal("b.parquet", "0" * 64, {"factor": 1.03}), moe=False) is False
    assert ft.calibration_current(cal("c.parquet", today, {"factor": 1.03}), moe=True) is False
    assert ft.calibration_current(cal("d.parquet", today, settled), moe=True) is True
    # --prefill auto: a MoE model's prefill kept on the base's GPU model, applied on another
    h100 = "NVIDIA H100 80GB HBM3"
    kept, applied = dict(settled, mode="auto"), {"factor": 1.09, "applied": True, "mode": "auto"}
    assert ft.calibration_current(cal("e.parquet", today, kept), moe=True) is True
    assert ft.calibration_current(cal("f.parquet", today, applied), moe=True) is False
    assert ft.calibration_current(cal("g.parquet", today, applied, h100), moe=True) is True
    assert ft.calibration_current(cal("h.parquet", today, kept, h100), moe=True) is False
    assert ft.calibration_current(cal("i.parquet", today, dict(kept, mode="keep"), h100),
                                  moe=True) is True
    # a --residual tokens re-fit is an opt-in form: never counted as today's default
    by_tokens = {"form": "tokens", "by_group": {"verify_graph": [[1, 0.93], [192, 1.06]]}}
    assert ft.calibration_current(cal("j.parquet", today, {"factor": 1.03}, residual=by_tokens),
                                  moe=False) is False
    assert ft.calibration_current({"file": "gone.parquet"}, moe=False) is None
    assert ft.calibration_current({"file": str(tmp_path / "a.parquet")}, moe=False) is None
    ft._calibration_meta.cache_clear()


def test_misses_within_the_repeat_runs_difference(tmp_path, capsys):
    """Of the reports above, d2 and d3 get a repeat run: d2's TTFT p50 miss (+4.0%) against a
    repeat 1.5% apart lies within 3.0 + 1.5, its worst band (+4.0%, repeat 0.5%) does not; d3's
    throughput miss (+4.0%, repeat 1.0%) is exactly at 3.0 + 1.0, within. d1 has no repeat run
    and d4 compared an earlier file: neither counts."""
    import fidelity_table as ft

    r = _results(tmp_path)
    for name, pct in (("d2/fidelity_conv_calibrated.json", {"ttft_p50": 1.5, "step_mape_worst_band": 0.5}),
                      ("d3/fidelity_conv.json", {"throughput": 1.0})):
        rep = json.loads((r / name).read_text())
        rep["reference_repeats"] = [{"run": "benchmarks/results/y/live"}]
        for k, c in rep["checks"].items():
            c["repeat_pct"] = pct.get(k, 0.1)
        (r / name).write_text(json.dumps(rep))
    got = ft.misses(ft.load_rows(r))
    assert got == {("calibrated", "per-step"): [2, 1, 0], ("calibrated", "whole-run"): [2, 1, 1],
                   ("shipped", "per-step"): [2, 0, 0], ("shipped", "whole-run"): [2, 1, 1]}
    assert ft.main(["--results", str(r), "--misses"]) == 0
    assert "| shipped | whole-run | 2 | 1 | 1 |" in capsys.readouterr().out


def test_a_live_run_on_another_gpu_model_is_kept_apart(tmp_path, capsys):
    """The H200 profile (shipped, or calibrated on an H100 from it) against a run on an H100 is
    left out of every table and shown alone under --other-gpus; a report that names no device
    (older ones) stays in."""
    import fidelity_table as ft

    today = hashlib.sha256((ROOT / SHIPPED).read_bytes()).hexdigest()
    h100 = {"gpu": {"name": "NVIDIA H100 80GB HBM3"}}
    on_h100 = _report(CONV, "fixed", {"ttft_p50": False}, _shipped(today))
    on_h100["reference"]["detail"] = h100
    cal = dict(CALIBRATED, file="benchmarks/results/e/llama-3.1-8b__H200.calibrated.parquet")
    cal_h100 = _report(CONV, "fixed", {"ttft_p50": True}, cal)
    cal_h100["reference"]["detail"] = h100
    on_h200 = _report(CONV, "fixed", {"ttft_p50": True}, _shipped(today))
    on_h200["reference"]["detail"] = {"gpu": {"name": "NVIDIA H200"}}
    assert [ft.on_profile_gpu(x) for x in (on_h100, cal_h100, on_h200)] == [False, False, True]
    assert ft.on_profile_gpu(_report(CONV, "fixed", {}, _shipped(today))) is None
    r = tmp_path / "results"
    _write(r, "e/fidelity_h100.json", on_h100)
    _write(r, "e/fidelity_h100_calibrated.json", cal_h100)
    _write(r, "f/fidelity_h200.json", on_h200)
    assert [Path(x["report"]).name for x in ft.load_rows(r)] == ["fidelity_h200.md"]
    assert sorted(Path(x["report"]).name for x in ft.load_rows(r, other_gpus=True)) == [
        "fidelity_h100.md", "fidelity_h100_calibrated.md"]
    assert ft.main(["--results", str(r), "--other-gpus", "--docs", str(tmp_path / "d.md")]) == 2
    assert "drop --other-gpus" in capsys.readouterr().err


def test_a_fitted_calibration_is_current_only_at_the_power_todays_rule_chooses(tmp_path,
                                                                                monkeypatch):
    """Anchors planted at attention power 0.3 (measured / base = 1.04 x the roofline's H100 /
    H200 ratio at that power, so the fit's cost is 0 there and above 0 elsewhere): a calibration
    recording power 0.3 is current; one recording 0.5, or no prior (``"chosen": "none"``, the
    rule reverted on 2026-12-06), is not; a ``roofline`` note chooses nothing and is current.
    On a MoE model a note with ``prefill_prior: "none"`` (its prefill group fitted without the
    prior, a what-if judged and not adopted on 2026-12-06) is not current either."""
    import fidelity_table as ft

    from backends.calibrate_prior import roofline_prior
    from backends.models import load_model
    from backends.profile import profile_metadata, write_profile
    from backends.shipped import file_sha256
    from tests.backends.backends_helpers import roofline_profile_rows

    _, rows = roofline_profile_rows()
    eight = load_model("llama-3.1-8b")
    truth = roofline_prior(eight, "H200", "H100", 0.3)
    anchors = []
    for kind, bs, width, kv, tok in [("verify", 1, 1, 128, 1), ("verify", 1, 1, 32768, 1),
                                     ("verify", 12, 5, 128, 60), ("verify", 12, 5, 32768, 60),
                                     ("draft", 1, 1, 128, 1), ("draft", 256, 1, 512, 256)]:
        a = {"kind": kind, "graph": True, "bs": bs, "width": width, "kv_len": kv,
             "tokens": tok, "base_s": 1.0}
        anchors.append(dict(a, measured_s=1.04 * truth(a)))
    today = file_sha256(ROOT / SHIPPED)

    def cal(name, prior, model=eight, prefill=None):
        meta = dict(profile_metadata(model, {"name": "H200"}),
                    calibration={"base": "llama-3.1-8b__H200.parquet", "base_sha256": today,
                                 "factors": {"prefill": prefill or {"factor": 1.0}},
                                 "anchors": anchors,
                                 "base_gpu": {"name": "H200"}, "prior": prior,
                                 "machine": {"name": "NVIDIA H100 80GB HBM3"}})
        write_profile(rows, tmp_path / name, meta)
        return {"file": name}

    note = {"rule": "fitted", "base_sheet": "H200", "here_sheet": "H100"}
    monkeypatch.setattr(ft, "ROOT", tmp_path)
    ft._calibration_meta.cache_clear()
    assert ft.calibration_current(cal("a.parquet", dict(note, attention_power=0.3)), False)
    assert ft.calibration_current(cal("b.parquet", dict(note, attention_power=0.5)),
                                  False) is False
    assert ft.calibration_current(cal("c.parquet", dict(note, attention_power=None,
                                                         chosen="none")), False) is False
    assert ft.calibration_current(cal("d.parquet", dict(note, rule="roofline")), False) is True
    # a MoE model: the same shapes planted on V2-Lite's roofline, and prefill anchors flat at
    # 1.09; a re-fit whose prefill took no prior (the what-if of 2026-12-06, not adopted) is not
    # what today's rule makes of them
    v2 = load_model("deepseek-v2-lite")
    truth = roofline_prior(v2, "H200", "H100", 0.3)
    anchors[:] = [dict(a, measured_s=1.04 * truth(a)) for a in anchors] + [
        {"kind": "prefill", "graph": False, "bs": 1, "width": 1, "kv_len": 0, "tokens": t,
         "base_s": 1.0, "measured_s": 1.09} for t in (1, 256, 8192)]
    moe = dict(note, attention_power=0.3)
    applied = {"factor": 1.09, "measured": 1.09, "applied": True, "mode": "auto"}
    assert ft.calibration_current(cal("e.parquet", moe, v2, applied), True)
    assert ft.calibration_current(cal("f.parquet", dict(moe, prefill_prior="none"), v2, applied),
                                  True) is False
    ft._calibration_meta.cache_clear()
