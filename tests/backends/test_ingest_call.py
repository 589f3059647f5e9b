"""benchmarks/ingest_call.py: a GPU call's files copied into a results folder, its live runs
unpacked and scored, on a shipped call of 2026-12-05 (V2-Lite, 150 requests under `split`)."""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
DAY = ROOT / "benchmarks/results/h200-2026-12-05"


def _files_at(tmp_path: Path) -> Path:
    """What call 4 of that day brought back, as the run tool hands it over."""
    fa = tmp_path / "files_at"
    fa.mkdir()
    with tarfile.open(fa / "live_v2lite_split150.tar.gz", "w:gz") as t:
        t.add(DAY / "live_v2lite_split150", arcname="live_v2lite_split150")
    shutil.copy(DAY / "call4_gpu0.log", fa / "gpu0.log")
    shutil.copy(DAY / "deepseek-v2-lite__H200.calibrated_conv_bucket150.parquet", fa)
    # KEEP_JOURNAL=1 brings back the finished run's journal too, and a cut run's
    (fa / "journal_v2lite_split150.jsonl").write_text('{"specsched_journal": 1}\n')
    (fa / "journal_v2lite_cut150.jsonl").write_text('{"specsched_journal": 1}\n')
    return fa


def test_a_call_is_copied_unpacked_and_scored_as_the_shipped_reports(tmp_path, capsys):
    """The log is renamed for its call, the run unpacked byte for byte, a cut run's journal
    kept and the finished run's left out, and the two reports (shipped profile; the
    calibration of the run's GPU) meet the checks the shipped reports of that run met, check
    for check; run again, it refuses and writes nothing."""
    import ingest_call

    fa, dest = _files_at(tmp_path), tmp_path / "day"
    assert ingest_call.main([str(fa), str(dest), "--call", "4"]) == 0
    names = sorted(p.name for p in dest.iterdir())
    assert names == ["call4_gpu0.log", "deepseek-v2-lite__H200.calibrated_conv_bucket150.parquet",
                     "fidelity_v2lite_split150.json", "fidelity_v2lite_split150.md",
                     "fidelity_v2lite_split150_calibrated_conv_bucket150.json",
                     "fidelity_v2lite_split150_calibrated_conv_bucket150.md",
                     "journal_v2lite_cut150.jsonl", "live_v2lite_split150"]
    for f in (DAY / "live_v2lite_split150").iterdir():
        assert (dest / "live_v2lite_split150" / f.name).read_bytes() == f.read_bytes()
    for new, old in (("fidelity_v2lite_split150", "fidelity_v2lite_split150"),
                     ("fidelity_v2lite_split150_calibrated_conv_bucket150",
                      "fidelity_v2lite_split150_calibrated_conv")):
        got = json.loads((dest / f"{new}.json").read_text())["checks"]
        want = json.loads((DAY / f"{old}.json").read_text())["checks"]
        assert {k: c["pass"] for k, c in got.items()} == {k: c["pass"] for k, c in want.items()}
    out = capsys.readouterr().out
    assert "| `fidelity_v2lite_split150.md` | 17 of 17 |" in out
    assert "left out the journals of finished runs: journal_v2lite_split150.jsonl" in out
    before = sorted(p.name for p in dest.iterdir())
    assert ingest_call.main([str(fa), str(dest), "--call", "4"]) == 2
    assert "would be written over" in capsys.readouterr().err
    assert sorted(p.name for p in dest.iterdir()) == before


def test_a_folder_of_repeats_is_scored_against_the_calibrations_of_another(tmp_path, capsys):
    """A second recording goes to its own folder; ``--calibrations-from`` scores it against the
    calibration made beside the first one, which stays where it is: the report names that file.
    A folder that is not there is refused before anything is written."""
    import ingest_call

    fa, dest, first = _files_at(tmp_path), tmp_path / "repeat", tmp_path / "first"
    first.mkdir()
    cal = "deepseek-v2-lite__H200.calibrated_conv_bucket150.parquet"
    (fa / cal).rename(first / cal)
    assert ingest_call.main([str(fa), str(dest), "--calibrations-from", str(tmp_path / "no"),
                             "--no-repeats"]) == 2
    assert capsys.readouterr().err.startswith("error: ")
    assert not dest.exists()
    assert ingest_call.main([str(fa), str(dest), "--calibrations-from", str(first),
                             "--no-repeats"]) == 0
    assert not (dest / cal).exists()
    rep = json.loads((dest / "fidelity_v2lite_split150_calibrated_conv_bucket150.json")
                     .read_text())
    assert Path(rep["profile"]["file"]).resolve() == (first / cal).resolve()


def test_a_later_calls_calibration_is_scored_against_the_runs_already_there(tmp_path, capsys):
    """Call 1 brings the run, call 2 only a calibration: without ``--score-folder`` nothing is
    scored; with it the run gets the calibrated report, and its shipped report is kept as it
    was, byte for byte."""
    import ingest_call

    fa, dest = _files_at(tmp_path), tmp_path / "day"
    cal = "deepseek-v2-lite__H200.calibrated_conv_bucket150.parquet"
    later = tmp_path / "call2"
    later.mkdir()
    (fa / cal).rename(later / cal)
    shutil.copy(DAY / "call3_gpu0.log", later / "gpu0.log")
    assert ingest_call.main([str(fa), str(dest), "--call", "1", "--no-repeats"]) == 0
    shipped = (dest / "fidelity_v2lite_split150.json").read_bytes()
    stem = "fidelity_v2lite_split150_calibrated_conv_bucket150"
    assert not (dest / f"{stem}.json").exists()
    capsys.readouterr()
    assert ingest_call.main([str(later), str(dest), "--call", "2", "--no-repeats"]) == 0
    assert not (dest / f"{stem}.json").exists()
    (dest / "call2_gpu0.log").unlink()
    (dest / cal).unlink()
    assert ingest_call.main([str(later), str(dest), "--call", "2", "--no-repeats",
                             "--score-folder"]) == 0
    out = capsys.readouterr().out
    assert "| `fidelity_v2lite_split150.md` | exists: not written over |" in out
    assert (dest / "fidelity_v2lite_split150.json").read_bytes() == shipped
    got = json.loads((dest / f"{stem}.json").read_text())["checks"]
    want = json.loads((DAY / "fidelity_v2lite_split150_calibrated_conv.json").read_text())["checks"]
    assert {k: c["pass"] for k, c in got.items()} == {k: c["pass"] for k, c in want.items()}


def test_a_run_finished_from_an_earlier_calls_journal_replaces_that_journal(tmp_path, capsys):
    """A call cut by its limit leaves the run's journal in the folder; the call that finishes
    the run from it brings the run, and the journal goes (another run's stays)."""
    import ingest_call

    cut, dest = tmp_path / "cut", tmp_path / "day"
    cut.mkdir()
    (cut / "journal_v2lite_split150.jsonl").write_text('{"specsched_journal": 1}\n')
    (cut / "journal_other.jsonl").write_text('{"specsched_journal": 1}\n')
    assert ingest_call.main([str(cut), str(dest), "--call", "3", "--no-score"]) == 0
    assert sorted(p.name for p in dest.iterdir()) == ["journal_other.jsonl",
                                                      "journal_v2lite_split150.jsonl"]
    capsys.readouterr()
    assert ingest_call.main([str(_files_at(tmp_path)), str(dest), "--call", "4",
                             "--no-score"]) == 0
    assert sorted(p.name for p in dest.iterdir()) == [
        "call4_gpu0.log", "deepseek-v2-lite__H200.calibrated_conv_bucket150.parquet",
        "journal_other.jsonl", "journal_v2lite_cut150.jsonl", "live_v2lite_split150"]
    assert ("removed the journals an earlier call left of the runs this call finished: "
            "journal_v2lite_split150.jsonl") in capsys.readouterr().out


def test_an_archive_that_leaves_its_folder_is_refused_before_anything_is_written(tmp_path, capsys):
    import ingest_call

    fa = tmp_path / "files_at"
    fa.mkdir()
    (tmp_path / "evil").write_text("x")
    with tarfile.open(fa / "live_a.tar.gz", "w:gz") as t:
        t.add(tmp_path / "evil", arcname="live_a/../../evil")
    (fa / "gpu0.log").write_text("log")
    dest = tmp_path / "day"
    assert ingest_call.main([str(fa), str(dest)]) == 2
    assert "is not a file under live_a/" in capsys.readouterr().err
    assert not dest.exists()


def test_repeats_are_other_recordings_of_the_same_run(tmp_path):
    """The 70B `bucket` run of 150 requests of 2026-12-04f has one earlier recording, 2026-12-04e's
    (another GPU); the `pad` run beside it is not one (another policy), a run captured otherwise
    is not one, and a copy of the run itself is not another recording."""
    import ingest_call

    results = ROOT / "benchmarks" / "results"
    run = results / "h200-2026-12-04f" / "live_70b_bucket150"
    assert ingest_call.find_repeats(run, [results]) == [results / "h200-2026-12-04e" / "live_70b_bucket150"]
    pad = ingest_call.find_repeats(results / "h200-2026-12-04f" / "live_70b_pad150", [results])
    assert run not in pad
    # the 8B `split` runs of 150: 2026-12-04d's is one; 2026-12-01's, recorded before graphs
    # were captured at start-up (no `capture` in its configuration), is not
    split = ingest_call.find_repeats(results / "h200-2026-12-04f" / "live_split150", [results])
    assert split == [results / "h200-2026-12-04d" / "live_split150"]
    copy = tmp_path / "day" / "live_copy"
    shutil.copytree(run, copy)
    assert ingest_call.find_repeats(copy, [results, tmp_path]) == [
        results / "h200-2026-12-04e" / "live_70b_bucket150"]


def test_a_run_on_another_gpu_model_is_not_a_repeat(tmp_path):
    """The same requests and configuration replayed on an H100 (its summary's device name) is
    another machine class: not a repeat of the H200 recordings, nor they of it."""
    import ingest_call

    results = ROOT / "benchmarks" / "results"
    run = results / "h200-2026-12-04f" / "live_70b_bucket150"
    other = tmp_path / "day" / "live_70b_bucket150"
    shutil.copytree(run, other)
    summary = json.loads((other / "summary.json").read_text())
    summary["backend_detail"]["gpu"]["name"] = "NVIDIA H100 80GB HBM3"
    (other / "summary.json").write_text(json.dumps(summary))
    (other / "steps.parquet").write_bytes(b"another recording")  # not a copy of the run
    assert ingest_call.find_repeats(other, [results, tmp_path]) == []
    assert other not in ingest_call.find_repeats(run, [results, tmp_path])


def test_a_calibrations_report_suffix_follows_the_gpu_not_the_first_dot():
    """``llama-3.1-70b__H200.calibrated.parquet`` gives reports ``..._calibrated`` (not
    ``..._1-70b__H200.calibrated``, what its first dot gave), and a tag after ``calibrated``
    stays."""
    from ingest_call import report_tag

    assert report_tag("llama-3.1-70b__H200.calibrated.parquet") == "calibrated"
    assert report_tag("llama-3.1-8b__H200.calibrated_conv_bucket150.parquet") == \
        "calibrated_conv_bucket150"
    assert report_tag("deepseek-v2-lite__H200.calibrated_fitted.parquet") == "calibrated_fitted"


def test_residual_refit_rescores_each_calibration_in_each_opt_in_form(tmp_path, capsys):
    """``--residual-refit``: the call's calibration gets a ``_residual``, a ``_residual_prefill``
    and a ``_residual_verify_prefill`` twin, the re-fits of its own anchors with ``--residual
    tokens``, ``prefill`` and ``verify-prefill`` (the rows ``refit_calibration`` writes), and
    the run is scored against all four. A twin that exists is kept: a later call bringing a
    calibration of the same name re-fits nothing over it."""
    import ingest_call

    from backends.calibrate_refit import refit_calibration
    from backends.models import load_model
    from backends.profile import read_profile

    fa, dest = _files_at(tmp_path), tmp_path / "day"
    assert ingest_call.main([str(fa), str(dest), "--call", "4", "--no-repeats",
                             "--residual-refit"]) == 0
    stem = "calibrated_conv_bucket150"
    cal = dest / f"deepseek-v2-lite__H200.{stem}.parquet"
    out = capsys.readouterr().out
    notes = {}
    for form, suffix in (("tokens", "_residual"), ("prefill", "_residual_prefill"),
                         ("verify-prefill", "_residual_verify_prefill")):
        twin = dest / f"deepseek-v2-lite__H200.{stem}{suffix}.parquet"
        assert f"{cal.name}: re-fitted with --residual {form} to {twin.name}" in out
        rows, meta = read_profile(twin)
        notes[suffix] = meta["calibration"]["residual"]
        assert notes[suffix]["form"] == form
        want = tmp_path / f"want{suffix}.parquet"
        refit_calibration(load_model("deepseek-v2-lite"), str(cal),
                          str(ROOT / "backends/profiles/deepseek-v2-lite__H200.parquet"),
                          str(want), residual=form)
        assert rows.column("latency_s").to_pylist() == \
            read_profile(want)[0].column("latency_s").to_pylist()
    # an H200 calibration of a MoE model keeps the base's prefill (its factor is not applied),
    # so the prefill form has no line to draw here; the tokens form has its other groups'
    assert notes["_residual_prefill"]["by_group"] == {}
    assert notes["_residual"]["by_group"] and "prefill" not in notes["_residual"]["by_group"]
    # the verify-prefill form keeps the tokens form's verify lines and draws no other
    assert notes["_residual_verify_prefill"]["by_group"] == {
        g: v for g, v in notes["_residual"]["by_group"].items() if g.startswith("verify")}
    for suffix in ("", "_residual", "_residual_prefill", "_residual_verify_prefill"):
        rep = json.loads((dest / f"fidelity_v2lite_split150_{stem}{suffix}.json").read_text())
        assert rep["profile"]["calibration"].get("residual") == notes.get(suffix)
    twins = sorted(dest.glob(f"*{stem}_residual*.parquet"))
    before = [t.read_bytes() for t in twins]
    later = tmp_path / "call5"
    later.mkdir()
    shutil.copy(DAY / f"deepseek-v2-lite__H200.{stem}.parquet", later)
    cal.unlink()
    assert ingest_call.main([str(later), str(dest), "--residual-refit", "--no-score"]) == 0
    out = capsys.readouterr().out
    assert len(twins) == 3 and all(f"{cal.name}: kept: {t.name} exists" in out for t in twins)
    assert [t.read_bytes() for t in twins] == before
