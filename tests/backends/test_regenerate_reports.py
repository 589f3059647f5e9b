"""``benchmarks/regenerate_reports.py --dry-run``: which of the validation record's reports it
would re-run (those that compared the shipped file as it is now, or a calibrated profile kept
in the repository with the bytes they recorded) and which it keeps (those of an earlier version
of a profile), without changing any file."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_dry_run_lists_every_report_and_keeps_those_of_earlier_profiles():
    from backends.shipped import PROFILES_DIR, validation_record

    named = []
    for name, entry in validation_record().items():
        for ev in ([entry["evidence"]] if "evidence" in entry else []) + entry.get("other_reports", []):
            named.append((name, ev["report"]))
    before = {rep: (ROOT / rep).read_bytes() for _, rep in named}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "regenerate_reports.py"),
                          "--dry-run"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    lines = {ln.split(":", 1)[0]: ln for ln in out.splitlines() if ln.startswith("benchmarks/")}
    assert set(lines) == {rep for _, rep in named}
    for name, rep in named:
        prof = json.loads((ROOT / rep).with_suffix(".json").read_text())["profile"]
        if prof["file"].startswith("benchmarks/results/"):  # a calibrated profile kept beside it
            current = hashlib.sha256((ROOT / prof["file"]).read_bytes()).hexdigest()
            assert f"against {prof['file']}" in lines[rep], lines[rep]
        else:
            current = hashlib.sha256((PROFILES_DIR / name).read_bytes()).hexdigest()
        assert ("would re-run" in lines[rep]) == (prof["sha256"] == current), lines[rep]
        assert ("kept" in lines[rep]) == (prof["sha256"] != current), lines[rep]
    # the V3 report of 2026-12-02b compared the profile before its prefill points at 32-248
    # tokens, the 8B's report of 2026-12-01b the profile before its prefill line; the 8B's
    # evidence compared the shipped file
    assert "kept" in lines["benchmarks/results/h200-2026-12-02b/fidelity_v360.md"]
    assert "kept" in lines["benchmarks/results/h200-2026-12-01b/fidelity_adaptive250.md"]
    assert "would re-run" in lines["benchmarks/results/h200-2026-12-04b/fidelity_long_fixed_line.md"]
    assert all((ROOT / rep).read_bytes() == data for rep, data in before.items())


def test_a_report_off_todays_lookup_is_rerun_with_its_backend_setting():
    """backend.kv_lookup is compared as the model resolves it (auto: fluid on an MLA model,
    straggler on a dense one): a V2-Lite report recorded under the straggler rule is re-run with
    ``--set backend.kv_lookup=straggler``, one recorded with fluid (today's MLA default) and a
    dense model's recorded under "straggler" get no --set."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from regenerate_reports import backend_overrides

    res = ROOT / "benchmarks/results"
    fluid = json.loads((res / "h200-2026-12-03f/fidelity_v2lite400_fluid.json").read_text())
    rule = json.loads((res / "h200-2026-12-03f/fidelity_v2lite400.json").read_text())
    dense = json.loads((res / "h200-2026-12-04b/fidelity_long_fixed.json").read_text())
    assert rule["config"]["backend"]["kv_lookup"] == "straggler"
    assert dense["config"]["backend"]["kv_lookup"] == "auto"  # written again since auto existed
    older = json.loads(json.dumps(dense))  # as it was recorded before "auto" (2026-12-04)
    older["config"]["backend"]["kv_lookup"] = "straggler"
    assert backend_overrides(fluid) == {}
    assert backend_overrides(rule) == {"kv_lookup": "straggler"}
    assert backend_overrides(dense) == {} and backend_overrides(older) == {}


def test_calibrated_adds_the_reports_on_kept_calibrated_profiles():
    """``--calibrated`` adds every report under benchmarks/results/ that compared a calibrated
    profile kept beside it, once each, against that file; nothing is written."""
    before = {p: p.read_bytes() for p in (ROOT / "benchmarks/results").glob("*/fidelity*.json")}
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "regenerate_reports.py"),
                          "--dry-run", "--calibrated"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    lines = [ln for ln in out.splitlines() if ln.startswith("benchmarks/")]
    reps = [ln.split(":", 1)[0] for ln in lines]
    assert len(reps) == len(set(reps))
    cal = "benchmarks/results/h200-2026-12-04d/fidelity_split150_calibrated.md"
    line = next(ln for ln in lines if ln.startswith(cal + ":"))
    assert "would re-run against benchmarks/results/h200-2026-12-04d/" \
           "llama-3.1-8b__H200.calibrated.parquet" in line
    assert all(p.read_bytes() == data for p, data in before.items())
