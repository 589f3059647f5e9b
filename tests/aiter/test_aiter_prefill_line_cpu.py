"""``specsched profile --prefill-line`` end to end on the CPU (AITER's Triton kernels under the
Triton interpreter, graph sections launched eagerly: a CPU has no graphs)."""

from __future__ import annotations

import json

from tests.aiter.conftest import INTERPRETED_MARKS, TINY_PROFILE, cpu_profiler_prelude, run_interpreted

pytestmark = INTERPRETED_MARKS


def test_profile_records_a_prefill_line_beside_its_grid_and_heldout_points(tmp_path):
    """The tiny grid (prefill tokens 8 and 16 at prefix 0) with a line to 12 and 3 held-out
    points: 12 line rows at counts 1..12, one request at prefix 0; the grid's prefill rows are
    the two grid points (the line's count 8 is the same pass, kept in both); the table reads the
    line at its counts (count 5 at its own row's value) and its grid is the grid rows' alone.
    """
    out = tmp_path / "tiny_line.parquet"
    res = run_interpreted(f"""
import json
from backends.aiter import bridge, executor
from backends.aiter.runner import Runner
from backends.aiter.profiling import ProfileSpec, run_profile
from backends.models import ModelShape
from backends.profile import grid_rows, heldout_rows, line_rows, load_profile, read_profile

{cpu_profiler_prelude('[1, 2, 3]')}
{TINY_PROFILE}
import dataclasses
spec = dataclasses.replace(spec, prefill_line=12)
s = run_profile(m, {str(out)!r}, spec, command='pytest', heldout=3, heldout_seed=1)
rows, meta = read_profile({str(out)!r})
line = line_rows(rows).to_pylist()
grid = grid_rows(rows).to_pylist()
t = load_profile({str(out)!r})
by = {{r['tokens']: r['latency_s'] for r in line}}
print(json.dumps({{
    'summary': [s['rows'], s['heldout'], s['prefill_line']],
    'line': sorted([r['tokens'], r['bs'], r['kv_len'], r['kind']] for r in line),
    'grid_prefill': sorted([r['tokens'], r['kv_len']] for r in grid if r['kind'] == 'prefill'),
    'held': heldout_rows(rows).num_rows,
    'at5': [t.prefill_s(5, 0)[0], by[5]],
    'at8': [by[8], [r['latency_s'] for r in grid if r['kind'] == 'prefill' and r['tokens'] == 8]],
    'prefill_axes': [a.tolist() for a in t.prefill.axes],
    'source': t.source['prefill_line']['counts'],
}}))
""")
    d = json.loads(res.strip().splitlines()[-1])
    rows, held, nline = d["summary"]
    assert nline == 12 and held == 3 and d["held"] == 3
    assert d["line"] == [[n, 1, 0, "prefill"] for n in range(1, 13)]
    assert d["grid_prefill"] == [[8, 0], [16, 0]]
    assert d["prefill_axes"] == [[8.0, 16.0], [0.0]]
    assert d["at5"][0] == d["at5"][1]
    assert d["at8"][1] == [d["at8"][0]]  # one measurement, in the grid and the line
    assert d["source"] == 12
