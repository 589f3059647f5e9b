"""The straggler-aware KV of a launch on the MLA path's decode kernel (AITER's
``decode_attention_fwd_grouped_rope``), worked out by hand from the kernel's grid, and the tool
that gives a recorded profile a measured occupancy."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from backends.attention_kv import (ATT_MLA, ATT_ON, KERNEL_MLA, TAIL_EXPONENT, attention_kernel,
                                   attention_params, effective_kv, kv_segments, verify_kv)

ROOT = Path(__file__).resolve().parents[2]
#: the occupancy the H200 reported for the stage-1 kernel (h200-2026-12-03/straggler_mla.json)
MLA = {"kernel": "mla_decode", "sms": 132, "head_groups": 1, "target_programs": 264,
       "min_splits": 2, "max_splits": 16, "slots_per_sm": {"mla_decode": 2}}


def test_the_splits_follow_the_executors_rule():
    """clamp(ceil(2 x 132 / rows), 2, 16): 16 up to 16 rows, 11 at 24, 2 from 132 rows."""
    a = attention_params(MLA)
    assert a[ATT_ON] == a[ATT_MLA] == 1.0
    from backends.aiter.mla_kernels import decode_splits

    for rows, want in ((1, 16), (8, 16), (16, 16), (17, 16), (18, 15), (24, 11), (32, 9),
                       (132, 2), (192, 2), (512, 2)):
        assert kv_segments(rows / 4.0, float(rows), a) == want == decode_splits(rows), rows
        assert attention_kernel(rows / 4.0, float(rows), False, a) == KERNEL_MLA


def test_a_draft_step_in_one_wave_is_looked_up_by_hand():
    """24 draft rows: 11 splits, 264 programs on 132 SMs x 2 slots = one wave, two per SM in the
    uniform batch; the straggler's programs, alone, run ``(1/2) ** 0.4`` of the time per key.
    One request at 23,000 keys and 23 at 8,000 (mean 8,625): 8,625 + 0.757858 x 14,375."""
    a = attention_params(MLA)
    assert TAIL_EXPONENT["mla"] == 0.4
    kv = [23000.0] + [8000.0] * 23
    want = 8625.0 + 0.5 ** 0.4 * (23000.0 - 8625.0)
    assert want == pytest.approx(19519.2, abs=0.1)
    assert effective_kv(sum(kv), max(kv), 24.0, 24.0, 24.0, True, a) == pytest.approx(want)


def test_a_verify_in_two_waves_is_looked_up_by_hand():
    """48 requests at width 4: 192 rows, 2 splits, 384 programs over 264 slots (two waves).
    One at 4,100 keys, 47 at 1,100 (mean 1,162.5): the others drain 384/264 waves of the mean,
    the straggler's tail runs on at 0.757858, and the uniform launch takes two waves:
    (1.4545 x 1162.5 + 0.757858 x 2937.5) / 2. ``verify_kv`` takes the same path (no 2D
    lone-straggler form on the MLA path)."""
    a = attention_params(MLA)
    kv = [4100.0] + [1100.0] * 47
    want = (384 / 264 * 1162.5 + 0.5 ** 0.4 * (4100.0 - 1162.5)) / 2.0
    assert want == pytest.approx(1958.6, abs=0.1)
    assert effective_kv(sum(kv), max(kv), 48.0, 48.0, 192.0, False, a) == pytest.approx(want)
    z = np.zeros(1)
    assert verify_kv(sum(kv), max(kv), 48.0, 48.0, 192.0, 61.0, a, z, z, z,
                     np.zeros((1, 1, 1)), 48.0, 4.0) == pytest.approx(want)
    # a uniform batch is its own KV, and an incomplete record falls back to the mean
    assert effective_kv(48 * 3000.0, 3000.0, 48.0, 48.0, 192.0, False, a) == pytest.approx(3000.0)
    b = attention_params({k: v for k, v in MLA.items() if k != "head_groups"})
    assert not b.any()
    assert effective_kv(sum(kv), max(kv), 48.0, 48.0, 192.0, False, b) == pytest.approx(1162.5)


def _script(*args):
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "profile_attention.py"),
                           *map(str, args)], capture_output=True, text=True, cwd=ROOT)


def test_a_measured_occupancy_is_given_to_a_profile_with_its_rows_unchanged(tmp_path):
    from backends.profile import read_profile

    src = ROOT / "benchmarks" / "results" / "h200-2026-12-03" / "straggler_mla.json"
    prof = tmp_path / "v3.parquet"
    shutil.copy(ROOT / "backends" / "profiles" / "deepseek-v3__H200.parquet", prof)
    before, meta = read_profile(prof)
    from backends.profile import write_profile

    write_profile(before, prof, {**meta, "attention": None})  # as recorded, before 2026-12-03
    out = tmp_path / "out.parquet"
    r = _script(prof, "--from", src, "--model", "deepseek-v2-lite", "-o", out)
    assert r.returncode == 0, r.stderr
    after, m2 = read_profile(out)
    assert after.equals(before)
    assert m2["attention"] == json.loads(src.read_text())["summary"]["occupancy"]
    assert "copied from" in m2["notes"][-1]
    # a dense profile, or a dense source, is refused with one error line and nothing written
    bad = tmp_path / "bad.parquet"
    r = _script(ROOT / "backends" / "profiles" / "llama-3.1-8b__H200.parquet", "--from", src,
                "--model", "deepseek-v2-lite", "-o", bad)
    assert r.returncode == 2 and r.stderr.startswith("error:") and "not this profile's" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not bad.exists()
    r = _script(prof, "--from", ROOT / "backends" / "profiles" / "llama-3.1-8b__H200.parquet",
                "-o", bad)
    assert r.returncode == 2 and not bad.exists()
