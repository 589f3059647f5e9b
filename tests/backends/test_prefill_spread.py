"""backends/prefill_spread.py: the token counts a prefill grid point is timed at, and how they
are combined into its row."""

from __future__ import annotations

import pytest

from backends.prefill_spread import combine, spread_counts, spread_note, spread_of


def test_counts_span_a_quarter_of_the_nearer_gap():
    """448 in the grid 384, 448, 512: both gaps 64, w = 16, five counts over 432..464 step 8.
    416 between 384 and 512 (gaps 32 and 96): w = 8, counts 408, 412, 416, 420, 424."""
    assert spread_counts(448, [384, 448, 512], 5) == [432, 440, 448, 456, 464]
    assert spread_counts(416, [384, 512], 5) == [408, 412, 416, 420, 424]


def test_ends_of_the_grid():
    """The smallest point's lower gap runs to 0 (32 in 32, 64: gaps 32 and 32, w = 8: 24, 32,
    40); above the largest point only the lower gap counts (8,192 after 6,144: w = 512)."""
    assert spread_counts(32, [32, 64], 3) == [24, 32, 40]
    assert spread_counts(8192, [6144, 8192], 3) == [7680, 8192, 8704]


def test_a_step_the_grid_marks_with_adjacent_counts_is_timed_exactly():
    """A fused-MoE tile threshold is in the grid as 1,023 and 1,024: gap 1, w = 0, so each is
    its own only count, and 768 below them spans a quarter of its nearer gap (256 to 512
    and 255 to 1,023: w = 63) without reaching 1,023."""
    grid = [512, 768, 1023, 1024, 2048]
    assert spread_counts(1023, grid, 5) == [1023]
    assert spread_counts(1024, grid, 5) == [1024]
    assert spread_counts(768, grid, 3) == [705, 768, 831]


def test_spread_one_and_bad_spreads():
    """Spread 1 is the point alone; an even or non-positive spread is refused (the median of an
    even count is not one of them)."""
    assert spread_counts(416, [384, 512], 1) == [416]
    for n in (0, 2, -3):
        with pytest.raises(ValueError):
            spread_counts(416, [384, 512], n)


def test_combine_takes_the_median_count_not_the_spike():
    """Counts timed (ms) [10, 10.2, 9.8], [15, 15.1, 14.9] (a spike), [11, 11.2, 10.8]: the
    counts' medians are 10, 15, 11, so the row is 11; p10 and p90 are the medians of the
    counts' own (numpy's linear percentiles: 9.84, 14.92, 10.84 -> 10.84; 10.16, 15.08, 11.16 ->
    11.16), and the samples are the 9 timed."""
    med, p10, p90, n = combine([[10, 10.2, 9.8], [15, 15.1, 14.9], [11, 11.2, 10.8]])
    assert med == pytest.approx(11.0) and n == 9
    assert p10 == pytest.approx(10.84) and p90 == pytest.approx(11.16)


def test_combine_keeps_p10_and_p90_around_the_median():
    """One sample per count (10, 20, 30): percentiles equal the samples, so p10 and p90 are
    the median count's 20, as is the row."""
    assert combine([[10.0], [20.0], [30.0]]) == (20.0, 20.0, 20.0, 3)
    with pytest.raises(ValueError):
        combine([[1.0], []])


def test_the_notes_say_the_spread_and_read_it_back():
    """A profile's notes with the spread entry read back as its count; notes without one (every
    profile recorded before the setting) read as 1."""
    assert spread_of({"notes": ["x", spread_note(5), {"journal": {}}]}) == 5
    assert spread_of({"notes": ["x"]}) == 1 and spread_of({}) == 1
