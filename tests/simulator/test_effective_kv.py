"""The straggler-aware KV coordinate of table lookups (backends.latency_table.effective_kv), in
the engine's fast path, its per-batch path and the table executor."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.latency_table import attention_params, effective_kv
from simulator import core as C

#: H200-like grid constants (Llama-3.1-8B heads: 32 query, 8 KV -> 4 query rows per program)
ATT = {"sms": 132, "kv_heads": 8, "block_q": 4, "target_programs": 528, "min_segments": 16,
       "max_segments": 128, "slots_per_sm": {"2d": 8, "2d_decode": 6, "3d": 8}}


def cf(att=ATT):
    out = np.zeros(C.NCF)
    assert C.set_attention(out, att)
    return out[C.CF_ATT:]


def test_without_attention_metadata_it_is_the_mean():
    out = np.zeros(C.NCF)
    assert not C.set_attention(out, None)
    assert not C.set_attention(out, {"sms": 132})  # incomplete: an older profile's
    assert not attention_params(None).any()
    assert effective_kv(3000.0, 2000.0, 3.0, 12.0, False, out[C.CF_ATT:]) == 1000.0


def test_a_batch_in_one_wave_is_timed_by_its_longest_sequence():
    f = cf()
    # 56 draft rows: (56 // 4 + 56) * 8 = 560 programs > 528 -> the 2D kernel; 6 x 132 resident
    assert effective_kv(55 * 1000.0 + 7450.0, 7450.0, 56.0, 56.0, True, f) == 7450.0
    # 48 rows: 480 programs -> the split-KV kernel: 16 segments; the straggler's segments are
    # short next to the whole batch's work -> the mean
    kv = effective_kv(47 * 1600.0 + 7450.0, 7450.0, 48.0, 48.0, True, f)
    assert kv == pytest.approx((47 * 1600.0 + 7450.0) / 48)


def test_many_waves_bring_it_back_towards_the_mean():
    f = cf()
    # 256 x 8 rows: (512 + 256) * 8 = 6144 programs, about 5.8 waves of 1056
    mean = (255 * 1000.0 + 8000.0) / 256
    kv = effective_kv(255 * 1000.0 + 8000.0, 8000.0, 256.0, 2048.0, False, f)
    assert kv == pytest.approx(max(8000.0 * 1056 / 6144, mean))
    assert mean < kv < 8000.0


@settings(max_examples=300, deadline=None)
@given(kvs=st.lists(st.integers(1, 131072), min_size=1, max_size=300),
       width=st.integers(1, 21), graph_pad=st.integers(0, 8), draft=st.booleans())
def test_between_the_mean_and_the_longest_and_exact_for_uniform_batches(kvs, width, graph_pad,
                                                                       draft):
    f = cf()
    kv = np.asarray(kvs, dtype=np.float64)
    nseq = float(len(kv) + graph_pad)  # padded rows count as sequences with no KV
    rows = nseq * (1 if draft else width)
    got = effective_kv(kv.sum(), kv.max(), nseq, rows, draft, f)
    mean = kv.sum() / nseq
    assert mean * (1 - 1e-12) <= got <= kv.max() * (1 + 1e-12)
    if graph_pad == 0 and kv.min() == kv.max():
        assert got == pytest.approx(kv[0])


@pytest.fixture
def att_profile(tmp_path):
    """A profile carrying attention metadata, and the first 150 requests of the code sample."""
    import sys
    from pathlib import Path

    from backends.profile import profile_metadata, write_profile
    from specsched.setup import load_trace

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backends"))
    from backends_helpers import roofline_profile_rows

    sample = Path(__file__).resolve().parents[2] / "traces" / "samples" / "azure_code_sps_2k.parquet"
    m, rows = roofline_profile_rows()
    path = tmp_path / "p.parquet"
    meta = profile_metadata(m, {"name": "H200"}, command="pytest")
    meta["attention"] = ATT
    write_profile(rows, path, meta)
    return path, load_trace(sample, limit=150)


def test_engine_records_the_coordinate_it_looked_up(att_profile):
    """A run on a profile with attention metadata looks batches up (and records them) at the
    straggler-aware coordinate; ``backend.kv_lookup = mean`` turns it off."""
    from backends.profile import ProfileExecutor
    from simulator import SimConfig, run

    path, trace = att_profile
    runs = {}
    for rule in ("straggler", "mean"):
        cfg = SimConfig.load(None, {"backend.kv_lookup": rule})
        res = run(trace, cfg, ProfileExecutor(path), kv_capacity_tokens=400_000)
        runs[rule] = res
        assert res.summary["kv_lookup"] == rule
    s, m_ = runs["straggler"].steps, runs["mean"].steps
    kind = np.asarray(s.column("kind").to_pylist())
    look = s.column("lookup_kv").to_numpy()
    kv_mean = s.column("kv_mean").to_numpy()
    kv_max = s.column("kv_max").to_numpy().astype(float)
    bs = s.column("bs").to_numpy()
    bsp = s.column("bs_padded").to_numpy()
    dec = kind != "prefill"
    assert np.all(look[dec] >= kv_mean[dec] * bs[dec] / bsp[dec] - 1e-6)
    assert np.all(look[dec] <= kv_max[dec] + 1e-6)
    assert np.any(look[dec] > kv_mean[dec] * bs[dec] / bsp[dec] + 1.0)  # stragglers were seen
    look_m = m_.column("lookup_kv").to_numpy()
    km = np.asarray(m_.column("kind").to_pylist()) != "prefill"
    np.testing.assert_allclose(
        look_m[km], (m_.column("kv_mean").to_numpy() * m_.column("bs").to_numpy()
                     / m_.column("bs_padded").to_numpy())[km])


def test_the_table_executor_looks_batches_up_as_the_fast_path_does(att_profile):
    """Called per batch (the engine's live path), a profile executor with attention metadata
    gives every pass the latency the compiled fast path gives it."""
    from backends.profile import ProfileExecutor
    from simulator import SimConfig, run
    from tests.simulator.helpers import LiveLike

    path, trace = att_profile
    cfg = SimConfig.load(None, {})
    fast = run(trace, cfg, ProfileExecutor(path), kv_capacity_tokens=400_000)
    live = LiveLike(ProfileExecutor(path))
    slow = run(trace, cfg, live, kv_capacity_tokens=400_000)
    assert live.calls > 0
    assert fast.requests.equals(slow.requests)
    np.testing.assert_array_equal(fast.steps.column("latency_s").to_numpy(),
                                  slow.steps.column("latency_s").to_numpy())
