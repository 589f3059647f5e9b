"""``specsched profile --prefill-spread`` and ``calibrate`` of such a profile, on the CPU
(AITER's Triton kernels under the Triton interpreter, graph sections launched eagerly)."""

from __future__ import annotations

import json

from tests.aiter.conftest import INTERPRETED_MARKS, TINY_PROFILE, cpu_profiler_prelude, run_interpreted

pytestmark = INTERPRETED_MARKS


def test_spread_prefill_rows_and_their_calibration(tmp_path):
    """The tiny grid (prefills of 8 and 16 tokens at prefix 0, one timed launch each) with
    spread 3: 8 is timed at 6, 8 and 10 tokens (its gaps, 8 to 0 and 8 to 16, give w = 2) and
    16 at 14, 16 and 18 (only its lower gap, 8), each row holds the 3 launches and the notes
    say the spread. Calibrating that profile times its prefill anchors at the same counts, and
    its held-out prefills (if any are drawn) at their own count alone."""
    base, out = tmp_path / "tiny.parquet", tmp_path / "tiny_cal.parquet"
    res = run_interpreted(f"""
import json
from dataclasses import replace
from backends.aiter import bridge, executor
from backends.aiter.runner import Runner
from backends.aiter.profiling import ProfileSpec, run_profile
from backends.aiter.calibrate_sweep import run_calibrate
from backends.models import ModelShape
from backends.profile import read_profile

{cpu_profiler_prelude('[1, 2, 3]')}
{TINY_PROFILE}
calls = []
real_prefill = Runner.prefill
def logged(self, tokens, prefix, **kw):
    out = real_prefill(self, tokens, prefix, **kw)
    if 'reps' in kw:  # a timed measurement, not the untimed settling
        calls.append([int(tokens[0]), int(prefix[0]), kw['reps']])
    return out
Runner.prefill = logged
run_profile(m, {str(base)!r}, replace(spec, prefill_spread=3), command='pytest')
profile_calls, calls[:] = list(calls), []
rows, meta = read_profile({str(base)!r})
s = run_calibrate(m, {str(out)!r}, {str(base)!r}, spec, anchors=10, heldout=6, seed=1,
                  budget_s=600, command='pytest-cal')
crows, cmeta = read_profile({str(out)!r})
print(json.dumps({{'profile_calls': profile_calls, 'cal_calls': calls,
                  'rows': [r for r in rows.to_pylist() if r['kind'] == 'prefill'],
                  'notes': [n for n in meta['notes'] if isinstance(n, dict)],
                  'cal': cmeta['calibration'],
                  'held': [r for r in crows.to_pylist()
                           if r['kind'] == 'prefill' and r['split'] == 'heldout']}}))
""")
    d = json.loads(res.strip().splitlines()[-1])
    assert sorted(c[0] for c in d["profile_calls"]) == [6, 8, 10, 14, 16, 18]
    assert all(c[1] == 0 and c[2] == 1 for c in d["profile_calls"])
    assert sorted((r["tokens"], r["reps"]) for r in d["rows"]) == [(8, 3), (16, 3)]
    for r in d["rows"]:
        assert r["p10_s"] <= r["latency_s"] <= r["p90_s"]
    spread = [n["prefill_spread"] for n in d["notes"] if "prefill_spread" in n]
    assert len(spread) == 1 and spread[0]["counts"] == 3
    cal = d["cal"]
    assert cal["spec"]["prefill_spread"] == 3
    anchors = [a for a in cal["anchors"] if a["kind"] == "prefill"]
    assert anchors and all(a["reps"] == 3 for a in anchors)
    want = {8: [6, 8, 10], 16: [14, 16, 18]}
    timed = [c[0] for c in d["cal_calls"]]
    for a in anchors:
        assert all(c in timed for c in want[a["tokens"]])
    assert all(r["reps"] == 1 for r in d["held"])
