"""Held-out profile points: the shape chooser (backends.heldout), kept out of the grids, scored."""

import numpy as np
import pytest

from backends.heldout import (DEFAULT_HELDOUT, SHARES, HeldoutPoint, allocate, choose_heldout,
                              grid_span, is_off_grid)
from backends.profile import load_profile, profile_metadata, write_profile

from backends_helpers import roofline_profile_rows

LADDER = (1, 2, 3, 4, 8)


def _row(kind, graph, bs, width, kv, tokens):
    return dict(kind=kind, graph=graph, bs=bs, width=width, kv_len=kv, tokens=tokens)


def test_grid_span_is_the_tables_axes_eager_over_the_union():
    rows = [_row("verify", True, b, w, kv, b * w) for b in (1, 8) for w in (2, 4) for kv in (100, 400)]
    rows += [_row("verify", False, 16, 12, 200, 192)]
    rows += [_row("draft", True, 4, 1, kv, 4) for kv in (100, 300)]
    rows += [_row("prefill", False, 1, 0, p, t) for t in (32, 64) for p in (0, 512)]
    span = grid_span(rows)
    assert span["verify_graph"] == ((1, 8), (2, 4), (100, 400))
    # the eager table is built over the eager and graph axes together
    assert span["verify_eager"] == ((1, 8, 16), (2, 4, 12), (100, 200, 400))
    assert span["draft_graph"] == span["draft_eager"] == ((4,), (100, 300))
    assert span["prefill"] == ((32, 64), (0, 512))
    assert "extend_graph" not in span and "extend_eager" not in span  # no draft_extend rows


def test_allocate_by_largest_remainder():
    assert allocate(DEFAULT_HELDOUT, SHARES) == SHARES == {
        "verify_graph": 12, "verify_eager": 6, "draft_graph": 5, "draft_eager": 3,
        "extend_graph": 5, "extend_eager": 3, "prefill": 6}
    # 10 of 40 shares: 3, 1.5, 1.25, .75, 1.25, .75, 1.5 -> floors 7; the 3 left go to the
    # largest remainders .75 (draft_eager), .75 (extend_eager), .5 (verify_eager, before prefill)
    assert allocate(10, SHARES) == {"verify_graph": 3, "verify_eager": 2, "draft_graph": 1,
                                    "draft_eager": 1, "extend_graph": 1, "extend_eager": 1,
                                    "prefill": 1}
    # two sections: 12 and 6 of 18 shares of 5 -> 3.33, 1.67 -> 3 + 2
    assert allocate(5, ["prefill", "verify_graph"]) == {"verify_graph": 3, "prefill": 2}
    assert allocate(0, ["prefill"]) == {"prefill": 0}


def _verify_graph_span():
    # padded batch sizes 1 and 8, one width, KV 100 and 102: off the grid are the ladder points
    # 2, 3, 4 (5-7 are no captured size: a graph replays them at 8) and KV 101
    return {"verify_graph": ((1, 8), (2,), (100, 102))}


def test_graph_points_are_ladder_batch_sizes_or_kv_between_grid_lines():
    pts, rep = choose_heldout(_verify_graph_span(), 11, seed=0, ladder=LADDER)
    # every (bs, kv) in {1,2,3,4,8} x {100,101,102} except the 4 measured corners
    want = {(b, kv) for b in (1, 2, 3, 4, 8) for kv in (100, 101, 102)} - {
        (1, 100), (1, 102), (8, 100), (8, 102)}
    assert len(want) == 11
    assert {(p.bs, p.kv_len) for p in pts} == want
    assert all(p == HeldoutPoint("verify", True, p.bs, 2, p.kv_len, 2 * p.bs) for p in pts)
    assert rep == {"verify_graph": {"asked": 11, "chosen": 11}}
    # asking for more than exist: the section is reported short, nothing repeats
    pts12, rep12 = choose_heldout(_verify_graph_span(), 12, seed=0, ladder=LADDER)
    assert len(pts12) == 11 and rep12["verify_graph"] == {"asked": 12, "chosen": 11}
    assert pts == sorted(pts)  # measuring order: a graph's points adjacent


def test_eager_batch_sizes_are_any_integer_and_widths_what_the_kernels_take():
    span = {"verify_eager": ((1, 8), (2,), (100,))}
    pts, _ = choose_heldout(span, 20, seed=3, ladder=LADDER)
    assert sorted(p.bs for p in pts) == [2, 3, 4, 5, 6, 7]  # eager: the real batch size
    # MLA kernels take 1, 2, 3 (run as 4) and 4 rows: between widths 1 and 8 only 2, 3, 4
    span = {"verify_eager": ((16,), (1, 8), (512,))}
    pts, rep = choose_heldout(span, 5, seed=1, ladder=LADDER, kernel_widths=(1, 2, 3, 4))
    assert sorted(p.width for p in pts) == [2, 3, 4] and rep["verify_eager"]["chosen"] == 3
    # graphs only at the widths graphs are captured for
    span = {"extend_graph": ((4,), (1, 8), (512,))}
    pts, _ = choose_heldout(span, 9, seed=1, ladder=LADDER, graph_widths=(1, 2, 4, 8))
    assert [(p.kind, p.width, p.tokens) for p in pts] == [("draft_extend", 2, 8), ("draft_extend", 4, 16)]


def test_a_grid_with_nothing_between_its_points_has_no_section():
    span = {"draft_graph": ((1, 2), (100, 101)), "prefill": ((32, 34), (0,))}
    pts, rep = choose_heldout(span, 4, seed=0, ladder=LADDER)
    assert pts == [HeldoutPoint("prefill", False, 1, 0, 0, 33)]
    assert rep["none_off_grid"] == ["draft_graph"] and rep["prefill"] == {"asked": 4, "chosen": 1}


def test_fits_and_exclude_are_respected():
    span = _verify_graph_span()
    excl = {("verify", True, 2, 2, 101, 4)}
    pts, _ = choose_heldout(span, 11, seed=0, ladder=LADDER, exclude=excl,
                            fits=lambda p: p.bs * p.kv_len <= 300)
    # bs * kv <= 300: bs 1 and 2 only (3 x 100 = 300 fits too); (2, 101) was there already
    assert {(p.bs, p.kv_len) for p in pts} == {(1, 101), (2, 100), (2, 102), (3, 100)}


def test_draws_are_deterministic_and_sections_independent():
    _, rows = roofline_profile_rows(draft_eager=True)
    span = grid_span(rows)
    a, _ = choose_heldout(span, 40, seed=7, ladder=range(1, 257))
    b, _ = choose_heldout(span, 40, seed=7, ladder=range(1, 257))
    c, _ = choose_heldout(span, 40, seed=8, ladder=range(1, 257))
    assert a == b and a != c
    # without the prefill section (7 of the 40 here) the other sections' points are the same
    no_pre = {k: v for k, v in span.items() if k != "prefill"}
    assert allocate(40, span) == {"verify_graph": 15, "verify_eager": 8, "draft_graph": 6,
                                  "draft_eager": 4, "prefill": 7}
    assert allocate(33, no_pre) == {k: v for k, v in allocate(40, span).items() if k != "prefill"}
    d, _ = choose_heldout(no_pre, 33, seed=7, ladder=range(1, 257))
    assert d == [p for p in a if p.kind != "prefill"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_points_are_off_the_grid_inside_its_span(seed):
    from backends.aiter.metadata import SPEC_CAPTURE_BS

    _, rows = roofline_profile_rows(draft_eager=True)
    # an MLA-like grid: verify widths 1, 2, 4 (graphs), 1, 4 (eager): off the grid only width 3
    rows = [r for r in rows if r["kind"] != "verify" or r["width"] in (1, 2, 4)]
    span = grid_span(rows)
    assert span["verify_graph"][1] == span["verify_eager"][1] == (1, 2, 4)
    pts, rep = choose_heldout(span, 60, seed=seed, ladder=SPEC_CAPTURE_BS,
                              kernel_widths=(1, 2, 3, 4))
    assert len(pts) == 60 == sum(v["chosen"] for v in rep.values())
    sections = {("verify", True): "verify_graph", ("verify", False): "verify_eager",
                ("draft", True): "draft_graph", ("draft", False): "draft_eager",
                ("prefill", False): "prefill"}
    for p in pts:
        assert is_off_grid(p, span)
        axes = span[sections[(p.kind, p.graph)]]
        names = ("tokens", "kv_len") if p.kind == "prefill" else (
            ("bs", "kv_len") if p.kind == "draft" else ("bs", "width", "kv_len"))
        for name, axis in zip(names, axes):
            assert axis[0] <= getattr(p, name) <= axis[-1]  # interpolation, not extrapolation
        if p.graph:
            assert p.bs in SPEC_CAPTURE_BS
        if p.kind == "verify":
            assert p.width in (1, 2, 3, 4) and p.tokens == p.bs * p.width
    assert len({p.key for p in pts}) == 60


def _held_rows(span, n, lat):
    pts, _ = choose_heldout(span, n, seed=0, ladder=range(1, 513))
    return [dict(kind=p.kind, graph=p.graph, bs=p.bs, width=p.width, kv_len=p.kv_len,
                 tokens=p.tokens, latency_s=lat, p10_s=lat, p90_s=lat, reps=1, split="heldout")
            for p in pts]


def test_heldout_rows_of_every_kind_leave_every_grid_unchanged(tmp_path):
    """Grids from a profile with held-out rows of every kind (at an absurd 1 s each) equal those
    of the same profile without them: axes, values, eager overheads."""
    m, rows = roofline_profile_rows(draft_eager=True)
    ext = [dict(r, kind="draft_extend", width=w, tokens=r["bs"] * w)
           for r in rows if r["kind"] == "draft" for w in (2, 4)]
    rows = [dict(r, split="grid") for r in rows + ext]
    held = _held_rows(grid_span(rows), 40, 1.0)
    assert {(h["kind"], h["graph"]) for h in held} == {
        ("verify", True), ("verify", False), ("draft", True), ("draft", False),
        ("draft_extend", True), ("draft_extend", False), ("prefill", False)}
    meta = profile_metadata(m, {"name": "H200"})
    write_profile(rows, tmp_path / "grid.parquet", meta)
    write_profile(rows + held, tmp_path / "held.parquet", meta)
    a, b = load_profile(tmp_path / "grid.parquet"), load_profile(tmp_path / "held.parquet")
    for name in ("verify_graph", "verify_eager", "draft_graph", "draft_eager", "extend_graph",
                 "extend_eager", "prefill"):
        ga, gb = getattr(a, name), getattr(b, name)
        assert all(np.array_equal(x, y) for x, y in zip(ga.axes, gb.axes)), name
        assert np.array_equal(ga.values, gb.values), name
    assert a.source["eager_derived"] == b.source["eager_derived"]
    assert b.source["heldout_rows"] == 40 and "heldout_rows" not in a.source


def test_fidelity_scores_heldout_draft_extend_rows(tmp_path):
    """A held-out draft-extend row is predicted by the table's draft-extend lookup: without
    draft_extend grid rows that is one draft pass at (bs 8, KV 640), interpolated by hand
    between KV 256 and 1024; measured 4% below it."""
    from analysis.fidelity import heldout_errors

    m, rows = roofline_profile_rows()
    at = {(r["kind"], r["bs"], r["kv_len"]): r["latency_s"] for r in rows if r["graph"]}
    pred = at[("draft", 8, 256)] + (640 - 256) / (1024 - 256) * (
        at[("draft", 8, 1024)] - at[("draft", 8, 256)])
    lat = pred / 1.04
    held = dict(kind="draft_extend", graph=True, bs=8, width=4, kv_len=640, tokens=32,
                latency_s=lat, p10_s=lat, p90_s=lat, reps=5, split="heldout")
    path = tmp_path / "p.parquet"
    write_profile([dict(r, split="grid") for r in rows] + [held], path,
                  profile_metadata(m, {"name": "H200"}))
    h = heldout_errors(load_profile(path))
    assert h["points"] == 1
    assert h["by_kind"]["draft_extend"]["mean_signed_pct"] == pytest.approx(4.0)
    assert h["mape_pct"] == pytest.approx(4.0)
