"""benchmarks/prefill_between_grid.py: live prefill residuals by token band, and its what-if."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from backends.profile import load_profile, profile_metadata, read_profile, write_profile
from backends_helpers import roofline_profile_rows

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def test_bands_take_the_median_of_each_band_around_its_centre():
    """Tokens 100, 110, 130, 200 with residuals 1, 3, -2, 5, bands of 32 centred on 96-224:
    96 holds 100 and 110 (median 2), 128 holds 130, 160 nothing (left out), 192 holds 200."""
    import prefill_between_grid as m

    got = m.bands(np.array([100, 110, 130, 200.0]), np.array([1, 3, -2, 5.0]), 32, 96, 224)
    assert got == [(96, 2.0, 2), (128, -2.0, 1), (192, 5.0, 1)]


def test_on_grid_is_within_one_percent_of_a_grid_token():
    """Grid 128 and 256: 128 and 129 (0.8% off) and 255 are on it; 130 (1.6%) and 300 are not."""
    import prefill_between_grid as m

    got = m.on_grid(np.array([128, 129, 130, 255, 300]), np.array([128.0, 256.0]))
    assert got.tolist() == [True, True, False, True, False]


def test_what_if_rows_make_the_profile_answer_the_corrected_value(tmp_path):
    """A roofline profile given a row at 1,000 tokens, +10%: the written profile answers
    exactly its old lookup x e^0.1 there at prefix 0, its old lookup plus the same seconds on
    every other prefix line, and its grid tokens as before."""
    import prefill_between_grid as m

    mdl, rows = roofline_profile_rows()
    base = tmp_path / "b.parquet"
    write_profile(rows, base, profile_metadata(mdl, {"name": "H200"}))
    table = load_profile(base)
    brows, meta = read_profile(base)
    add = m.what_if_rows(table, brows, [(1000, 10.0)])
    lines = sorted({r["kv_len"] for r in rows if r["kind"] == "prefill"})
    assert sorted(r["kv_len"] for r in add) == lines and {r["tokens"] for r in add} == {1000}
    out = tmp_path / "w.parquet"
    write_profile(brows.to_pylist() + add, out, meta)
    new = load_profile(out)
    v0 = table.prefill_s(1000, 0)[0]
    extra = v0 * (np.exp(0.1) - 1)
    assert abs(new.prefill_s(1000, 0)[0] - v0 * np.exp(0.1)) <= 1e-12
    for p in lines[1:]:
        assert abs(new.prefill_s(1000, p)[0] - (table.prefill_s(1000, p)[0] + extra)) <= 1e-12
    for t in (512, 2048):
        assert abs(new.prefill_s(t, 0)[0] - table.prefill_s(t, 0)[0]) <= 1e-12


def test_no_run_of_the_model_is_one_error_line(tmp_path, capsys):
    """Folders without a live run of the model: exit 2, one error line, nothing written."""
    import prefill_between_grid as m

    out = tmp_path / "w.parquet"
    assert m.main([str(tmp_path), "--model", "llama-3.1-8b", "--what-if", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1 and not out.exists()


def test_profile_option_scores_the_given_file(tmp_path, capsys):
    """``--profile FILE`` scores FILE, not the shipped profile: the shipped 8B profile with
    its prefill grid row at 1,024 tokens and prefix 0 made 1.5x slower (its prefill line, read
    at the grid's level there, follows) lowers the live run's
    residual in the band at 1,024 (prefills of 1,016, 1,029 and 1,029 tokens, within 1% of
    the row) by at most log(1.5) = 40.5 points and by more than 20 (the run's offset, the
    median of its prefills near the grid's tokens, moves by what those three move it)."""
    import re

    import prefill_between_grid as m
    from backends.shipped import default_profile

    run = Path(__file__).resolve().parents[2] / "benchmarks/results/h200-2026-12-04e/live_conv_bucket150"
    rows, meta = read_profile(default_profile("llama-3.1-8b"))
    rows = rows.to_pylist()
    for r in rows:
        if r["kind"] == "prefill" and r["kv_len"] == 0 and r["tokens"] == 1024 \
                and r["split"] == "grid":
            for k in ("latency_s", "p10_s", "p90_s"):
                r[k] *= 1.5
    slow = tmp_path / "slow.parquet"
    write_profile(rows, slow, meta)

    def band_1024(argv):
        assert m.main(argv) == 0
        out = capsys.readouterr().out
        return out, float(re.search(r"^\| 1024 \(grid\) \| \d+ \| ([-+]\d+\.\d+) \|$", out, re.M)[1])

    shipped_out, shipped = band_1024([str(run), "--model", "llama-3.1-8b", "--hi", "1100", "--min-n", "1"])
    out, got = band_1024([str(run), "--model", "llama-3.1-8b", "--hi", "1100", "--min-n", "1", "--profile", str(slow)])
    assert "against slow.parquet" in out and "against llama-3.1-8b__H200.parquet" in shipped_out
    assert -40.6 < got - shipped < -20.0
