"""The shipped profiles' validation record, the status it gives a profile, and where it shows."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from backends.shipped import (PROFILES_DIR, RULE, VALIDATION_FILE, profile_status, shipped_help,
                              shipped_profiles, status_warning, validation_record)
from traces.errors import SpecschedError

ROOT = Path(__file__).resolve().parents[2]
CONV = ROOT / "traces" / "samples" / "azure_conv_eagle_2k.parquet"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _report(evidence: dict) -> tuple[str, dict]:
    """The evidence's fidelity report: its markdown and the JSON written beside it."""
    md = ROOT / evidence["report"]
    assert md.is_file(), md
    return md.read_text(), json.loads(md.with_suffix(".json").read_text())


# ---- the record against the repository -------------------------------------------------------
def test_record_covers_exactly_the_shipped_profile_files():
    data = json.loads(VALIDATION_FILE.read_text())
    assert data["rule"] == RULE
    assert set(data["profiles"]) == {p.name for _, _, p in shipped_profiles()}
    assert {e["status"] for e in validation_record().values()} <= {"validated", "experimental"}


def test_each_validated_profile_rests_on_a_report_that_met_every_check():
    validated = {n: e for n, e in validation_record().items() if e["status"] == "validated"}
    for name, entry in validated.items():
        ev = entry["evidence"]
        md, rep = _report(ev)
        n = len(rep["checks"])
        assert all(c["pass"] for c in rep["checks"].values()), name
        assert f"{n} of {n} checks met" in md and ev["checks_met"] == f"{n} of {n}", name
        assert (ev["trace"], ev["requests"], ev["reference_run"]) == (
            rep["trace"], rep["requests"], rep["reference"]["recorded_run"]), name
        assert (ROOT / ev["reference_run"] / "summary.json").is_file(), name
        # the report compared this very file: a re-recorded profile needs a new report
        assert ev["profile_sha256"] == rep["profile"]["sha256"] == _sha(PROFILES_DIR / name), name


def test_reports_named_for_other_profiles_say_what_they_missed():
    for name, entry in validation_record().items():
        failing = entry["status"] == "experimental" and "evidence" in entry
        listed = ([entry["evidence"]] if failing else []) + entry.get("other_reports", [])
        for i, ev in enumerate(listed):
            md, rep = _report(ev)
            missed = sorted(k for k, c in rep["checks"].items() if not c["pass"])
            met = f"{len(rep['checks']) - len(missed)} of {len(rep['checks'])}"
            assert sorted(ev["missed"]) == missed, (name, ev["report"])
            assert missed or not (failing and i == 0), (name, ev["report"])  # it failed
            assert ev["checks_met"] == met and f"{met} checks met" in md, (name, ev["report"])
        if entry["status"] == "experimental" and "evidence" in entry:
            assert entry["evidence"]["checks_met"] in entry["reason"], name


def test_the_shipped_statuses():
    got = {p.name: profile_status(p)["status"] for _, _, p in shipped_profiles()}
    assert got == {"llama-3.1-8b__H200.parquet": "validated",
                   "llama-3.1-70b__H200.parquet": "validated",
                   "deepseek-v2-lite__H200.parquet": "validated",
                   "deepseek-v3__H200.parquet": "experimental"}


def test_a_validated_profile_is_backed_by_a_shipped_report_that_meets_every_check():
    """The rule, checked on the record itself: the evidence of each validated profile is a
    fidelity report in the repository whose JSON (beside it) passes every check, against a
    recorded live run that is shipped too, for the very bytes of the shipped profile."""
    root = Path(__file__).resolve().parents[2]
    record = validation_record()
    for _, _, p in shipped_profiles():
        entry = record[p.name]
        if entry["status"] != "validated":
            continue
        ev = entry["evidence"]
        assert ev["profile_sha256"] == _sha(p)
        report = json.loads((root / ev["report"]).with_suffix(".json").read_text())
        assert report["all_pass"] is True
        assert all(c["pass"] for c in report["checks"].values()) and len(report["checks"]) >= 17
        assert (root / ev["reference_run"] / "steps.parquet").is_file()


# ---- the rules, on a folder of our own ---------------------------------------------------------
def _folder(tmp_path, profile_file, entry):
    d = tmp_path / "shipped"
    d.mkdir(parents=True)
    shutil.copy(profile_file, d / profile_file.name)
    record = {"rule": RULE, "profiles": {} if entry is None else {profile_file.name: entry}}
    (d / "validation.json").write_text(json.dumps(record))
    return d


def test_a_profile_is_known_by_its_content(tmp_path, profile_file):
    entry = {"status": "validated", "evidence": {"report": "r.md",
                                                 "profile_sha256": _sha(profile_file)}}
    d = _folder(tmp_path, profile_file, entry)
    # the original file, outside the folder, has the same bytes: it is the shipped profile
    s = profile_status(profile_file, directory=d)
    assert (s["status"], s["file"]) == ("validated", profile_file.name)
    assert status_warning(s) is None
    other = tmp_path / "mine.parquet"
    other.write_bytes(profile_file.read_bytes() + b"\0")
    mine = profile_status(other, directory=d)
    assert mine["status"] == "not shipped" and status_warning(mine) is None
    assert shipped_help(d) == "shipped profiles: llama-3.1-8b (H200)"


def test_a_validated_entry_whose_file_was_re_recorded_is_experimental(tmp_path, profile_file):
    entry = {"status": "validated", "evidence": {"report": "old.md", "profile_sha256": "0" * 64}}
    s = profile_status(profile_file, directory=_folder(tmp_path, profile_file, entry))
    assert s["status"] == "experimental" and "old.md" in s["reason"]
    assert status_warning(s).startswith(f"experimental profile {profile_file.name}: ")


def test_an_unlisted_or_experimental_profile_is_experimental(tmp_path, profile_file):
    s = profile_status(profile_file, directory=_folder(tmp_path, profile_file, None))
    assert s["status"] == "experimental" and "not in the validation record" in s["reason"]
    entry = {"status": "experimental", "reason": "no live run yet"}
    d = _folder(tmp_path / "b", profile_file, entry)
    s = profile_status(profile_file, directory=d)
    assert status_warning(s) == f"experimental profile {profile_file.name}: no live run yet"
    assert shipped_help(d) == "shipped profiles: llama-3.1-8b (H200, experimental)"


@pytest.mark.parametrize("entry, match", [
    ({"status": "ok"}, "is not one of validated, experimental"),
    ({"status": "validated"}, "needs its 'evidence'"),
    ({"status": "experimental"}, "needs its 'reason'"),
])
def test_a_bad_record_is_refused_naming_the_entry(tmp_path, profile_file, entry, match):
    d = _folder(tmp_path, profile_file, entry)
    with pytest.raises(SpecschedError, match=f"{profile_file.name}: .*{match}"):
        profile_status(profile_file, directory=d)


# ---- where the status shows ----------------------------------------------------------------------
def _help(command) -> str:
    r = CliRunner().invoke(command, ["--help"], standalone_mode=False)
    assert r.exception is None, r.output
    return " ".join(r.output.split())


def test_help_lists_each_shipped_profile_with_its_status():
    from analysis.cli_plan import plan
    from analysis.fidelity import fidelity
    from simulator.cli import simulate

    for command in (simulate, plan, fidelity):
        text = _help(command)
        assert shipped_help() in text
        assert "deepseek-v2-lite (H200)" in text
        assert "deepseek-v3 (H200, experimental)" in text
        assert "llama-3.1-70b (H200)" in text and "llama-3.1-8b (H200)" in text


def _simulate(tmp_path, model):
    from simulator.cli import simulate

    out = tmp_path / model
    r = CliRunner().invoke(simulate, ["--trace", str(CONV), "--model", model, "--limit", "30",
                                      "--no-report", "--out", str(out)], standalone_mode=False)
    assert r.exception is None, r.output
    return json.loads((out / "summary.json").read_text()), " ".join(r.output.split())


def test_a_summary_warns_for_an_experimental_profile_and_not_for_a_validated_one(
        tmp_path, monkeypatch):
    summary, printed = _simulate(tmp_path, "deepseek-v3")
    status = summary["backend_detail"]["validation"]
    assert (status["status"], status["file"]) == ("experimental", "deepseek-v3__H200.parquet")
    warning = f"experimental profile deepseek-v3__H200.parquet: {status['reason']}"
    met = validation_record()["deepseek-v3__H200.parquet"]["evidence"]["checks_met"]
    assert warning in summary["warnings"] and f"{met} checks" in warning
    assert "warning: experimental profile deepseek-v3__H200.parquet" in printed
    # a record of our own, beside a copy of the 8B profile, validates it
    p8 = PROFILES_DIR / "llama-3.1-8b__H200.parquet"
    d = tmp_path / "shipped"
    d.mkdir()
    shutil.copy(p8, d / p8.name)
    (d / "validation.json").write_text(json.dumps({"rule": RULE, "profiles": {p8.name: {
        "status": "validated", "evidence": {"report": "r.md", "profile_sha256": _sha(p8)}}}}))
    import backends.shipped

    monkeypatch.setattr(backends.shipped, "PROFILES_DIR", d)
    summary, printed = _simulate(tmp_path, "llama-3.1-8b")
    assert summary["backend_detail"]["validation"]["status"] == "validated"
    assert not any("experimental" in w for w in summary["warnings"])
    assert "experimental" not in printed


def test_fidelity_marks_its_profile_side_experimental(tmp_path):
    from analysis.fidelity import run_fidelity

    out = tmp_path / "fid"
    rep = run_fidelity(CONV, "deepseek-v3", out_dir=out, reference="roofline", limit=30)
    assert rep["profile"]["validation"]["status"] == "experimental"
    side = json.loads((out / "profile" / "summary.json").read_text())
    assert any(w.startswith("experimental profile deepseek-v3__H200.parquet: ")
               for w in side["warnings"])
    reason = validation_record()["deepseek-v3__H200.parquet"]["reason"]
    assert f"Profile status: experimental: {reason}" in (out / "fidelity.md").read_text()
