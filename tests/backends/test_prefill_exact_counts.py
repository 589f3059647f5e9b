"""benchmarks/prefill_exact_counts.py: exact-count comparison and the spread emulation."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))


def test_spread_counts_span_a_quarter_of_the_nearer_gap():
    """512 in the grid 256, 512, 768: gaps 256 and 256, w = 64, counts 448, 512, 576; 416
    between 384 and 512 (gaps 32 and 96): w = 8, five counts 408-424; 8,192 above 6,144:
    the lower gap alone, w = 512; 1,024 next to 1,023: w = 0, the count alone."""
    import prefill_exact_counts as m

    assert m.spread_counts(512, [256, 512, 768], 3) == [448, 512, 576]
    assert m.spread_counts(416, [384, 512], 5) == [408, 412, 416, 420, 424]
    assert m.spread_counts(8192, [6144, 8192], 3) == [7680, 8192, 8704]
    assert m.spread_counts(1024, [1023, 1024, 2048], 3) == [1024]


def test_exact_counts_compare_live_medians_with_the_sweep(tmp_path):
    """A run with prefills of 416 tokens taking 11, 12 and 13 ms (median 12) and one of 100
    tokens (too few), against a sweep of 12.5 ms at 416: one count, log(12 / 12.5) = -4.08%."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import prefill_exact_counts as m

    run = tmp_path / "live_x"
    run.mkdir()
    pq.write_table(pa.table({"kind": ["prefill"] * 4, "bs": [1] * 4, "kv_mean": [0.0] * 4,
                             "tokens": [416, 416, 416, 100],
                             "latency_s": [0.011, 0.012, 0.013, 0.005]}), run / "steps.parquet")
    got = m.exact_counts([run], {(0, 416): 0.0125, (0, 100): 0.005}, 3)
    assert len(got) == 1 and got[0][:2] == (416, 3) and abs(got[0][2] - (-4.0822)) < 1e-3


def test_no_live_run_is_one_error_line(tmp_path, capsys):
    """No live run of the model under --results: exit 2 and one error line."""
    import prefill_exact_counts as m

    assert m.main(["x.parquet", "--model", "llama-3.1-8b", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1


def test_a_line_holding_the_live_times_leaves_no_residual(tmp_path):
    """Three single-request prefix-0 prefills of a shipped 8B live run (the first three with
    distinct counts off the grid), scored against the shipped profile with a line that holds
    exactly their live times, and the profile's own values at its prefix-0 grid tokens (so the
    line's level is 1): the line reaches the three, each predicted as the profile's value plus
    (its live time minus the profile's prefix-0 value there) = its live time, residual 0; the
    profile alone misses them (mean |residual| > 0)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    import prefill_exact_counts as m
    from backends.profile import load_profile
    from backends.shipped import default_profile

    src = Path(__file__).resolve().parents[2] / "benchmarks/results/h200-2026-12-04e/live_conv_bucket150"
    steps = pq.read_table(src / "steps.parquet")
    pre = steps.filter(pc.and_(pc.equal(steps["kind"], "prefill"), pc.equal(steps["bs"], 1)))
    pre = pre.filter(pc.equal(pre["kv_mean"], 0.0))
    profile = default_profile("llama-3.1-8b")
    table = load_profile(profile)
    grid = {int(t) for t in table.prefill.axes[0]}
    keep, seen = [], set()
    for i, t in enumerate(pre["tokens"].to_pylist()):
        if t not in grid and t not in seen and len(keep) < 3:
            keep.append(i)
            seen.add(t)
    run = tmp_path / "live_x"
    run.mkdir()
    three = pre.take(keep)
    pq.write_table(three, run / "steps.parquet")
    line = {(0, t): s for t, s in zip(three["tokens"].to_pylist(), three["latency_s"].to_pylist())}
    line |= {(0, t): table.prefill_s(t, 0)[0] for t in grid}
    alone = m.score([run], profile)
    got = m.score([run], profile, line)
    assert got["reached"] == 3 and got["after"] < 1e-9 and got["raw"] < 1e-9
    assert alone["raw"] == got["before"] > 0
