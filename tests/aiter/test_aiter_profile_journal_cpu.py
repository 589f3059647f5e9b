"""``specsched profile --journal`` on the CPU (AITER's Triton kernels under the Triton
interpreter): a sweep cut off after a few rows goes on from its journal and measures only the
rest, a journal of other settings is refused, and one whose grid grew measures only the new
points."""

from __future__ import annotations

import json

from tests.aiter.conftest import INTERPRETED_MARKS, TINY_PROFILE, cpu_profiler_prelude, run_interpreted

pytestmark = INTERPRETED_MARKS


def test_a_cut_off_profile_sweep_goes_on_from_its_journal(tmp_path):
    """The tiny grid, cut after its 5th measured row (as a time limit kills a sweep), then run
    again with the same journal: the second sitting takes those 5 rows unchanged and measures
    the rest; the file holds every grid row once, and the profile's notes name both sittings.
    The same journal with another KV grid is refused before anything is measured."""
    j, out = tmp_path / "sweep.jsonl", tmp_path / "tiny.parquet"
    res = run_interpreted(f"""
import json
from dataclasses import replace
from backends.aiter import bridge, executor
from backends.aiter.runner import Runner
from backends.aiter.profiling import ProfileSpec, run_profile
from backends.journal import PointJournal
from backends.models import ModelShape
from backends.profile import read_profile
from traces.errors import SpecschedError

{cpu_profiler_prelude('[1, 2, 3]')}
{TINY_PROFILE}
add = PointJournal.add
def cut(self, row):
    if self.measured == 5:  # the 6th measurement is lost, as when a time limit kills it
        raise KeyboardInterrupt('time limit')
    return add(self, row)
PointJournal.add = cut
try:
    run_profile(m, {str(out)!r}, spec, command='pytest', journal={str(j)!r})
except KeyboardInterrupt:
    pass
PointJournal.add = add
first = [json.loads(x)['row'] for x in open({str(j)!r}) if '"row"' in x]
exists = __import__('os').path.exists({str(out)!r})
s = run_profile(m, {str(out)!r}, spec, command='pytest', journal={str(j)!r})
rows, meta = read_profile({str(out)!r})
jn = [n['journal'] for n in meta['notes'] if isinstance(n, dict) and 'journal' in n][0]
try:
    run_profile(m, {str(tmp_path / 'other.parquet')!r}, replace(spec, kv=(16, 32)), journal={str(j)!r})
    refused = None
except SpecschedError as e:
    refused = str(e)
grown = run_profile(m, {str(tmp_path / 'grown.parquet')!r}, replace(spec, prefill_tokens=(8, 12, 16)),
                    command='pytest', journal={str(j)!r})
grows, gmeta = read_profile({str(tmp_path / 'grown.parquet')!r})
gnotes = [n for n in gmeta['notes'] if isinstance(n, str) and 'grew' in n]
gsegs = [n['journal']['segments'] for n in gmeta['notes'] if isinstance(n, dict) and 'journal' in n][0]
print(json.dumps({{'first': first, 'exists': exists, 'rows': rows.to_pylist(),
                  'from_journal': s['rows_from_journal'], 'jn': jn, 'refused': refused,
                  'grown_measured': grown['rows_measured'], 'grown_rows': grows.to_pylist(),
                  'gnotes': gnotes, 'gsegs': gsegs}}))
""")
    d = json.loads(res.strip().splitlines()[-1])
    key = lambda r: (r["kind"], r["graph"], r["bs"], r["width"], r["kv_len"], r["tokens"])  # noqa: E731
    assert len(d["first"]) == 5 and not d["exists"]  # cut off: nothing but the journal written
    rows = d["rows"]
    assert len({key(r) for r in rows}) == len(rows)  # every grid row once
    by_key = {key(r): r for r in rows}
    for r in d["first"]:  # the first sitting's rows, unchanged
        assert {k: by_key[key(r)][k] for k in r} == r
    assert d["from_journal"] == 5
    assert (d["jn"]["rows_from_journal"], d["jn"]["rows_measured"]) == (5, len(rows) - 5)
    assert [s["first_call"] for s in d["jn"]["segments"]] == [0, 5]
    assert "belongs to another run: its spec" in d["refused"]
    # the grid grown by one prefill length: its one point (prefix 0) is measured, the rest kept
    assert d["grown_measured"] == 1
    grown = {key(r): r for r in d["grown_rows"]}
    assert set(grown) == set(by_key) | {("prefill", False, 1, 0, 0, 12)}
    assert all(grown[k]["latency_s"] == r["latency_s"] for k, r in by_key.items())
    assert d["gsegs"][-1]["grid_added"] == {"prefill_tokens": [12]}
    assert len(d["gnotes"]) == 1 and "grew the journal's grid" in d["gnotes"][0]


def test_grid_growth_accepts_only_added_points():
    """A journal's settings may be continued by a sweep whose grid lists hold more points;
    dropping a point or changing any other setting makes it another sweep's journal."""
    from backends.journal import grid_growth

    rec = {"bs": [1, 8], "kv": [512], "prefill_tokens": [128, 384], "reps": 5, "draft_kv": None}
    assert grid_growth(rec, dict(rec)) == {}
    assert grid_growth(rec, {**rec, "prefill_tokens": [32, 128, 240, 384]}) == {
        "prefill_tokens": [32, 240]}
    assert grid_growth(rec, {**rec, "bs": [1, 2, 8], "kv": [128, 512]}) == {"bs": [2], "kv": [128]}
    assert grid_growth(rec, {**rec, "prefill_tokens": [128]}) is None      # a point dropped
    assert grid_growth(rec, {**rec, "reps": 3}) is None                    # another setting
    assert grid_growth(rec, {**rec, "draft_kv": [512]}) is None            # None to a list
    assert grid_growth(rec, {k: v for k, v in rec.items() if k != "reps"}) is None
