"""``benchmarks/profile_whatif_reports.py``: a shipped profile's reports re-run on a candidate."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

SHIPPED = "backends/profiles/llama-3.1-8b__H200.parquet"


def test_the_shipped_file_as_its_own_candidate_scores_as_recorded(capsys):
    """The evidence report re-run on the very file it compared: the same checks both ways, and
    the totals say so; nothing is written."""
    import profile_whatif_reports as m

    md = ROOT / "benchmarks/results/h200-2026-12-04b/fidelity_long_fixed_line.md"
    before = md.read_bytes()
    assert m.main(["llama-3.1-8b__H200.parquet", SHIPPED, "--only",
                   "h200-2026-12-04b/fidelity_long_fixed_line"]) == 0
    out = capsys.readouterr().out
    row = [ln for ln in out.splitlines() if "fidelity_long_fixed_line.md" in ln]
    assert len(row) == 1 and "| 17 of 17 | 17 of 17 |" in row[0]
    assert "1 reports: checks met 17 of 17 -> 17 of 17" in out
    assert md.read_bytes() == before


def test_a_kept_calibration_is_refitted_to_the_candidate(capsys):
    """--calibrated: the 8B conversation run of 2026-12-01b against its kept calibration,
    re-fitted (in a temporary folder) to the shipped file it was itself re-fitted to: the
    checks of the report on that re-fit."""
    import profile_whatif_reports as m

    assert m.main(["llama-3.1-8b__H200.parquet", SHIPPED, "--calibrated", "--only",
                   "h200-2026-12-01b/fidelity_conv150_calibrated_line"]) == 0
    out = capsys.readouterr().out
    assert "| 16 of 16 | 16 of 16 |" in out and "1 reports" in out


def test_refusals(tmp_path, capsys):
    import profile_whatif_reports as m

    assert m.main(["llama-3.1-8b__H200.parquet", str(tmp_path / "none.parquet")]) == 2
    assert m.main(["llama-3.1-8b__H200.parquet", SHIPPED, "--only", "no-such-report"]) == 2
    assert m.main(["llama-9b__H200.parquet", SHIPPED]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 3 and "no such file" in err and "--only" in err
    assert "not a shipped profile" in err
