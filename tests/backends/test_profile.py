"""Profile backend: writer/reader, validation, grids with holes and derived eager points."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from backends import make_executor
from backends import roofline as R
from backends.models import load_model
from backends.profile import (PROFILE_SCHEMA, ProfileExecutor, default_profile, load_profile,
                              profile_metadata, read_profile, shipped_profiles, write_profile)
from backends.protocol import DraftBatch, PrefillBatch, VerifyBatch
from traces.errors import SpecschedError, TraceValidationError

from backends_helpers import roofline_profile_rows


def test_exact_on_measured_points(profile_file):
    _, rows = roofline_profile_rows()
    ex = ProfileExecutor(profile_file)
    assert ex.name == "profile"
    for r in rows:
        if r["kind"] == "verify":
            b = VerifyBatch(bs_real=r["bs"], bs_padded=r["bs"], widths=np.full(r["bs"], r["width"]),
                            kv_lens=np.full(r["bs"], r["kv_len"]), launch_width=r["width"],
                            mode="uniform", graph=r["graph"])
            t = ex.verify(b)
            assert t.latency_s == pytest.approx(r["latency_s"], rel=1e-12) and not t.out_of_grid
        elif r["kind"] == "draft":
            b = DraftBatch(bs_real=r["bs"], bs_padded=r["bs"], kv_lens=np.full(r["bs"], r["kv_len"]),
                           passes=2, graph=True)
            assert ex.draft(b) == pytest.approx(2 * r["latency_s"], rel=1e-12)
        else:
            b = PrefillBatch(tokens=np.array([r["tokens"]]), prefix=np.array([r["kv_len"]]))
            assert ex.prefill(b) == pytest.approx(r["latency_s"], rel=1e-12)


def test_holes_are_filled_monotone_and_close_to_truth(profile_file):
    t = load_profile(profile_file)
    assert t.source["holes_filled"]["verify_graph"] == 16  # bs 128/256 x long KV were skipped
    # a skipped point (bs 256, KV 65536): KV extrapolation of an affine-in-KV truth is exact
    want = float(R.verify_time("llama-3.1-8b", "H200", 256, 4, 65536))
    got, outside = t.verify_s(256, 4, 65536, True)
    assert not outside and got == pytest.approx(want, rel=1e-6)
    for g in (t.verify_graph, t.verify_eager, t.draft_graph, t.draft_eager):
        assert np.all(np.diff(g.values, axis=-1) >= 0)  # monotone in KV length
    for ax in (0, 1):
        assert np.all(np.diff(t.prefill.values, axis=ax) >= 0)  # in tokens and prefix


def test_interpolation_between_measured_points_is_close(profile_file):
    """Off-grid shapes against the truth the profile was made from (the roofline)."""
    t = load_profile(profile_file)
    rng = np.random.default_rng(1)
    bs = rng.integers(1, 257, 300).astype(float)
    w = rng.integers(1, 9, 300).astype(float)
    kv = np.exp(rng.uniform(np.log(256), np.log(16384), 300))
    got = np.array([t.verify_s(b, x, k, True)[0] for b, x, k in zip(bs, w, kv)])
    want = R.verify_time("llama-3.1-8b", "H200", bs, w, kv)
    err = np.abs(got / want - 1)
    assert np.mean(err) < 0.05  # a coarse 9-point batch axis; real profiles use the ladder


def test_eager_points_derived_from_graph_plus_measured_overhead(profile_file):
    t = load_profile(profile_file)
    ed = t.source["eager_derived"]
    kernels = R.kernel_count(load_model("llama-3.1-8b"))
    true_overhead = kernels * 4e-6 - 5e-6
    assert ed["verify"]["overhead_s"] == pytest.approx(true_overhead, rel=1e-6)
    assert ed["verify"]["derived_points"] > 0
    # a derived point: eager bs 16 (only graph measured there) = graph + overhead
    g = t.verify_s(16, 3, 1024, True)[0]
    e = t.verify_s(16, 3, 1024, False)[0]
    assert e - g == pytest.approx(true_overhead, rel=1e-6)
    assert "kernel-count ratio" in ed["draft"]["overhead_rule"]  # no draft eager rows measured
    # measured eager beyond the largest graph (bs 512) is used as measured
    want = float(R.verify_time("llama-3.1-8b", "H200", 512, 4, 4096, graph=False))
    assert t.verify_s(512, 4, 4096, False)[0] == pytest.approx(want, rel=1e-12)


def test_no_eager_anywhere_warns(tmp_path):
    m, rows = roofline_profile_rows(eager=False)
    p = tmp_path / "p.parquet"
    write_profile(rows, p, profile_metadata(m, {"name": "H200"}))
    ex = ProfileExecutor(p)
    assert any("no eager verify" in w for w in ex.describe()["warnings"])
    assert ex.latency_table().verify_s(8, 4, 1024, False)[0] == ex.latency_table().verify_s(8, 4, 1024, True)[0]


def test_writer_is_deterministic_and_sorted(tmp_path):
    m, rows = roofline_profile_rows()
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    write_profile(rows, a, profile_metadata(m, {"name": "H200"}))
    write_profile(list(reversed(rows)), b, profile_metadata(m, {"name": "H200"}))
    assert a.read_bytes() == b.read_bytes()
    table, meta = read_profile(a)
    assert table.schema.equals(PROFILE_SCHEMA)
    assert meta["profile_version"] == "1" and meta["model"]["name"] == "llama-3.1-8b"
    assert pq.read_metadata(a).row_group(0).column(0).compression == "ZSTD"
    # what read_profile returns writes back as it is, to the same bytes
    c = tmp_path / "c.parquet"
    write_profile(table, c, meta)
    assert c.read_bytes() == a.read_bytes()
    with pytest.raises(SpecschedError, match="profile_version '0'; this version writes '1'"):
        write_profile(table, tmp_path / "d.parquet", {**meta, "profile_version": "0"})
    assert not (tmp_path / "d.parquet").exists()


BASE = dict(kind="verify", graph=True, bs=2, width=4, kv_len=100, tokens=8, latency_s=1e-3,
            p10_s=0.9e-3, p90_s=1.1e-3, reps=5)


@pytest.mark.parametrize("edit,column", [
    ({"kind": "decode"}, "kind"),
    ({"tokens": 9}, "tokens"),
    ({"bs": 0, "tokens": 0}, "bs"),
    ({"latency_s": float("nan")}, "latency_s"),
    ({"p10_s": 2e-3}, "p10_s"),
    ({"p90_s": 0.5e-3}, "p90_s"),
    ({"reps": 0}, "reps"),
    ({"kind": "draft"}, "width"),
    ({"kind": "prefill", "width": 0, "tokens": 100}, "graph"),
])
def test_bad_rows_name_file_row_and_column(tmp_path, edit, column):
    m, rows = roofline_profile_rows()
    rows = rows[:3] + [dict(BASE, **edit)] + rows[3:]
    p = tmp_path / "bad.parquet"
    with pytest.raises(TraceValidationError) as e:
        write_profile(rows, p, profile_metadata(m, {"name": "H200"}))
    msg = str(e.value)
    assert str(p) in msg and "row 3" in msg and f"column '{column}'" in msg
    assert not p.exists()  # nothing half-written


def test_duplicates_and_missing_pieces(tmp_path):
    m, rows = roofline_profile_rows()
    p = tmp_path / "x.parquet"
    meta = profile_metadata(m, {"name": "H200"})
    with pytest.raises(TraceValidationError, match="duplicates row 0"):
        write_profile(rows + [rows[0]], p, meta)
    with pytest.raises(SpecschedError, match="no graph-replayed draft rows"):
        write_profile([r for r in rows if r["kind"] != "draft"], p, meta)
    with pytest.raises(SpecschedError, match="missing column"):
        write_profile([{k: v for k, v in r.items() if k != "reps"} for r in rows], p, meta)
    with pytest.raises(SpecschedError, match="needs 'gpu'"):
        write_profile(rows, p, {"model": m})
    with pytest.raises(SpecschedError, match="row 0, column 'bs'"):
        write_profile({**{k: [BASE[k]] for k in BASE}, "bs": [None]}, p, meta)


def test_reading_bad_files(tmp_path):
    p = tmp_path / "notparquet.parquet"
    p.write_text("hello")
    with pytest.raises(SpecschedError, match="this is a text file .*, not a profile parquet: "
                       "profiles are written by `specsched profile`") as info:
        load_profile(p)
    assert "trace convert" not in str(info.value)  # a trace's advice is no help for a profile
    q = tmp_path / "noversion.parquet"
    pq.write_table(pa.table({"a": [1]}), q)
    with pytest.raises(SpecschedError, match="profile_version"):
        load_profile(q)
    with pytest.raises(SpecschedError, match="no such profile"):
        load_profile(tmp_path / "missing.parquet")


def test_too_sparse_to_fill(tmp_path):
    m, rows = roofline_profile_rows()
    # one KV length per (bs, width) row and a lone width: nothing to extend from
    rows = [r for r in rows if r["kind"] != "verify" or (r["kv_len"] == 1024 and r["bs"] == 1)]
    rows.append(dict(BASE, bs=4, width=2, tokens=8, kv_len=4096))
    p = tmp_path / "sparse.parquet"
    write_profile(rows, p, profile_metadata(m, {"name": "H200"}))
    with pytest.raises(SpecschedError, match="too few measured points"):
        load_profile(p)


def test_model_mismatch_and_default_profile(tmp_path, profile_file):
    with pytest.raises(SpecschedError, match="recorded for model 'llama-3.1-8b'"):
        ProfileExecutor(profile_file, model="llama-3.1-70b")
    with pytest.raises(SpecschedError, match="tp"):
        ProfileExecutor(profile_file, model=load_model("llama-3.1-8b", tp=2))
    assert ProfileExecutor(profile_file, model="llama-3.1-8b").describe()["model"] == "llama-3.1-8b"
    assert default_profile("llama-3.1-8b", "H200", directory=profile_file.parent) == profile_file
    assert shipped_profiles(profile_file.parent)[0][:2] == ("llama-3.1-8b", "H200")
    with pytest.raises(SpecschedError, match="shipped: llama-3.1-8b on H200"):
        default_profile("qwen2.5-32b", "H200", directory=profile_file.parent)


def test_make_executor(profile_file):
    ex = make_executor("profile", model="llama-3.1-8b", profile=profile_file)
    assert ex.name == "profile" and ex.describe()["sha256"]
    assert make_executor("ROOFLINE", model="llama-3.1-8b", gpu="H100").name == "roofline"
    with pytest.raises(SpecschedError, match="valid: profile, roofline, aiter"):
        make_executor("vidur", model="llama-3.1-8b")
    with pytest.raises(SpecschedError, match="takes no options"):
        make_executor("profile", model="llama-3.1-8b", profile=profile_file, x=1)


def test_describe_is_json(profile_file):
    d = ProfileExecutor(profile_file).describe()
    json.dumps(d)
    assert d["table"]["beyond_grid"].startswith("linear extrapolation")


def test_isotonic_fit_averages_violators_and_keeps_monotone_data():
    from backends.latency_table import isotonic

    assert np.allclose(isotonic(np.array([1.0, 3.0, 2.0, 4.0])), [1.0, 2.5, 2.5, 4.0])
    assert np.allclose(isotonic(np.array([5.0, 1.0, 1.0])), [7 / 3] * 3)
    y = np.array([1.0, 2.0, 2.0, 9.0])
    assert np.array_equal(isotonic(y), y)


def test_only_kv_and_prefill_tokens_are_forced_monotone():
    """A measured dip along width (a faster kernel at width 4 than at 3) is kept exactly;
    a noisy dip along KV is smoothed; extrapolation never goes down."""
    from backends.interp import interp3
    from backends.latency_table import Grid

    bs = np.array([1.0, 8.0])
    w = np.array([3.0, 4.0])
    kv = np.array([128.0, 1024.0, 4096.0])
    v = np.array([[[1.0, 1.2, 1.5], [0.9, 1.1, 1.4]],
                  [[2.0, 1.9, 3.0], [1.8, 2.2, 2.9]]])
    g = Grid.build((bs, w, kv), v, monotone=(2,))
    assert g.values[0, 1, 0] == 0.9 < g.values[0, 0, 0] == 1.0  # width dip kept
    assert np.allclose(g.values[1, 0, :2], [1.95, 1.95])          # KV dip averaged
    assert np.all(np.diff(g.values, axis=2) >= 0)
    beyond, outside = interp3(bs, w, kv, g.values, 8.0, 5.0, 4096.0)  # width 5: above the grid
    assert outside and beyond >= g.values[1, 1, 2]


def test_split_column_is_validated_and_heldout_rows_stay_out_of_the_grids(tmp_path):
    m, rows = roofline_profile_rows()
    bad = [dict(r, split="grid") for r in rows]
    bad[5]["split"] = "test"
    p = tmp_path / "bad.parquet"
    with pytest.raises(TraceValidationError) as e:
        write_profile(bad, p, profile_metadata(m, {"name": "H200"}))
    assert "row 5" in str(e.value) and "column 'split'" in str(e.value) and not p.exists()
    # the kinds a profile needs must be among its grid rows
    only_held = [dict(r, split="heldout" if r["kind"] == "prefill" else "grid") for r in rows]
    with pytest.raises(SpecschedError, match="no prefill rows"):
        write_profile(only_held, p, profile_metadata(m, {"name": "H200"}))
    # held-out rows are read back but build nothing
    rows = [dict(r, split="grid") for r in rows]
    rows.append(dict(rows[0], bs=3, tokens=3 * rows[0]["width"], split="heldout"))
    write_profile(rows, p, profile_metadata(m, {"name": "H200"}))
    table, _ = read_profile(p)
    assert table.column("split").to_pylist().count("heldout") == 1
    lt = load_profile(p)
    assert 3 not in lt.verify_graph.axes[0] and lt.source["heldout_rows"] == 1
    plain = tmp_path / "plain.parquet"
    write_profile([{k: v for k, v in r.items() if k != "split"} for r in rows[:-1]], plain,
                  profile_metadata(m, {"name": "H200"}))
    assert read_profile(plain)[0].schema.equals(PROFILE_SCHEMA)  # no column, none written
    assert "heldout_rows" not in load_profile(plain).source


def _tiny_profile(tmp_path, eager_rows):
    """A profile of a few hand-set points: verify and draft graphs at bs 1-2, KV 100 and 200
    (1 ms everywhere), one prefill pair, and the given eager verify rows."""
    def row(kind, graph, bs, width, kv, ms):
        tokens = bs * width if kind == "verify" else (bs if kind == "draft" else 64)
        return dict(kind=kind, graph=graph, bs=bs, width=width, kv_len=kv, tokens=tokens,
                    latency_s=ms * 1e-3, p10_s=ms * 1e-3, p90_s=ms * 1e-3, reps=3)
    rows = [row("verify", True, b, w, k, 1.0) for b in (1, 2) for w in (1, 2) for k in (100, 200)]
    rows += [row("draft", True, b, 1, k, 0.5) for b in (1, 2) for k in (100, 200)]
    rows += [row("prefill", False, 1, 0, p, 2.0) for p in (0, 100)]
    rows += [row("verify", False, b, w, k, ms) for b, w, k, ms in eager_rows]
    p = tmp_path / "tiny.parquet"
    write_profile(rows, p, profile_metadata(load_model("llama-3.1-8b"), {"name": "H200"}))
    return load_profile(p)


def test_eager_below_its_lowest_kv_follows_the_first_kv_segment(tmp_path):
    """Worked by hand: eager verify measured only beyond the graph ladder (bs 4), at KV 300 and
    500.  The eager grid's KV axis also holds the graph's 100 and 200, where nothing was
    measured at bs 4 and the graph cannot be borrowed (bs 4 lies outside it).  Latency is
    affine in KV at a fixed shape, so the first segment's slope, (7 - 5) / 200 = 0.01 ms per
    token, carries down: KV 200 -> 5 - 1 = 4 ms, KV 100 -> 5 - 2 = 3 ms (the rule before held
    5 ms at both).  At width 2 the segment (1 ms at 300, 6 ms at 500: 0.025 ms per token) would
    reach zero at KV 260, so there the first value, 1 ms, is held instead."""
    t = _tiny_profile(tmp_path, [(4, 1, 300, 5.0), (4, 1, 500, 7.0),
                                 (4, 2, 300, 1.0), (4, 2, 500, 6.0)])
    assert t.verify_s(4, 1, 200, False)[0] == pytest.approx(4e-3, rel=1e-9)
    assert t.verify_s(4, 1, 100, False)[0] == pytest.approx(3e-3, rel=1e-9)
    assert t.verify_s(4, 1, 150, False)[0] == pytest.approx(3.5e-3, rel=1e-9)
    assert t.verify_s(4, 1, 400, False)[0] == pytest.approx(6e-3, rel=1e-9)   # measured segment
    assert t.verify_s(4, 2, 100, False)[0] == pytest.approx(1e-3, rel=1e-9)
    assert t.verify_s(4, 2, 200, False)[0] == pytest.approx(1e-3, rel=1e-9)
    # filled: these 4 nodes, and bs 1-2 at KV 300 and 500 (beyond the graph's KV, 8 nodes)
    assert t.source["holes_filled"]["verify_eager"] == 12


def test_a_derived_eager_point_takes_the_overhead_of_the_eager_batch_sizes_either_side(
        tmp_path, monkeypatch):
    """Worked by hand: verify graphs at bs 1, 2, 4, 8, 12 and 16 (widths 1-2, KV 100-200) all
    take 1 ms; eager verify is measured at bs 1 (1.5 ms: 0.5 ms over the graph), 8 (2.2 ms: 1.2)
    and 16 (3.0 ms: 2.0) at each of those widths and KV lengths.  Eager bs 2, 4 and 12 are derived
    from their graphs: the overhead between bs 1 and 8 is linear in batch size, 0.5 + 0.7 x 1/7
    = 0.6 ms at bs 2 and 0.5 + 0.7 x 3/7 = 0.8 ms at bs 4, so 1.6 and 1.8 ms; bs 12 takes
    1.2 + 0.8 x 4/8 = 1.6 ms over, 2.6 ms.  One overhead for every point, the median of all
    twelve measured (1.2 ms), gave 2.2 ms at all three: the 70B shard's small eager batches, whose
    overhead (0.57 ms at bs 1, 0.71 at bs 8) sits under its median (0.76), were predicted 1-2.5%
    slow that way (docs/backends.md).  The draft's few-microsecond overhead stays one number."""
    import backends.profile as bp

    def row(kind, graph, bs, width, kv, ms):
        tokens = bs * width if kind == "verify" else (bs if kind == "draft" else 64)
        return dict(kind=kind, graph=graph, bs=bs, width=width, kv_len=kv, tokens=tokens,
                    latency_s=ms * 1e-3, p10_s=ms * 1e-3, p90_s=ms * 1e-3, reps=3)
    cells = [(w, k) for w in (1, 2) for k in (100, 200)]
    rows = [row("verify", True, b, w, k, 1.0) for b in (1, 2, 4, 8, 12, 16) for w, k in cells]
    rows += [row("verify", False, b, w, k, ms) for b, ms in ((1, 1.5), (8, 2.2), (16, 3.0))
             for w, k in cells]
    rows += [row("draft", True, b, 1, k, 0.5) for b in (1, 2) for k in (100, 200)]
    rows += [row("prefill", False, 1, 0, p, 2.0) for p in (0, 100)]
    p = tmp_path / "bs.parquet"
    write_profile(rows, p, profile_metadata(load_model("llama-3.1-8b"), {"name": "H200"}))
    t = load_profile(p)
    for bs, ms in ((2, 1.6), (4, 1.8), (12, 2.6), (1, 1.5), (8, 2.2)):
        for w, k in cells:
            assert t.verify_s(bs, w, k, False)[0] == pytest.approx(ms * 1e-3, rel=1e-9), (bs, w, k)
    assert t.source["eager_derived"]["verify"]["overhead_s"] == pytest.approx(1.2e-3, rel=1e-9)
    monkeypatch.setattr(bp, "EAGER_OVERHEAD", "median")
    t = load_profile(p)
    for bs in (2, 4, 12):
        assert t.verify_s(bs, 1, 100, False)[0] == pytest.approx(2.2e-3, rel=1e-9)
