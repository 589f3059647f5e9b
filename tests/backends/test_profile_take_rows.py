"""benchmarks/profile_take_rows.py: one kind's grid rows taken from another recording."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.parquet as pq

from backends.profile import profile_metadata, read_profile, write_profile
from backends_helpers import roofline_profile_rows

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
