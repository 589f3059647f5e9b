"""``specsched profile``'s held-out points end to end on the CPU (AITER's Triton kernels under
the Triton interpreter, graph sections launched eagerly: a CPU has no graphs)."""

from __future__ import annotations

import json

from tests.aiter.conftest import INTERPRETED_MARKS, TINY_PROFILE, cpu_profiler_prelude, run_interpreted

pytestmark = INTERPRETED_MARKS


def test_profile_records_heldout_points_and_heldout_only_adds_more(tmp_path):
    """A tiny grid (graph bs 1 and 3 on the ladder 1, 2, 3; KV 16 and 64; prefill tokens 8 and
    16) with 6 held-out points, then ``run_heldout_only`` adds 8 more to it in a new file: the
    held-out rows are off the grid, the grids are those of the grid rows alone, the base's rows
    come through unchanged and the base file is untouched."""
    first, second = tmp_path / "tiny.parquet", tmp_path / "tiny_more.parquet"
    out = run_interpreted(f"""
import hashlib, json
from backends.aiter import bridge, executor
from backends.aiter.runner import Runner
from backends.aiter.profiling import ProfileSpec, run_profile
from backends.aiter.heldout_sweep import run_heldout_only
from backends.heldout import grid_span, is_off_grid, HeldoutPoint
from backends.models import ModelShape
from backends.profile import grid_rows, heldout_rows, load_profile, read_profile

{cpu_profiler_prelude('[1, 2, 3]')}
{TINY_PROFILE}
s1 = run_profile(m, {str(first)!r}, spec, command='pytest', heldout=6, heldout_seed=3)
sha = hashlib.sha256(open({str(first)!r}, 'rb').read()).hexdigest()
s2 = run_heldout_only(m, {str(second)!r}, {str(first)!r}, spec, n=8, seed=4, command='pytest2')
def key(r):
    return [r['kind'], r['graph'], r['bs'], r['width'], r['kv_len'], r['tokens']]
res = {{}}
for name, path in (('first', {str(first)!r}), ('second', {str(second)!r})):
    rows, meta = read_profile(path)
    g, h = grid_rows(rows).to_pylist(), heldout_rows(rows).to_pylist()
    span = grid_span(g)
    t = load_profile(path)
    res[name] = {{'grid': sorted(key(r) for r in g), 'held': sorted(key(r) for r in h),
                 'rows': rows.to_pylist(),
                 'off': all(is_off_grid(HeldoutPoint(*key(r)), span) for r in h),
                 'axes': [a.tolist() for a in t.verify_graph.axes],
                 'prefill_axes': [a.tolist() for a in t.prefill.axes],
                 'source_heldout': t.source.get('heldout_rows'),
                 'notes': [n['heldout'] for n in meta['notes'] if isinstance(n, dict) and 'heldout' in n],
                 'command': meta['command']}}
res['sha_after'] = hashlib.sha256(open({str(first)!r}, 'rb').read()).hexdigest()
res['sha'] = sha
res['s1'] = [s1['rows'], s1['heldout']]
res['s2'] = [s2['rows'], s2['heldout'], s2['base_rows']]
print(json.dumps(res))
""")
    d = json.loads(out.strip().splitlines()[-1])
    a, b = d["first"], d["second"]
    assert d["s1"] == [len(a["grid"]) + 6, 6] and len(a["held"]) == 6
    assert a["off"] and b["off"] and a["source_heldout"] == 6 and b["source_heldout"] == 14
    # 8 points: one or more of every section (backends.heldout.allocate), each measured
    assert {(k, g) for k, g, *_ in b["held"]} == {
        ("verify", True), ("verify", False), ("draft", True), ("draft", False),
        ("draft_extend", True), ("draft_extend", False), ("prefill", False)}
    # the grid is the sweep's: graph bs 1 and 3, the 2 between them only among held-out rows
    assert a["axes"] == [[1.0, 3.0], [1.0], [16.0, 64.0]] and a["prefill_axes"] == [[8.0, 16.0], [0.0]]
    assert [n["points"] for n in a["notes"]] == [6] and a["notes"][0]["seed"] == 3
    # --heldout-only: the base's rows unchanged (held-out ones too), 5 new ones, the base untouched
    assert d["sha_after"] == d["sha"] and d["s2"] == [len(a["rows"]) + 8, 8, len(a["rows"])]
    assert all(r in b["rows"] for r in a["rows"])
    assert b["grid"] == a["grid"] and set(map(tuple, a["held"])) < set(map(tuple, b["held"]))
    assert b["axes"] == a["axes"] and b["command"] == a["command"] == "pytest"
    assert [n["points"] for n in b["notes"]] == [6, 8] and b["notes"][1]["command"] == "pytest2"
    assert "separate --heldout-only run" in b["notes"][1]["recorded"]
    assert b["notes"][1]["same_gpu_as_grid"] is None        # on a CPU: no GPU UUID to compare


def test_same_gpu_compares_uuids_and_says_when_it_cannot():
    from backends.journal import same_gpu

    assert same_gpu({"uuid": "a"}, {"uuid": "a"}) is True
    assert same_gpu({"uuid": "a"}, {"uuid": "b"}) is False
    assert same_gpu({"name": "none"}, {"uuid": "b"}) is None and same_gpu({}, {}) is None
