"""``backends.calibrate`` (anchor choice and the per-group fit) and the calibrate sweep's
time budget, on a tiny profile worked out by hand (CPU, no torch)."""

from __future__ import annotations

import pytest

from backends.calibrate import (FIT_RULE, calibrated_rows, choose_anchors, factors_text,
                                fit_factors, settle_prefill)
from backends.heldout import HeldoutPoint


def _row(kind, graph, bs, width, kv, tokens, lat=1.0, split="grid"):
    return dict(kind=kind, graph=graph, bs=bs, width=width, kv_len=kv, tokens=tokens,
                latency_s=lat, p10_s=lat * 0.9, p90_s=lat * 1.2, reps=5, split=split)


def tiny():
    """verify graph (bs 1, 4) x (width 1, 2) x (KV 100, 200); verify eager bs 1 width 1 at KV
    100 and 300; draft graph (bs 1, 4) x (KV 100, 200); prefill 8 and 16 tokens at prefix 0;
    and one held-out verify row."""
    rows = [_row("verify", True, b, w, kv, b * w) for b in (1, 4) for w in (1, 2) for kv in (100, 200)]
    rows += [_row("verify", False, 1, 1, kv, 1) for kv in (100, 300)]
    rows += [_row("draft", True, b, 1, kv, b) for b in (1, 4) for kv in (100, 200)]
    rows += [_row("prefill", False, 1, 0, 0, t) for t in (8, 16)]
    rows += [_row("verify", True, 2, 1, 150, 2, split="heldout")]
    return rows


def P(kind, graph, bs, width, kv, tokens):
    return HeldoutPoint(kind, graph, bs, width, kv, tokens)


def test_anchors_by_hand():
    """8 anchors over 4 groups: allocate gives 3, 2, 1, 2 (shares 12, 6, 5, 6, largest
    remainder), raised to at least 2.  verify graph: keys by tokens (1,1) (1,2) (4,1) (4,2),
    max(2, ceil(3/3)) = 2 of them, the ends; 2 anchors on (1,1) (both KVs), 1 on (4,2) (the
    middle of two: the first).  draft graph: both keys, one KV each.  Eager and prefill: every
    row (2 each).  The held-out row is never an anchor."""
    pts, rep = choose_anchors(tiny(), 8)
    assert pts == sorted([
        P("verify", True, 1, 1, 100, 1), P("verify", True, 1, 1, 200, 1),
        P("verify", True, 4, 2, 100, 8),
        P("verify", False, 1, 1, 100, 1), P("verify", False, 1, 1, 300, 1),
        P("draft", True, 1, 1, 100, 1), P("draft", True, 4, 1, 100, 4),
        P("prefill", False, 1, 0, 0, 8), P("prefill", False, 1, 0, 0, 16)])
    assert rep == {"verify_graph": {"asked": 3, "chosen": 3, "graphs": 2},
                   "verify_eager": {"asked": 2, "chosen": 2, "graphs": 0},
                   "draft_graph": {"asked": 2, "chosen": 2, "graphs": 2},
                   "prefill": {"asked": 2, "chosen": 2, "graphs": 0}}
    assert choose_anchors(list(reversed(tiny())), 8) == (pts, rep)  # order of rows is irrelevant


def test_anchors_only_what_fits_and_the_ladder():
    """A GPU that cannot hold bs 4: verify graph keeps keys (1,1) and (1,2), 2 + 1 anchors;
    draft graph only key (1,1), both KVs.  A ladder without 4 does the same to graphs only."""
    pts, _ = choose_anchors(tiny(), 8, fits=lambda p: p.bs < 4)
    graph = [p for p in pts if p.graph]
    assert graph == sorted([P("verify", True, 1, 1, 100, 1), P("verify", True, 1, 1, 200, 1),
                            P("verify", True, 1, 2, 100, 2), P("draft", True, 1, 1, 100, 1),
                            P("draft", True, 1, 1, 200, 1)])
    pts2, _ = choose_anchors(tiny(), 8, graph_bs=(1, 2, 3))
    assert [p for p in pts2 if p.graph] == graph
    # a kernel that takes width 1 only: verify graph keys (1,1) and (4,1)
    pts3, _ = choose_anchors(tiny(), 8, kernel_widths=(1,))
    assert {(p.bs, p.width) for p in pts3 if p.kind == "verify" and p.graph} == {(1, 1), (4, 1)}


def _anchor(kind, graph, base, measured):
    return dict(kind=kind, graph=graph, base_s=base, measured_s=measured)


def test_fit_is_the_group_median_and_falls_back_to_all_anchors():
    """verify graph ratios 1.1, 1.2, 1.6 -> 1.2; verify eager 1.0, 1.1 -> 1.05; prefill 0.9;
    draft graph has no anchor: the median of all six ratios, (1.1 + 1.1) / 2 = 1.1."""
    a = [_anchor("verify", True, 2.0, 2.2), _anchor("verify", True, 1.0, 1.2),
         _anchor("verify", True, 0.5, 0.8), _anchor("verify", False, 3.0, 3.0),
         _anchor("verify", False, 1.0, 1.1), _anchor("prefill", False, 10.0, 9.0)]
    f = fit_factors(a, ["verify_graph", "verify_eager", "draft_graph", "prefill"])
    assert list(f) == ["verify_graph", "verify_eager", "draft_graph", "prefill"]
    assert f["verify_graph"]["factor"] == pytest.approx(1.2) and f["verify_graph"]["n"] == 3
    assert f["verify_graph"]["ratio_min"] == pytest.approx(1.1)
    assert f["verify_graph"]["ratio_max"] == pytest.approx(1.6)
    assert f["verify_eager"]["factor"] == pytest.approx(1.05)
    assert f["prefill"]["factor"] == pytest.approx(0.9) and f["prefill"]["source"] == "group"
    assert f["draft_graph"] == {"factor": pytest.approx(1.1), "n": 0, "source": "all anchors",
                                "ratio_min": None, "ratio_max": None}
    with pytest.raises(ValueError):
        fit_factors([], ["prefill"])
    once = (g for g in ["verify_graph", "verify_eager", "draft_graph", "prefill"])
    assert fit_factors(a, once) == f  # a one-pass iterable of groups gives the same fit


def test_a_kept_prefill_group_without_anchors_says_so():
    """A MoE model's prefill group with no anchor of its own (its factor the other groups'
    median, 1.2 here) is kept at the base's rows; the text and the summary say it had no
    anchors instead of showing another group's median as the prefill's."""
    from backends.calibrate import prefill_summary

    fit = fit_factors([_anchor("verify", True, 1.0, 1.2)], ["verify_graph", "prefill"])
    moe = settle_prefill(fit, "auto", moe=True)
    assert moe["prefill"]["factor"] == 1.0 and moe["prefill"]["n"] == 0
    assert factors_text(moe) == "verify_graph 1.2000, prefill 1.0000 (no anchors, not applied)"
    assert prefill_summary(moe) == {"measured": None, "applied": False}
    dense = settle_prefill(fit, "auto", moe=False)  # applied: the fallback scales the rows
    assert dense["prefill"]["factor"] == pytest.approx(1.2)
    assert prefill_summary(dense) == {"measured": None, "applied": True}


def test_a_moe_prefill_factor_is_applied_on_another_gpu_model():
    """Fitted prefill 1.09 on a MoE model calibrated on a GPU of another model than its base's:
    ``auto`` applies it (the two GPUs' difference, which the base's rows would drop) and says
    why; ``keep`` still keeps the base's rows there, and a dense model is unchanged."""
    fit = {"verify_graph": {"factor": 1.2, "n": 3}, "prefill": {"factor": 1.09, "n": 3}}
    moe = settle_prefill(fit, "auto", moe=True, other_model=True)
    assert (moe["prefill"]["factor"], moe["prefill"]["applied"]) == (1.09, True)
    assert "another GPU model" in moe["prefill"]["why"]
    assert factors_text(moe) == "verify_graph 1.2000, prefill 1.0900"
    assert settle_prefill(fit, "keep", moe=True, other_model=True)["prefill"]["factor"] == 1.0
    assert settle_prefill(fit, "auto", moe=True)["prefill"]["factor"] == 1.0  # same model
    assert settle_prefill(fit, "auto", moe=False, other_model=True)["prefill"] == {
        "factor": 1.09, "n": 3, "measured": 1.09, "applied": True, "mode": "auto"}


def test_prefill_factor_is_kept_on_moe_models_unless_asked():
    """Fitted prefill 0.9: ``auto`` applies it on a dense model and keeps the base's rows (factor
    1, the 0.9 recorded) on a MoE one; ``scale`` and ``keep`` decide it on either; the other
    groups are never touched, and settling twice changes nothing."""
    fit = {"verify_graph": {"factor": 1.2, "n": 3}, "prefill": {"factor": 0.9, "n": 4}}
    dense = settle_prefill(fit, "auto", moe=False)
    moe = settle_prefill(fit, "auto", moe=True)
    assert dense["prefill"] == {"factor": 0.9, "n": 4, "measured": 0.9, "applied": True,
                                  "mode": "auto"}
    assert (moe["prefill"]["factor"], moe["prefill"]["measured"], moe["prefill"]["applied"]) == (
        1.0, 0.9, False)
    assert "MoE" in moe["prefill"]["why"]
    assert settle_prefill(fit, "scale", moe=True)["prefill"]["factor"] == 0.9
    assert settle_prefill(fit, "keep", moe=False)["prefill"]["factor"] == 1.0
    assert settle_prefill(moe, "scale", moe=True)["prefill"]["factor"] == 0.9
    assert dense["verify_graph"] == moe["verify_graph"] == {"factor": 1.2, "n": 3}
    assert fit["prefill"] == {"factor": 0.9, "n": 4}
    assert factors_text(moe) == "verify_graph 1.2000, prefill 1.0000 (anchors 0.9000, not applied)"
    assert settle_prefill({"verify_graph": {"factor": 1.2}}, "keep", moe=True) == {
        "verify_graph": {"factor": 1.2}}
    with pytest.raises(ValueError):
        settle_prefill(fit, "half", moe=True)
    rows = [_row("prefill", False, 1, 0, 0, 8, lat=4.0)]
    assert [r["latency_s"] for r in calibrated_rows(rows, moe)] == [4.0]
    assert [r["latency_s"] for r in calibrated_rows(rows, dense)] == [pytest.approx(3.6)]


def test_calibrated_rows_scale_by_group():
    rows = [_row("verify", True, 1, 1, 100, 1, lat=2.0), _row("prefill", False, 1, 0, 0, 8, lat=4.0)]
    f = {"verify_graph": {"factor": 1.5}, "prefill": {"factor": 0.5}}
    out = calibrated_rows(rows, f)
    assert [(r["latency_s"], r["p10_s"], r["p90_s"]) for r in out] == [
        pytest.approx((3.0, 2.7, 3.6)), pytest.approx((2.0, 1.8, 2.4))]
    assert [r["kv_len"] for r in out] == [100, 0] and rows[0]["latency_s"] == 2.0


def test_budget_skips_chunks_whose_estimate_does_not_fit(monkeypatch):
    """Each point costs 1 s of a fake clock.  Chunks (round-robin, verify graph first): verify
    graph (1,1) 2 points, verify eager 2, draft graph (1,1) 1, prefill 2, then verify graph
    (4,2) 1, draft graph (4,1) 1.  Deadline 6.5: the first chunk (no estimate) ends at 2, the
    eager one (estimate 1.5 x 1 x 2 = 3, 5 <= 6.5) at 4, draft (estimate 1.5) at 5, prefill
    (estimate 3 from 'any': 8 > 6.5) is skipped, verify graph (4,2) (1.5: 6.5) runs to 6, draft
    (4,1) (7.5) is skipped."""
    from backends.aiter import calibrate_sweep as cs

    clock = [0.0]
    monkeypatch.setattr(cs.time, "perf_counter", lambda: clock[0])

    def fake(runner, points, spec):
        clock[0] += len(points)
        return [dict(zip(("kind", "graph", "bs", "width", "kv_len", "tokens"), p.key),
                     latency_s=1.0) for p in points]

    monkeypatch.setattr(cs, "measure_points", fake)
    pts, _ = choose_anchors(tiny(), 8)
    chunks = cs.chunks_round_robin(pts)
    assert [(c[0].kind, c[0].graph, len(c)) for c in chunks] == [
        ("verify", True, 2), ("verify", False, 2), ("draft", True, 1), ("prefill", False, 2),
        ("verify", True, 1), ("draft", True, 1)]
    rows, skipped = cs._measure_in_budget(None, pts, None, deadline=6.5, progress=None, what="a")
    assert clock[0] == 6.0 and len(rows) == 6
    assert [(s["kind"], s["bs"]) for s in skipped] == [("prefill", 1), ("prefill", 1), ("draft", 4)]


def test_calibration_metadata_is_written_only_when_given_and_loads(tmp_path):
    """``specsched.calibration`` is an optional metadata key: absent from an ordinary profile,
    read back as written, and carried into the table's source for ``fidelity``."""
    import pyarrow.parquet as pq

    from backends.profile import load_profile, profile_metadata, read_profile, write_profile
    from tests.backends.backends_helpers import roofline_profile_rows

    m, rows = roofline_profile_rows()
    plain, cal = tmp_path / "plain.parquet", tmp_path / "cal.parquet"
    write_profile(rows, plain, profile_metadata(m, {"name": "H200"}))
    assert b"specsched.calibration" not in pq.read_schema(plain).metadata
    c = {"machine": {"name": "H200"}, "at": "2026-12-01T00:00:00Z",
         "factors": {"prefill": {"factor": 1.02, "n": 2}}}
    write_profile(rows, cal, dict(profile_metadata(m, {"name": "H200"}), calibration=c))
    assert read_profile(cal)[1]["calibration"] == c
    assert load_profile(cal).source["calibration"] == c
    assert "calibration" not in load_profile(plain).source


# ---- re-fitting an earlier calibration's anchors (calibrate --anchors-from) -------------------
def _refit_files(tmp_path, model="llama-3.1-8b"):
    """A base profile (roofline rows of ``model``) and a calibrated file whose anchors were
    "measured" at 1.10, 1.20 and 1.30 x the base's verify graph rows, 0.90 x a prefill row, and
    one draft shape the base lacks."""
    from backends.profile import profile_metadata, write_profile
    from tests.backends.backends_helpers import roofline_profile_rows

    m, rows = roofline_profile_rows(model)
    base = tmp_path / "base.parquet"
    write_profile(rows, base, profile_metadata(m, {"name": "H200"}))
    at = {(r["kind"], r["graph"], r["bs"], r["width"], r["kv_len"], r["tokens"]): r["latency_s"]
          for r in rows}
    picks = [(("verify", True, 1, 1, 256, 1), 1.10), (("verify", True, 8, 4, 1024, 32), 1.20),
             (("verify", True, 64, 4, 4096, 256), 1.30)]
    pre = next(k for k in at if k[0] == "prefill")
    picks.append((pre, 0.90))
    anchors = [dict(zip(("kind", "graph", "bs", "width", "kv_len", "tokens"), k),
                    base_s=at[k] * 2, measured_s=at[k] * f, ratio=f / 2, reps=5) for k, f in picks]
    anchors.append(dict(kind="draft", graph=True, bs=3, width=1, kv_len=777, tokens=3,
                        base_s=1e-3, measured_s=1e-3, ratio=1.0, reps=5))
    cal = {"machine": {"name": "NVIDIA H200", "uuid": "feedbeef-0000"}, "at": "2026-12-01T00:00:00Z",
           "anchors": anchors, "factors": {}, "base_sha256": "0" * 64,
           "rule": "an older rule than today's"}
    src = tmp_path / "cal.parquet"
    write_profile(rows, src, dict(profile_metadata(m, {"name": "H200"}), calibration=cal))
    return m, rows, base, src


def test_refit_divides_each_measured_anchor_by_the_new_base(tmp_path):
    """Ratios 1.10 / 1.20 / 1.30 (verify graph) and 0.90 (prefill): verify graph x1.20, prefill
    x0.90, every other group the median of all four, (1.10 + 1.20) / 2 = 1.15; the draft shape
    the base lacks is listed, not used; the machine is the anchors' GPU."""
    from backends.calibrate_refit import refit_calibration
    from backends.profile import read_profile

    m, rows, base, src = _refit_files(tmp_path)
    out = tmp_path / "refit.parquet"
    s = refit_calibration(m, str(src), str(base), str(out))
    assert (s["anchors"], s["anchors_missing"]) == (4, 1)
    assert s["decode_kv_reach"] == 4096  # the longest verify anchor; the missing draft not used
    assert s["factors"]["verify_graph"] == pytest.approx(1.20)
    assert s["factors"]["prefill"] == pytest.approx(0.90)
    assert s["factors"]["draft_graph"] == pytest.approx(1.15)
    table, meta = read_profile(out)
    want = {"verify": 1.20, "prefill": 0.90, "draft": 1.15, "draft_extend": 1.15}
    for new, old in zip(table.to_pylist(), sorted(rows, key=lambda r: (r["kind"], r["graph"], r["bs"],
                                                                        r["width"], r["kv_len"], r["tokens"]))):
        f = want[old["kind"]] if (old["kind"], old["graph"]) != ("verify", False) else 1.15
        assert new["latency_s"] == pytest.approx(old["latency_s"] * f)
    cal = meta["calibration"]
    assert cal["refit"]["anchors_missing"] == [dict(kind="draft", graph=True, bs=3, width=1,
                                                    kv_len=777, tokens=3)]
    assert cal["rule"] == FIT_RULE  # the rule the re-fit applied, not the source's
    assert meta["gpu"]["uuid"] == "feedbeef-0000" and cal["at"] == "2026-12-01T00:00:00Z"


def test_refit_carries_a_prefill_line_scaled_by_the_prefill_factor(tmp_path):
    """A base with a prefill line (counts 1-3 at 1, 2, 3 ms): the re-fit keeps it as line rows
    at 0.90 x (the prefill factor of the anchors above), and the calibrated table reads it."""
    from backends.calibrate_refit import refit_calibration
    from backends.profile import (line_rows, load_profile, profile_metadata, read_profile,
                                  write_profile)

    m, rows, base, src = _refit_files(tmp_path)
    line = [dict(kind="prefill", graph=False, bs=1, width=0, kv_len=0, tokens=n,
                 latency_s=n * 1e-3, p10_s=n * 1e-3, p90_s=n * 1e-3, reps=3, split="line")
            for n in (1, 2, 3)]
    lined = tmp_path / "lined.parquet"
    write_profile([dict(r, split="grid") for r in rows] + line, lined,
                  profile_metadata(m, {"name": "H200"}))
    out = tmp_path / "refit_line.parquet"
    refit_calibration(m, str(src), str(lined), str(out))
    got = {r["tokens"]: r["latency_s"] for r in line_rows(read_profile(out)[0]).to_pylist()}
    assert got == pytest.approx({1: 0.9e-3, 2: 1.8e-3, 3: 2.7e-3})
    assert load_profile(out).prefill_s(2, 0)[0] == pytest.approx(1.8e-3)


@pytest.mark.parametrize("mode,want", [("auto", 1.0), ("scale", 0.90), ("keep", 1.0)])
def test_refit_keeps_a_moe_models_prefill_rows_by_default(tmp_path, mode, want):
    """The anchors above on DeepSeek-V2-Lite (MoE): verify graph x1.20 as on the dense model;
    the prefill rows stay the base's under ``auto`` and ``keep`` (the anchors' 0.90 recorded as
    measured, not applied) and take it under ``scale``."""
    from backends.calibrate_refit import refit_calibration
    from backends.profile import read_profile

    m, rows, base, src = _refit_files(tmp_path, "deepseek-v2-lite")
    out = tmp_path / f"refit_{mode}.parquet"
    s = refit_calibration(m, str(src), str(base), str(out), prefill=mode)
    assert s["factors"]["verify_graph"] == pytest.approx(1.20)
    assert s["factors"]["prefill"] == pytest.approx(want)
    table, meta = read_profile(out)
    pre = meta["calibration"]["factors"]["prefill"]
    assert (pre["measured"], pre["applied"]) == (pytest.approx(0.90), want != 1.0)
    base_pre = sorted(r["latency_s"] for r in rows if r["kind"] == "prefill")
    got = sorted(r["latency_s"] for r in table.to_pylist() if r["kind"] == "prefill")
    assert got == pytest.approx([x * want for x in base_pre])


def test_refit_refuses_a_file_without_anchors_and_writes_nothing(tmp_path):
    from backends.calibrate_refit import refit_calibration
    from traces.errors import SpecschedError

    m, rows, base, src = _refit_files(tmp_path)
    out = tmp_path / "refit.parquet"
    with pytest.raises(SpecschedError, match="holds no anchors"):
        refit_calibration(m, str(base), str(base), str(out))
    assert not out.exists()


def test_decode_kv_reach_is_the_longest_decode_anchor_and_ignores_prefill():
    """Verify at KV 1,024 and 4,096, a draft-extend at 2,048, a prefill with a cached prefix of
    8,192: the decode reach is 4,096 (a prefill's KV is its prefix, not a decode length)."""
    from backends.calibrate import decode_kv_reach, kv_reach_note

    anchors = [dict(kind="verify", kv_len=1024), dict(kind="verify", kv_len=4096),
               dict(kind="draft_extend", kv_len=2048), dict(kind="prefill", kv_len=8192)]
    assert decode_kv_reach(anchors) == 4096
    assert "up to 4,096" in kv_reach_note(4096)
    assert decode_kv_reach([dict(kind="prefill", kv_len=8192)]) is None
    assert "no decode anchor" in kv_reach_note(None)


def test_prefill_tokens_reach_is_the_largest_prefill_anchor_only():
    """Prefills of 512 and 8,192 new tokens beside a verify of 16,384 tokens (64 x width 256):
    the prefill reach is 8,192; a prefill record without tokens and a verify do not count."""
    from backends.calibrate import prefill_tokens_reach

    anchors = [dict(kind="prefill", tokens=512), dict(kind="prefill", tokens=8192),
               dict(kind="verify", tokens=16384), dict(kind="prefill", kv_len=0)]
    assert prefill_tokens_reach(anchors) == 8192
    assert prefill_tokens_reach([dict(kind="verify", tokens=64)]) is None
