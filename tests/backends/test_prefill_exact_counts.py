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
