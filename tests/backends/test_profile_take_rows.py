"""benchmarks/profile_take_rows.py: one kind's grid rows taken from another recording."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.parquet as pq

from backends.profile import profile_metadata, read_profile, write_profile
from backends_helpers import roofline_profile_rows
from traces.errors import SpecschedError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def _write(path, scale_prefill, gpu, heldout=False):
    """The roofline profile, prefill rows scaled by ``scale_prefill``; with ``heldout`` plus one
    held-out prefill row."""
    m, rows = roofline_profile_rows()
    rows = [dict(r, split="grid") for r in rows]
    for r in rows:
        if r["kind"] == "prefill":
            for k in ("latency_s", "p10_s", "p90_s"):
                r[k] *= scale_prefill
    if heldout:  # a prefill shape off the grid, 7 tokens past its longest
        last = max((r for r in rows if r["kind"] == "prefill"), key=lambda r: r["tokens"])
        rows.append(dict(last, tokens=last["tokens"] + 7, split="heldout"))
    write_profile(rows, path, profile_metadata(m, {"name": "H200", "uuid": gpu}))
    return rows


def test_takes_one_kinds_grid_rows_and_says_so(tmp_path):
    """Base prefill rows x1, donor's x2: the result has the donor's prefill grid rows (twice
    the base's), the base's held-out prefill row and every other row as they were, and a note
    naming the donor's GPU and the reason."""
    import profile_take_rows as m

    base, donor, out = tmp_path / "b.parquet", tmp_path / "d.parquet", tmp_path / "o.parquet"
    rows = _write(base, 1.0, "base-gpu", heldout=True)
    _write(donor, 2.0, "donor-gpu")
    assert m.main([str(base), str(donor), "--kind", "prefill", "--note", "why", "-o", str(out)]) == 0
    got = {(r["kind"], r["graph"], r["bs"], r["width"], r["kv_len"], r["tokens"], r["split"]): r["latency_s"]
           for r in pq.read_table(out).to_pylist()}
    assert len(got) == len(rows)
    for r in rows:
        k = (r["kind"], r["graph"], r["bs"], r["width"], r["kv_len"], r["tokens"], r["split"])
        want = 2 * r["latency_s"] if r["kind"] == "prefill" and r["split"] == "grid" else r["latency_s"]
        assert abs(got[k] - want) <= 1e-12 * want, k
    _, meta = read_profile(out)
    note = meta["notes"][-1]["rows_taken"]
    assert note["kind"] == "prefill" and note["why"] == "why"
    assert note["from_gpu"]["uuid"] == "donor-gpu" and meta["gpu"]["uuid"] == "base-gpu"


def test_refuses_a_donor_missing_points_or_an_existing_output(tmp_path, capsys):
    """A donor without the base's prefill points, or an output that exists: exit 2, one error
    line each, nothing written."""
    import profile_take_rows as m

    base, donor, out = tmp_path / "b.parquet", tmp_path / "d.parquet", tmp_path / "o.parquet"
    _write(base, 1.0, "a")
    m_, rows = roofline_profile_rows()
    rows = [r for r in rows if not (r["kind"] == "prefill" and r["tokens"] == max(
        x["tokens"] for x in rows if x["kind"] == "prefill"))]
    write_profile(rows, donor, profile_metadata(m_, {"name": "H200"}))
    assert m.main([str(base), str(donor), "--kind", "prefill", "--note", "x", "-o", str(out)]) == 2
    assert not out.exists()
    out.write_text("keep")
    assert m.main([str(base), str(base), "--kind", "prefill", "--note", "x", "-o", str(out)]) == 2
    assert out.read_text() == "keep"
    assert capsys.readouterr().err.count("error:") == 2


def test_add_heldout_keeps_the_base_and_adds_the_donors_new_shapes(tmp_path):
    """Base with one held-out prefill row (7 tokens past the longest), donor with two (7 and 11
    past, x2): the output is the base's rows plus the donor's 11-past row only (the 7-past shape
    the base already holds), and a note counts the one left out."""
    import profile_take_rows as m

    base, donor, out = tmp_path / "b.parquet", tmp_path / "d.parquet", tmp_path / "o.parquet"
    rows = _write(base, 1.0, "base-gpu", heldout=True)
    drows = _write(donor, 2.0, "donor-gpu", heldout=True)
    extra = dict(drows[-1], tokens=drows[-1]["tokens"] + 4)
    m_, _ = roofline_profile_rows()
    write_profile(drows + [extra], donor, profile_metadata(m_, {"name": "H200", "uuid": "donor-gpu"}))
    assert m.main([str(base), str(donor), "--add-heldout", "--note", "why", "-o", str(out)]) == 0
    got = pq.read_table(out).to_pylist()
    assert len(got) == len(rows) + 1
    new = [r for r in got if r["tokens"] == extra["tokens"] and r["kind"] == "prefill"]
    assert len(new) == 1 and new[0]["split"] == "heldout" and new[0]["latency_s"] == extra["latency_s"]
    same = [r for r in got if r["split"] == "heldout" and r["tokens"] == rows[-1]["tokens"]]
    assert len(same) == 1 and same[0]["latency_s"] == rows[-1]["latency_s"]
    note = read_profile(out)[1]["notes"][-1]["heldout_added"]
    assert (note["rows"], note["left_out"], note["why"]) == (1, 1, "why")
    assert note["from_gpu"]["uuid"] == "donor-gpu"


def test_keep_level_gives_the_donors_shape_at_the_bases_level_per_kv_line(tmp_path, capsys):
    """Donor prefill rows x2 on prefix line 0 and x3 on every other line, plus a point between
    two of the base's tokens on each line (x2 / x3 of the base's value at its lower neighbour,
    times 1.1). With --keep-level the factors are 1/2 and 1/3, worked out by hand: every base
    point comes back at its own value and each new point at 1.1 times its lower neighbour's
    base value; the note keeps the factors. Without a --kind it is refused."""
    import profile_take_rows as m

    base, donor, out = tmp_path / "b.parquet", tmp_path / "d.parquet", tmp_path / "o.parquet"
    rows = _write(base, 1.0, "base-gpu")
    pre = [r for r in rows if r["kind"] == "prefill"]
    toks = sorted({r["tokens"] for r in pre})
    mid = (toks[0] + toks[1]) // 2
    assert toks[0] < mid < toks[1]
    drows, extra = [], []
    for r in rows:
        if r["kind"] != "prefill":
            drows.append(r)
            continue
        f = 2.0 if r["kv_len"] == 0 else 3.0
        drows.append(dict(r, **{k: r[k] * f for k in ("latency_s", "p10_s", "p90_s")}))
        if r["tokens"] == toks[0]:
            extra.append(dict(r, tokens=mid, **{k: r[k] * f * 1.1 for k in ("latency_s", "p10_s", "p90_s")}))
    m_, _ = roofline_profile_rows()
    write_profile(drows + extra, donor, profile_metadata(m_, {"name": "H200", "uuid": "donor-gpu"}))
    assert m.main([str(base), str(donor), "--kind", "prefill", "--keep-level", "--note", "dense",
                   "-o", str(out)]) == 0
    got = {(r["kv_len"], r["tokens"]): r["latency_s"] for r in pq.read_table(out).to_pylist()
           if r["kind"] == "prefill"}
    assert len(got) == len(pre) + len(extra)
    for r in pre:
        assert abs(got[(r["kv_len"], r["tokens"])] - r["latency_s"]) <= 1e-12 * r["latency_s"]
        if r["tokens"] == toks[0]:
            want = 1.1 * r["latency_s"]
            assert abs(got[(r["kv_len"], mid)] - want) <= 1e-12 * want
    kept = read_profile(out)[1]["notes"][-1]["rows_taken"]["level_kept"]
    lines = sorted({r["kv_len"] for r in pre})
    assert kept == {str(k): round(0.5 if k == 0 else 1 / 3, 6) for k in lines}
    assert "KV 0: x0.5000" in capsys.readouterr().out
    out2 = tmp_path / "o2.parquet"
    assert m.main([str(base), str(donor), "--add-heldout", "--keep-level", "--note", "x",
                   "-o", str(out2)]) == 2
    assert not out2.exists() and capsys.readouterr().err.startswith("error:")


# ---- --add-line ------------------------------------------------------------------------------
def _tiny(path, prefill, gpu, *, kv_prefill=None, line=None, split=True, extra=()):
    """A tiny profile: one verify and one draft graph row, one-request prefill grid rows at
    prefix 0 (``prefill``: tokens -> latency), the ``kv_prefill`` ones at prefix 1024, ``line``
    rows (tokens -> latency) and ``extra`` rows as given; p10 and p90 are 0.75 and 1.25 times the
    latency (exact in binary, so scaling by 2 is exact). Without ``split`` no split column."""
    from backends.models import load_model

    def row(kind, graph, bs, w, kv, tok, lat, sp="grid"):
        r = dict(kind=kind, graph=graph, bs=bs, width=w, kv_len=kv, tokens=tok, latency_s=lat,
                 p10_s=lat * 0.75, p90_s=lat * 1.25, reps=5)
        return dict(r, split=sp) if split else r

    rows = [row("verify", True, 1, 1, 256, 1, 0.0625), row("draft", True, 1, 1, 256, 1, 0.03125)]
    rows += [row("prefill", False, 1, 0, 0, t, v) for t, v in prefill.items()]
    rows += [row("prefill", False, 1, 0, 1024, t, v) for t, v in (kv_prefill or {}).items()]
    rows += [row("prefill", False, 1, 0, 0, t, v, "line") for t, v in (line or {}).items()]
    rows += [row(*e) if split else row(*e[:7]) for e in extra]
    write_profile(rows, path, profile_metadata(load_model("llama-3.1-8b"), {"name": "H200", "uuid": gpu}))
    return rows


def _rows_by_shape(path):
    return {(r["kind"], r["graph"], r["bs"], r["width"], r["kv_len"], r["tokens"], r["split"]):
            (r["latency_s"], r["p10_s"], r["p90_s"], r["reps"]) for r in pq.read_table(path).to_pylist()}


def test_add_line_takes_the_donors_prefix_0_prefill_as_recorded(tmp_path, capsys):
    """Base prefill at prefix 0: 16 -> 0.5 s, 128 -> 1.0, 512 -> 2.0 (plus a prefix-1024 row, a
    bs-2 row and a held-out row). Donor at prefix 0: 16 -> 0.25, 64 -> 0.375, 128 -> 0.5,
    256 -> 0.75, 512 -> 0.5, and rows that must not be taken (prefix 1024, bs 2, held-out).
    The line is the donor's five rows as recorded, p10 and p90 too; every base row is as it
    was. Ratios at the common counts 16, 128, 512 are 2, 2, 4: the note keeps the median 2 (not
    the mean 8/3)."""
    import profile_take_rows as m
    from backends.profile_file import line_rows

    base, donor, out = tmp_path / "b.parquet", tmp_path / "d.parquet", tmp_path / "o.parquet"
    brows = _tiny(base, {16: 0.5, 128: 1.0, 512: 2.0}, "base-gpu", kv_prefill={16: 0.75},
                  extra=[("prefill", False, 2, 0, 0, 32, 1.5), ("prefill", False, 1, 0, 0, 100, 0.875, "heldout")])
    _tiny(donor, {16: 0.25, 64: 0.375, 128: 0.5, 256: 0.75, 512: 0.5}, "donor-gpu",
          kv_prefill={16: 0.5, 64: 0.625},
          extra=[("prefill", False, 2, 0, 0, 32, 0.75), ("prefill", False, 1, 0, 0, 100, 0.4375, "heldout")])
    assert m.main([str(base), str(donor), "--add-line", "--note", "dense line", "-o", str(out)]) == 0
    got = _rows_by_shape(out)
    want_line = {16: 0.25, 64: 0.375, 128: 0.5, 256: 0.75, 512: 0.5}
    for r in brows:  # (b) the base's rows unchanged
        k = (r["kind"], r["graph"], r["bs"], r["width"], r["kv_len"], r["tokens"], r["split"])
        assert got.pop(k) == (r["latency_s"], r["p10_s"], r["p90_s"], r["reps"]), k
    assert got == {("prefill", False, 1, 0, 0, t, "line"): (v, v * 0.75, v * 1.25, 5)  # (a)
                   for t, v in want_line.items()}
    table, meta = read_profile(out)  # (d) validates; the line is the donor's counts exactly
    assert line_rows(table).column("tokens").to_pylist() == [16, 64, 128, 256, 512]
    note = meta["notes"][-1]["line_added"]
    assert {k: note[k] for k in ("rows", "tokens", "grid_over_line", "why")} == {
        "rows": 5, "tokens": [16, 512], "grid_over_line": 2.0, "why": "dense line"}
    assert "replaced" not in note and note["from_gpu"]["uuid"] == "donor-gpu"
    assert meta["gpu"]["uuid"] == "base-gpu"
    assert "median 2.0000" in capsys.readouterr().out


def test_add_line_takes_the_donors_line_rows_and_replaces_the_bases(tmp_path):
    """Donor grid at prefix 0: 16 -> 0.25, 128 -> 0.5; its line rows 1 -> 0.125, 2 -> 0.125,
    16 -> 0.3125 (the line row wins at 16). Base grid 16 -> 0.5, 128 -> 1.0, and an old line at
    1..4 (0.0625 each). The new line is 1 -> 0.125, 2 -> 0.125, 16 -> 0.3125, 128 -> 0.5 and the
    old line is gone (replaced: 4); ratios 0.5 / 0.3125 = 1.6 and 1.0 / 0.5 = 2, median 1.8."""
    import profile_take_rows as m
    from backends.profile_file import grid_rows, line_rows

    base, donor, out = tmp_path / "b.parquet", tmp_path / "d.parquet", tmp_path / "o.parquet"
    _tiny(base, {16: 0.5, 128: 1.0}, "base-gpu", line={t: 0.0625 for t in (1, 2, 3, 4)})
    _tiny(donor, {16: 0.25, 128: 0.5}, "donor-gpu", line={1: 0.125, 2: 0.125, 16: 0.3125})
    assert m.main([str(base), str(donor), "--add-line", "--note", "x", "-o", str(out)]) == 0
    table, meta = read_profile(out)
    line = {r["tokens"]: r["latency_s"] for r in line_rows(table).to_pylist()}
    want = {1: 0.125, 2: 0.125, 16: 0.3125, 128: 0.5}
    assert line.keys() == want.keys()
    for t, v in want.items():
        assert abs(line[t] - v) <= 1e-12 * v, t
    assert {r["tokens"]: r["latency_s"] for r in grid_rows(table).to_pylist() if r["kind"] == "prefill"} \
        == {16: 0.5, 128: 1.0}
    note = meta["notes"][-1]["line_added"]
    assert (note["rows"], note["tokens"], note["grid_over_line"], note["replaced"]) == (4, [1, 128], 1.8, 4)


def test_add_line_gives_a_base_without_a_split_column_one(tmp_path):
    """A base with no split column: its rows come back as "grid" and the donor's as "line"."""
    import profile_take_rows as m

    base, donor, out = tmp_path / "b.parquet", tmp_path / "d.parquet", tmp_path / "o.parquet"
    _tiny(base, {16: 0.5, 128: 1.0}, "base-gpu", split=False)
    assert "split" not in pq.read_table(base).column_names
    _tiny(donor, {8: 0.125, 16: 0.25, 128: 0.5}, "donor-gpu", split=False)
    assert m.main([str(base), str(donor), "--add-line", "--note", "x", "-o", str(out)]) == 0
    got = pq.read_table(out).to_pylist()
    assert sorted((r["kind"], r["tokens"], r["split"], r["latency_s"]) for r in got) == sorted([
        ("verify", 1, "grid", 0.0625), ("draft", 1, "grid", 0.03125),
        ("prefill", 16, "grid", 0.5), ("prefill", 128, "grid", 1.0),
        ("prefill", 8, "line", 0.125), ("prefill", 16, "line", 0.25), ("prefill", 128, "line", 0.5)])


def test_add_line_refusals(tmp_path, capsys):
    """Exit 2, one error line and nothing written for: a donor with no one-request prefill row at
    prefix 0, one with only one, one whose counts the base's grid lacks at prefix 0, and an output
    that is the base or exists; --add-line with --kind is an argparse error."""
    import pytest

    import profile_take_rows as m

    base, out = tmp_path / "b.parquet", tmp_path / "o.parquet"
    _tiny(base, {16: 0.5, 128: 1.0}, "base-gpu", kv_prefill={64: 1.0})
    cases = {
        "none": ({}, {16: 0.5}, "no prefill row"),  # only prefix 1024 (and a bs-2 row)
        "one": ({16: 0.25}, {}, "only one prefill row"),
        "apart": ({1: 0.125, 2: 0.125, 64: 0.5}, {}, "no level"),  # 64 is the base's at 1024 only
    }
    for name, (pre, kvp, says) in cases.items():
        donor = tmp_path / f"{name}.parquet"
        _tiny(donor, pre, "d", kv_prefill=kvp or None, extra=[("prefill", False, 2, 0, 0, 32, 0.75)])
        assert m.main([str(base), str(donor), "--add-line", "--note", "x", "-o", str(out)]) == 2, name
        err = capsys.readouterr().err
        assert err.startswith("error:") and err.count("error:") == 1 and says in err, (name, err)
        assert not out.exists()
        with pytest.raises(SpecschedError, match=says):
            m.add_line(str(base), str(donor), "x")
    good = tmp_path / "good.parquet"
    _tiny(good, {16: 0.25, 128: 0.5}, "d")
    before = base.read_bytes()
    assert m.main([str(base), str(good), "--add-line", "--note", "x", "-o", str(base)]) == 2
    assert base.read_bytes() == before
    out.write_text("keep")
    assert m.main([str(base), str(good), "--add-line", "--note", "x", "-o", str(out)]) == 2
    assert out.read_text() == "keep"
    assert capsys.readouterr().err.count("error:") == 2
    with pytest.raises(SystemExit) as exc:
        m.main([str(base), str(good), "--add-line", "--kind", "prefill", "--note", "x",
                "-o", str(tmp_path / "o3.parquet")])
    assert exc.value.code == 2
