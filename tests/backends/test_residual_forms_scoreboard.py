"""The residual-forms scoreboard tallies twin reports as worked out by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _report(path: Path, mape: float, passes: list[bool], model: str = "m",
            prefill: float | None = None) -> None:
    """Write the fields of a fidelity report that the scoreboard reads (``prefill``: the prefill
    steps' MAPE; None: a run with no prefill step in its table)."""
    kinds = {} if prefill is None else {"prefill": {"mape_pct": prefill}}
    path.write_text(json.dumps({"model": model,
                                "steps": {"mape_all_pct": mape, "by_kind": kinds},
                                "checks": {f"c{i}": {"pass": p} for i, p in enumerate(passes)}}))


def test_tally_counts_checks_and_per_step_direction(tmp_path, monkeypatch, capsys):
    import benchmarks.residual_forms_scoreboard as sb

    a, b = tmp_path / "gpu-a", tmp_path / "gpu-b"
    a.mkdir()
    b.mkdir()
    # run x: default 2.00%, 1 of 3, prefill steps 4.00%; tokens 1.50%, 3 of 3 (better), prefill
    # 3.00% (better); prefill 2.50%, 2 of 3 (worse), prefill steps 5.00% (worse)
    _report(a / "fidelity_x_calibrated.json", 2.0, [True, False, False], prefill=4.0)
    _report(a / "fidelity_x_calibrated_residual.json", 1.5, [True, True, True], prefill=3.0)
    _report(a / "fidelity_x_calibrated_residual_prefill.json", 2.5, [True, True, False],
            prefill=5.0)
    # run y: default 1.00%, 2 of 3; tokens 1.00% (neither better nor worse), 2 of 3; no prefill
    # form; no prefill step, so its prefill figures count nowhere
    _report(b / "fidelity_y_calibrated.json", 1.0, [True, True, False], model="n")
    _report(b / "fidelity_y_calibrated_residual.json", 1.0, [False, True, True], model="n")
    # a report with no twin is not counted
    _report(b / "fidelity_z_calibrated.json", 9.0, [False, False, False])
    monkeypatch.setattr(sb, "RESULTS", tmp_path)

    assert sb.main([]) == 0
    out = capsys.readouterr().out
    # tokens: two runs, checks 1 + 2 = 3 -> 3 + 2 = 5, one better, none worse,
    # mean (2.00 + 1.00) / 2 = 1.50 -> (1.50 + 1.00) / 2 = 1.25; prefill steps on run x alone,
    # 4.00 -> 3.00, one better
    assert "| `tokens` | 2 | 3 -> 5 | 1 / 0 | 1.50 -> 1.25% | 1 / 0 | 4.00 -> 3.00% |" in out
    assert "| `prefill` | 1 | 1 -> 2 | 0 / 1 | 2.00 -> 2.50% | 0 / 1 | 4.00 -> 5.00% |" in out
    assert "| `verify-prefill` | 0 | - | - | - | - | - |" in out
    assert "| `tokens` | gpu-a | x | 2.00%, 1 of 3 | 1.50%, 3 of 3 | 4.00% -> 3.00% |" in out
    assert "| `tokens` | gpu-b | y | 1.00%, 2 of 3 | 1.00%, 2 of 3 | - -> - |" in out
    assert "| z |" not in out
    # per model: tokens on m is run x alone, on n run y alone (no prefill steps: dashes)
    assert "| `tokens`, m | 1 | 1 -> 3 | 1 / 0 | 2.00 -> 1.50% | 1 / 0 | 4.00 -> 3.00% |" in out
    assert "| `tokens`, n | 1 | 2 -> 2 | 0 / 0 | 1.00 -> 1.00% | - | - |" in out


def test_a_missing_folder_is_one_error_line(tmp_path, monkeypatch, capsys):
    import benchmarks.residual_forms_scoreboard as sb

    monkeypatch.setattr(sb, "RESULTS", tmp_path)
    assert sb.main(["--in", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "nope" in err[0]


@pytest.mark.parametrize("form", ["tokens", "prefill", "verify-prefill"])
def test_every_refit_form_is_tallied(form, tmp_path, monkeypatch, capsys):
    import benchmarks.residual_forms_scoreboard as sb
    from benchmarks.ingest_call import REFIT_FORMS

    suffix = dict(REFIT_FORMS)[form]
    _report(tmp_path / "fidelity_r_calibrated.json", 3.0, [False])
    _report(tmp_path / f"fidelity_r_calibrated{suffix}.json", 2.0, [True])
    monkeypatch.setattr(sb, "RESULTS", tmp_path.parent)
    assert sb.main(["--in", tmp_path.name]) == 0
    assert (f"| `{form}` | 1 | 0 -> 1 | 1 / 0 | 3.00 -> 2.00% | - | - |"
            in capsys.readouterr().out)
