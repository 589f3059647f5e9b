"""The prefill line: exact-count prefill times read beside the grid (backends/prefill_line.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.latency_table import Grid, LatencyTable
from backends.prefill_line import line_arrays, line_at
from backends.profile import load_profile, write_profile
from backends.profile_file import line_rows, read_profile
from tests.simulator.helpers import linear_table
from traces.errors import SpecschedError


def test_line_at_worked_by_hand():
    """Counts 1, 2, 3 at 1, 3, 2 s: exact at a count, linear between, nothing outside."""
    lt, lv = line_arrays([3, 1, 2], [2.0, 1.0, 3.0])
    assert list(lt) == [1.0, 2.0, 3.0] and list(lv) == [1.0, 3.0, 2.0]
    assert line_at(lt, lv, 2.0) == (3.0, True)
    assert line_at(lt, lv, 2.5) == (2.5, True)
    assert line_at(lt, lv, 3.0) == (2.0, True)
    assert line_at(lt, lv, 0.5) == (0.0, False)
    assert line_at(lt, lv, 3.5) == (0.0, False)
    assert line_at(np.zeros(0), np.zeros(0), 2.0) == (0.0, False)


def test_line_arrays_refuses_a_count_twice_and_bad_latencies():
    with pytest.raises(ValueError, match="token count 2 given twice"):
        line_arrays([1, 2, 2], [1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="finite and > 0"):
        line_arrays([1, 2], [1.0, 0.0])


def _table(line: tuple | None) -> LatencyTable:
    """A prefill grid at tokens 32 and 64, prefixes 0 and 1,024: 1, 2 / 3, 4 ms."""
    base = linear_table()
    pf = Grid.build((np.array([32.0, 64.0]), np.array([0.0, 1024.0])),
                    np.array([[1e-3, 2e-3], [3e-3, 4e-3]]))
    pl = None if line is None else Grid((np.asarray(line[0], float),), np.asarray(line[1], float))
    return dataclasses.replace(base, prefill=pf, prefill_line=pl)


def _spike(scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """A line at counts 32..64 on the grid's own prefix-0 line (1 ms at 32, 3 ms at 64) but 4 ms
    at 48, all times ``scale``."""
    counts = np.arange(32, 65)
    vals = np.where(counts == 48, 4e-3, 1e-3 + (counts - 32) / 16 * 1e-3)
    return counts, vals * scale


def test_the_lookup_worked_by_hand():
    """The spiked line (:func:`_spike`).  At (48, 0): the line, 4 ms (the grid alone: 2 ms).
    At (48, 512): the grid at 48 tokens is 2 ms at prefix 0 and 3 ms at 1,024, so 2.5 ms at 512;
    the prefix adds 0.5 ms: 4.5 ms.  At 47: 1 + 15/16 ms.  At 100 tokens, past the line, the
    grid alone: its last token segment extended (3 + (100 - 64) / 32 x 2 = 5.25 ms at prefix 0),
    flagged outside."""
    t = _table(_spike())
    assert t.prefill_s(48, 0)[0] == pytest.approx(4e-3, rel=1e-12)
    assert t.prefill_s(48, 512)[0] == pytest.approx(4.5e-3, rel=1e-12)
    assert t.prefill_s(47, 0)[0] == pytest.approx((1 + 15 / 16) * 1e-3, rel=1e-12)
    v, outside = t.prefill_s(100, 0)
    assert v == pytest.approx(5.25e-3, rel=1e-12) and outside
    assert _table(None).prefill_s(48, 0)[0] == pytest.approx(2e-3, rel=1e-12)
    src = t.source["prefill_line"]
    assert src["counts"] == 33 and src["tokens"] == [32, 64]
    assert src["level_at_grid_tokens"] == {"32": 1.0, "64": 1.0}


def test_a_line_is_put_at_the_grids_level_per_grid_token():
    """The same line recorded 2x slow: level 0.5 at 32 and 64, so every lookup is as above.
    Recorded slow by 1 / (0.5 - 0.25 (T - 32) / 32), 2x at 32 and 4x at 64: level 0.5 and 0.25,
    linear in the count between, the same lookups again; the grid's points stay exact."""
    counts, vals = _spike()
    for scale in (2.0, 1.0 / (0.5 - 0.25 * (counts - 32) / 32)):
        t = _table((counts, vals * scale))
        assert t.prefill_s(48, 0)[0] == pytest.approx(4e-3, rel=1e-12)
        assert t.prefill_s(48, 512)[0] == pytest.approx(4.5e-3, rel=1e-12)
        for tok, want in ((32, 1e-3), (64, 3e-3)):
            assert t.prefill_s(tok, 0)[0] == pytest.approx(want, rel=1e-12)
    assert t.source["prefill_line"]["level_at_grid_tokens"] == {"32": 0.5, "64": 0.25}


def test_a_line_with_no_grid_token_within_it_is_kept_as_recorded():
    t = _table((np.arange(33, 40), np.full(7, 7e-3)))
    assert t.prefill_s(35, 0)[0] == pytest.approx(7e-3, rel=1e-12)
    assert t.source["prefill_line"]["level"].startswith("none")


def test_a_line_is_kept_as_measured_not_made_monotone():
    t = _table(_spike())
    assert t.prefill_s(49, 0)[0] < t.prefill_s(48, 0)[0]


def _without_line(tmp_path):
    """The shipped 8B profile without its prefill line: its grid and held-out rows."""
    out = tmp_path / "plain.parquet"
    if not out.exists():
        rows, meta = read_profile("backends/profiles/llama-3.1-8b__H200.parquet")
        write_profile([r for r in rows.to_pylist() if r["split"] != "line"], out, meta)
    return out


def _with_line(tmp_path, counts, lat, split="line"):
    """The shipped 8B profile's grid and held-out rows with line rows at ``counts`` (prefix 0)."""
    rows, meta = read_profile(_without_line(tmp_path))
    rows = rows.to_pylist()
    for c, v in zip(counts, lat):
        rows.append({"kind": "prefill", "graph": False, "bs": 1, "width": 0, "kv_len": 0,
                     "tokens": int(c), "latency_s": v, "p10_s": v, "p90_s": v, "reps": 3,
                     "split": split})
    out = tmp_path / "line.parquet"
    write_profile(rows, out, meta)
    return out


def test_a_profile_file_carries_its_line_and_the_grid_stays_the_grid(tmp_path):
    """Line rows at 31, 32, 33 and 64 (1, 2, 3, 4 ms), two of them at the grid's tokens 32 and
    64: the grid keeps its values, the lookup reproduces them at 32 and 64, and at 31, below the
    first grid token, the line's 1 ms is held at the level of 32 (the grid's value there / 2 ms)."""
    path = _with_line(tmp_path, [31, 32, 33, 64], [1e-3, 2e-3, 3e-3, 4e-3])
    assert sorted(line_rows(read_profile(path)[0]).column("tokens").to_pylist()) == [31, 32, 33, 64]
    plain = load_profile(_without_line(tmp_path))
    t = load_profile(path)
    np.testing.assert_array_equal(t.prefill.values, plain.prefill.values)
    for tok in (32, 64):
        assert t.prefill_s(tok, 0)[0] == pytest.approx(plain.prefill_s(tok, 0)[0], rel=1e-12)
    assert t.prefill_s(31, 0)[0] == pytest.approx(plain.prefill_s(32, 0)[0] / 2, rel=1e-12)
    assert t.prefill_s(2048, 0)[0] == plain.prefill_s(2048, 0)[0]
    assert t.source.get("heldout_rows") == plain.source.get("heldout_rows")


@pytest.mark.parametrize("change, match", [
    ({"kv_len": 128}, "line row must be a prefill of one request"),
    ({"bs": 2, "tokens": 64}, "line row must be a prefill of one request"),
])
def test_a_line_row_that_is_not_a_one_request_prefix_zero_prefill_is_refused(tmp_path, change,
                                                                              match):
    path = _with_line(tmp_path, [40], [1e-3])
    rows, meta = read_profile(path)
    rows = [dict(r, **change) if r.get("split") == "line" else r for r in rows.to_pylist()]
    with pytest.raises(SpecschedError, match=match) as e:
        write_profile(rows, tmp_path / "bad.parquet", meta)
    assert "split" in str(e.value)
    assert not (tmp_path / "bad.parquet").exists()


def test_the_engine_times_prefills_on_the_line(tmp_path):
    """A simulated run on a profile whose line over 1..4,096 tokens is 1 ms at even counts and
    2 ms at odd ones: every grid token is even, so the line's level at each is the grid's value
    there / 1 ms, and on the 8B's grid (linear in the tokens at prefix 0 between its tokens) a
    one-request prefill at prefix 0 takes the plain grid's time at an even count and twice it at
    an odd one.  Every prefill step's latency is the table's lookup."""
    from backends.profile import ProfileExecutor
    from simulator import SimConfig, run
    from traces.io import read_trace_arrays

    counts = np.arange(1, 4097)
    path = _with_line(tmp_path, counts, np.where(counts % 2, 2e-3, 1e-3))
    ex = ProfileExecutor(path)
    table = ex.latency_table()
    plain = load_profile(_without_line(tmp_path))
    trace = read_trace_arrays("traces/samples/azure_conv_eagle_2k.parquet").head(40)
    s = run(trace, SimConfig.load(None, {}), ex, kv_capacity_tokens=2_000_000).steps.to_pandas()
    pf = s[s.kind == "prefill"]
    tok, pre = pf.tokens.to_numpy(np.float64), pf.lookup_kv.to_numpy(np.float64)
    want = np.array([table.prefill_s(t, k)[0] for t, k in zip(tok, pre)])
    np.testing.assert_allclose(pf.latency_s.to_numpy(), want, rtol=1e-12)
    at0 = (pre == 0) & (tok >= 32) & (tok <= 4096)
    odd = at0 & (tok % 2 == 1)
    assert odd.sum() >= 3 and (at0 & ~odd).sum() >= 3
    grid = np.array([plain.prefill_s(t, 0)[0] for t in tok])
    np.testing.assert_allclose(want[odd], 2 * grid[odd], rtol=1e-9)
    np.testing.assert_allclose(want[at0 & ~odd], grid[at0 & ~odd], rtol=1e-9)


_SHIPPED_8B = None


def _shipped_8b():
    global _SHIPPED_8B
    if _SHIPPED_8B is None:
        _SHIPPED_8B = load_profile("backends/profiles/llama-3.1-8b__H200.parquet")
    return _SHIPPED_8B


@settings(max_examples=300, deadline=None)
@given(tok=st.integers(1, 1536), p1=st.floats(-2048, 32768), p2=st.floats(-2048, 32768))
def test_on_the_shipped_line_a_longer_prefix_never_costs_less(tok, p1, p2):
    """The shipped 8B profile carries a line (1..1,536): at any count in it a prefill's time is
    positive, and more prefix (more keys attended) never makes it faster, since the line only
    shifts the grid's prefix curve at that count."""
    t = _shipped_8b()
    assert t.source["prefill_line"]["counts"] == 1536
    lo, hi = sorted((p1, p2))
    a, b = t.prefill_s(tok, lo)[0], t.prefill_s(tok, hi)[0]
    assert 0 < a <= b * (1 + 1e-12)
