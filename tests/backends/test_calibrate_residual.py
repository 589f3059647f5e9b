"""A calibration's residual by token count (backends/calibrate_residual.py, --residual tokens)."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.calibrate_residual import residual_by_size, residual_prior

ROOT = Path(__file__).resolve().parents[2]
V2_H100 = ROOT / "benchmarks/results/h100-2026-12-07c/deepseek-v2-lite__H200.calibrated.parquet"


def _anchor(tokens, base_s, measured_s, kind="verify", graph=True):
    return {"kind": kind, "graph": graph, "bs": tokens, "width": 1, "kv_len": 512,
            "tokens": tokens, "base_s": base_s, "measured_s": measured_s}


def test_residual_worked_by_hand():
    """Verify graph anchors at 1 and 4 tokens measure 0.9 and 1.1 x the base; its factor (their
    median) is 1.0, so the residuals are 0.9 and 1.1. A row at 2 tokens, halfway in log2, takes
    sqrt(0.9 x 1.1); one at 1 takes 0.9, one at 8 stays at 1.1 (flat beyond). The draft graph's
    two anchors at one count give no line: its rows keep the prior alone."""
    anchors = [_anchor(1, 1e-3, 0.9e-3), _anchor(4, 2e-3, 2.2e-3),
               _anchor(4, 1e-3, 1.2e-3, kind="draft"), _anchor(4, 1e-3, 1.0e-3, kind="draft")]
    factors = {"verify_graph": {"factor": 1.0}, "draft_graph": {"factor": 1.1}}
    table = residual_by_size(anchors, factors, None)
    assert set(table) == {"verify_graph"}
    assert table["verify_graph"] == {1: pytest.approx(0.9), 4: pytest.approx(1.1)}
    ratio = residual_prior(table, lambda r: 2.0)  # a prior of 2 multiplies every row
    assert ratio(_anchor(2, 0, 0)) == pytest.approx(2.0 * math.sqrt(0.9 * 1.1))
    assert ratio(_anchor(1, 0, 0)) == pytest.approx(2.0 * 0.9)
    assert ratio(_anchor(8, 0, 0)) == pytest.approx(2.0 * 1.1)
    assert ratio(_anchor(2, 0, 0, kind="draft")) == 2.0


def test_the_residual_is_over_the_factor_and_the_prior_and_skips_unapplied_groups():
    """An anchor 1.32 x the base under a factor of 1.1 and a prior of 1.2 has no residual (1.0);
    one 1.452 x has 1.1. A group whose factor is not applied has no line."""
    anchors = [_anchor(1, 1.0, 1.32), _anchor(64, 1.0, 1.452),
               _anchor(1, 1.0, 0.5, kind="prefill", graph=False),
               _anchor(256, 1.0, 2.0, kind="prefill", graph=False)]
    factors = {"verify_graph": {"factor": 1.1},
               "prefill": {"factor": 1.0, "applied": False}}
    table = residual_by_size(anchors, factors, lambda a: 1.2)
    assert table == {"verify_graph": {1: pytest.approx(1.0), 64: pytest.approx(1.1)}}


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.integers(1, 16384), st.floats(0.5, 2.0), min_size=2, max_size=6),
       st.integers(1, 65536))
def test_the_residual_line_passes_through_its_anchors_and_stays_between_them(points, tokens):
    """For any residual table of one group: a row at a listed count takes that count's residual;
    a row between two listed counts takes a value between theirs; one beyond the smallest or
    the largest count takes that end's residual. Another group's rows keep the prior alone."""
    table = {"verify_graph": dict(sorted(points.items()))}
    ratio = residual_prior(table, None)
    sizes = sorted(points)
    for t in sizes:
        assert ratio(_anchor(t, 0, 0)) == pytest.approx(points[t], rel=1e-9)
    got = ratio(_anchor(tokens, 0, 0))
    if tokens <= sizes[0]:
        assert got == pytest.approx(points[sizes[0]], rel=1e-9)
    elif tokens >= sizes[-1]:
        assert got == pytest.approx(points[sizes[-1]], rel=1e-9)
    else:
        lo = max(t for t in sizes if t <= tokens)
        hi = min(t for t in sizes if t >= tokens)
        a, b = sorted((points[lo], points[hi]))
        assert a * (1 - 1e-9) <= got <= b * (1 + 1e-9)
    assert ratio(_anchor(tokens, 0, 0, kind="draft")) == 1.0


def test_refit_with_residual_by_tokens(tmp_path):
    """A V2-Lite calibration of an H100 re-fitted with --residual tokens: the same factors and
    prior as the default re-fit, the table recorded in the metadata, and each grid row at a
    token count the table lists that default's row times the group's residual there (a group
    without a line: the default's row itself)."""
    from backends.calibrate import group_name
    from backends.calibrate_refit import refit_calibration
    from backends.models import load_model
    from backends.profile import grid_rows, read_profile

    m = load_model("deepseek-v2-lite")
    base = ROOT / "backends/profiles/deepseek-v2-lite__H200.parquet"
    plain = refit_calibration(m, str(V2_H100), str(base), str(tmp_path / "g.parquet"))
    got = refit_calibration(m, str(V2_H100), str(base), str(tmp_path / "t.parquet"),
                            residual="tokens")
    assert got["factors"] == plain["factors"] and got["prior"] == plain["prior"]
    assert (plain["residual"], got["residual"]) == ("group", "tokens")
    key = ("kind", "graph", "bs", "width", "kv_len", "tokens")
    a = {tuple(r[k] for k in key): r["latency_s"]
         for r in grid_rows(read_profile(tmp_path / "g.parquet")[0]).to_pylist()}
    rows, meta = read_profile(tmp_path / "t.parquet")
    note = meta["calibration"]["residual"]
    assert note["form"] == "tokens" and "verify_graph" in note["by_group"]
    line = {g: dict((int(s), v) for s, v in pts) for g, pts in note["by_group"].items()}
    for r in grid_rows(rows).to_pylist():
        g = group_name(r["kind"], r["graph"])
        want = a[tuple(r[k] for k in key)]
        if g in line:
            if int(r["tokens"]) not in line[g]:
                continue  # between two counts: the interpolation the first test works by hand
            want *= line[g][int(r["tokens"])]
        assert r["latency_s"] == pytest.approx(want, rel=1e-5)


def test_residual_with_from_run_is_refused(tmp_path):
    """--residual tokens shapes an anchor fit; --from-run fits none: one error line, exit 2,
    nothing written."""
    run = tmp_path / "run"
    run.mkdir()
    res = subprocess.run([sys.executable, "-m", "specsched", "calibrate", "--model",
                          "llama-3.1-8b", "--residual", "tokens", "--from-run", str(run),
                          "-o", str(tmp_path / "x.parquet")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --residual tokens")
    assert not (tmp_path / "x.parquet").exists()


@pytest.mark.slow
def test_a_fidelity_report_says_the_profile_takes_the_residual(tmp_path):
    """A `--residual tokens` re-fit of an H200 calibration, scored against a live run on an H200:
    the report's JSON names the file whose anchors were re-fitted, and the report lists each
    group's residual at the token counts the calibration recorded."""
    import json

    src = ROOT / ("benchmarks/results/h200-2026-12-05/"
                  "deepseek-v2-lite__H200.calibrated_conv_bucket150.parquet")
    run = ROOT / "benchmarks/results/h200-2026-12-05/live_v2lite_split150"
    out, folder = tmp_path / "tokens.parquet", tmp_path / "fid"
    cli = [sys.executable, "-m", "specsched"]
    r = subprocess.run(cli + ["calibrate", "--model", "deepseek-v2-lite", "--anchors-from",
                              str(src), "--residual", "tokens", "-o", str(out)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(cli + ["fidelity", "--reference-run", str(run), "--profile", str(out),
                              "--out", str(folder)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    from backends.profile import read_profile

    note = read_profile(out)[1]["calibration"]["residual"]
    rep = json.loads((folder / "fidelity.json").read_text())["profile"]["calibration"]
    assert rep["residual"] == note and rep["refit_from"] == src.name
    md = (folder / "fidelity.md").read_text()
    assert note["by_group"]
    line = next(x for x in md.splitlines() if x.startswith("Each group's rows also take"))
    for g, pts in note["by_group"].items():
        assert f"{g} " + ", ".join(f"{t:,}: x{v:.3f}" for t, v in pts) in line


def test_apply_residual_under_group_leaves_the_fit_as_it_was():
    """``group`` (the default) hands the prior back untouched with no note. Under ``tokens``,
    anchors at 0.9 and 1.1 x the base under a factor of 1 and a prior of 1.5 leave residuals
    0.6 and 0.7333, which the note records, so each anchor's row comes back to its measured
    ratio (1.5 x 0.6 = 0.9). An unknown form is refused."""
    from backends.calibrate_residual import apply_residual

    anchors = [_anchor(1, 1e-3, 0.9e-3), _anchor(4, 2e-3, 2.2e-3)]
    factors = {"verify_graph": {"factor": 1.0}}

    def prior(r):
        return 1.5

    assert apply_residual("group", anchors, factors, prior) == (prior, None)
    fn, note = apply_residual("tokens", anchors, factors, prior)
    assert note == {"form": "tokens", "by_group": {"verify_graph": [[1, 0.6], [4, 0.733333]]}}
    assert fn(_anchor(1, 0, 0)) == pytest.approx(0.9)
    assert fn(_anchor(4, 0, 0)) == pytest.approx(1.1)
    with pytest.raises(ValueError):
        apply_residual("bs", anchors, factors, prior)


def test_the_prefill_form_draws_the_prefill_line_alone():
    """--residual prefill: prefill anchors at 256 and 4,096 tokens measure 0.9 and 1.2 x the
    base under a factor of 1.0, so a prefill row at 1,024 tokens (halfway in log2) takes
    sqrt(0.9 x 1.2) and one at 64 takes 0.9; the verify graph's anchors (0.9 and 1.1 at 1 and 4
    tokens) would draw a line under ``tokens`` but keep their factor alone (x1) here. The note
    names the form and lists the prefill group only."""
    from backends.calibrate_residual import apply_residual, residual_line

    anchors = [_anchor(1, 1e-3, 0.9e-3), _anchor(4, 2e-3, 2.2e-3),
               _anchor(256, 1e-2, 0.9e-2, kind="prefill", graph=False),
               _anchor(4096, 1e-1, 1.2e-1, kind="prefill", graph=False)]
    factors = {"verify_graph": {"factor": 1.0}, "prefill": {"factor": 1.0}}
    ratio, note = apply_residual("prefill", anchors, factors, None)
    assert note == {"form": "prefill",
                    "by_group": {"prefill": [[256, pytest.approx(0.9)], [4096, 1.2]]}}
    assert ratio(_anchor(1024, 0, 0, kind="prefill", graph=False)) == \
        pytest.approx(math.sqrt(0.9 * 1.2))
    assert ratio(_anchor(64, 0, 0, kind="prefill", graph=False)) == pytest.approx(0.9)
    assert ratio(_anchor(1, 0, 0)) == 1.0 and ratio(_anchor(4, 0, 0)) == 1.0
    every, _ = apply_residual("tokens", anchors, factors, None)
    assert every(_anchor(1, 0, 0)) == pytest.approx(0.9)
    assert residual_line(note).startswith("The prefill group's rows also take the anchors' "
                                          "residual by token count (`calibrate --residual "
                                          "prefill`)")


def test_refit_with_residual_prefill_moves_the_prefill_rows_only(tmp_path):
    """The thirteenth H100's V2-Lite calibration re-fitted with --residual prefill: every row
    outside the prefill group is the default re-fit's, and the prefill rows at the anchors'
    token counts are the default's times the residual the tokens form records there."""
    from backends.calibrate_refit import refit_calibration
    from backends.models import load_model
    from backends.profile import grid_rows, read_profile

    m = load_model("deepseek-v2-lite")
    base = ROOT / "backends/profiles/deepseek-v2-lite__H200.parquet"
    outs = {}
    for form in ("group", "tokens", "prefill"):
        refit_calibration(m, str(V2_H100), str(base), str(tmp_path / f"{form}.parquet"),
                          residual=form)
        outs[form] = read_profile(tmp_path / f"{form}.parquet")
    key = ("kind", "graph", "bs", "width", "kv_len", "tokens")
    plain = {tuple(r[k] for k in key): r["latency_s"]
             for r in grid_rows(outs["group"][0]).to_pylist()}
    line = dict((int(t), v) for t, v in
                outs["tokens"][1]["calibration"]["residual"]["by_group"]["prefill"])
    assert outs["prefill"][1]["calibration"]["residual"]["by_group"]["prefill"] == \
        [[t, v] for t, v in line.items()]
    moved = 0
    for r in grid_rows(outs["prefill"][0]).to_pylist():
        want = plain[tuple(r[k] for k in key)]
        if r["kind"] != "prefill":
            assert r["latency_s"] == want
        elif int(r["tokens"]) in line:
            assert r["latency_s"] == pytest.approx(want * line[int(r["tokens"])], rel=1e-6)
            moved += line[int(r["tokens"])] != pytest.approx(1.0)
    assert moved >= 2


def test_the_verify_prefill_form_leaves_draft_and_extend_at_their_factor():
    """--residual verify-prefill: verify graph anchors at 4 and 64 tokens measure 0.92 and 1.06 x
    the base, the draft graph's at 1 and 48 0.97 and 1.04, the prefill's at 256 and 8,192 0.86 and
    1.13, all under a factor of 1.0. A verify row at 16 tokens (halfway in log2 between 4 and 64)
    takes sqrt(0.92 x 1.06), a prefill row at 256 x 32 ** 0.5 = 1,448 tokens sqrt(0.86 x 1.13),
    and every draft row x1, where ``tokens`` would give the draft at 1 token 0.97. The note
    lists the verify and prefill groups and its line says whose rows moved."""
    from backends.calibrate_residual import apply_residual, residual_line, residual_text

    anchors = [_anchor(4, 1e-3, 0.92e-3), _anchor(64, 2e-3, 2.12e-3),
               _anchor(1, 1e-3, 0.97e-3, kind="draft"), _anchor(48, 2e-3, 2.08e-3, kind="draft"),
               _anchor(256, 1e-2, 0.86e-2, kind="prefill", graph=False),
               _anchor(8192, 1e-1, 1.13e-1, kind="prefill", graph=False)]
    factors = {"verify_graph": {"factor": 1.0}, "draft_graph": {"factor": 1.0},
               "prefill": {"factor": 1.0}}
    ratio, note = apply_residual("verify-prefill", anchors, factors, None)
    assert note["form"] == "verify-prefill"
    assert sorted(note["by_group"]) == ["prefill", "verify_graph"]
    assert ratio(_anchor(16, 0, 0)) == pytest.approx(math.sqrt(0.92 * 1.06))
    assert ratio(_anchor(1448, 0, 0, kind="prefill", graph=False)) == \
        pytest.approx(math.sqrt(0.86 * 1.13), rel=1e-3)
    assert ratio(_anchor(1, 0, 0, kind="draft")) == 1.0
    assert ratio(_anchor(24, 0, 0, kind="draft")) == 1.0
    every, _ = apply_residual("tokens", anchors, factors, None)
    assert every(_anchor(1, 0, 0, kind="draft")) == pytest.approx(0.97)
    assert residual_line(note).startswith("The verify and prefill groups' rows also take the "
                                          "anchors' residual by token count (`calibrate "
                                          "--residual verify-prefill`)")
    assert residual_text(note) == ("; the verify and prefill groups x the anchors' residual by "
                                   "token count")
