"""The straggler-aware KV coordinate of table lookups (backends.attention_kv.effective_kv), in
the engine's fast path, its per-batch path and the table executor."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends.attention_kv import (ATT_G2D, ATT_G2DD, ATT_G3D, TAIL_EXPONENT, attention_params,
                                   effective_kv)
from simulator import core as C

#: H200-like grid constants (Llama-3.1-8B heads: 32 query, 8 KV -> 4 query rows per program)
ATT = {"sms": 132, "kv_heads": 8, "block_q": 4, "target_programs": 528, "min_segments": 16,
       "max_segments": 128, "slots_per_sm": {"2d": 8, "2d_decode": 6, "3d": 8}}


#: the MLA decode kernel's grid on an H200 (2 programs an SM, as measured on 2026-12-03)
MLA = {"kernel": "mla_decode", "sms": 132, "head_groups": 1, "target_programs": 264,
       "min_splits": 2, "max_splits": 16, "slots_per_sm": {"mla_decode": 2}}


def cf(att=ATT):
    out = np.zeros(C.NCF)
    assert C.set_attention(out, att)
    return out[C.CF_ATT:]


def test_without_attention_metadata_it_is_the_mean():
    out = np.zeros(C.NCF)
    assert not C.set_attention(out, None)
    assert not C.set_attention(out, {"sms": 132})  # incomplete: an older profile's
    assert not attention_params(None).any()
    assert effective_kv(3000.0, 2000.0, 3.0, 3.0, 12.0, False, out[C.CF_ATT:]) == 1000.0


def test_the_tail_exponents_default_and_a_profile_may_carry_its_own():
    a = attention_params(ATT)
    assert (a[ATT_G2D], a[ATT_G2DD], a[ATT_G3D]) == (TAIL_EXPONENT["2d"], TAIL_EXPONENT["2d_decode"],
                                                    TAIL_EXPONENT["3d"])
    b = attention_params({**ATT, "tail_exponent": {"3d": 0.7}})
    assert (b[ATT_G2D], b[ATT_G3D]) == (TAIL_EXPONENT["2d"], 0.7)


def phi(n_tail, n_ref, kernel):
    return min((n_tail / n_ref) ** TAIL_EXPONENT[kernel], 1.0)


def test_in_one_wave_the_straggler_runs_on_faster_alone():
    f = cf()
    # 3 requests x width 6: (18 // 4 + 3) * 8 = 56 programs -> the split-KV kernel, 16 segments;
    # 2 query blocks x 8 heads x 16 = 256 programs per request, 768 <= 1,023 (31/32 of 1,056
    # slots, WAVE_FILL_3D): one wave, at 768 / 132 programs per SM; the straggler's 256 alone
    # are 256 / 132 per SM. By hand: phi = (1 / 3) ** 0.3 = 0.7192, K = 2333.3 + 0.7192 x
    # 2666.7 = 4251.3
    mean = (2 * 1000.0 + 5000.0) / 3
    kv = effective_kv(2 * 1000.0 + 5000.0, 5000.0, 3.0, 3.0, 18.0, False, f)
    assert kv == pytest.approx(mean + phi(256 / 132, 768 / 132, "3d") * (5000.0 - mean))
    assert kv == pytest.approx(4251.3, abs=0.1)
    # fewer programs per SM in the uniform batch: the straggler gains less by running alone
    mean2 = (1000.0 + 5000.0) / 2
    kv2 = effective_kv(1000.0 + 5000.0, 5000.0, 2.0, 2.0, 12.0, False, f)
    assert kv2 == pytest.approx(mean2 + phi(256 / 132, 512 / 132, "3d") * (5000.0 - mean2))
    assert (kv2 - mean2) / (5000.0 - mean2) > (kv - mean) / (5000.0 - mean)


def test_a_wave_holds_1023_programs_not_1056():
    """Four requests at width 8, three at 11,000 and one at 23,000 (benchmarks/results/
    h200-2026-12-04d/straggler8b_bs4.json: as long as the uniform batch at 15,950; the eager
    launch of the same batch, 15,767). 4 x 2 x 8 x 16 = 1,024 programs: one more than a wave
    holds, so the partial-wave form applies (f = 1 / 1023). By hand: f ** 0.3 = 0.12504, phi
    = (256 / 1023) ** 0.3 = 0.65995, K = (11000 x 1.12504 + 0.65995 x 12000) / 1.12504 =
    18039; under the one-wave rule of 1,056 slots and exponent 0.4 it was 19,169."""
    f = cf()
    kv = effective_kv(3 * 11000.0 + 23000.0, 23000.0, 4.0, 4.0, 32.0, False, f)
    assert kv == pytest.approx(18039.2, abs=0.5)
    assert abs(kv - 15950) < abs(19169 - 15950)


def test_a_partly_filled_last_wave_does_not_hide_the_straggler():
    """The first case of the 3D-kernel run of 2026-12-02 (benchmarks/results/h200-2026-12-02b/
    straggler3d.json): 10 requests at width 4, nine at 4,000 and one at 8,000, took as long as
    the uniform batch at 5,192. 10 x 1 x 8 x 16 = 1,280 programs fill a wave of 1,023 and 257
    more (f = 0.2512); the rule before the partial-wave form took the straggler to hide in that
    second wave and looked the batch up at its mean, 4,400 (15% of K short). Worked out by hand:
    f ** 0.3 = 0.66072, phi = (1 / 7.75) ** 0.3 = 0.54102, the mixed batch takes
    4000 x 1.66072 + 0.54102 x 4000 = 8806.9 against K x 1.66072 for a uniform one: K = 5303.1,
    2.1% over the measured K, nearer it than the mean."""
    f = cf()
    kv = effective_kv(9 * 4000.0 + 8000.0, 8000.0, 10.0, 10.0, 40.0, False, f)
    assert kv == pytest.approx(5303.1, abs=0.5)
    assert abs(kv - 5192.07) < abs(4400 - 5192.07)


def test_two_live_conversation_batches():
    """The two batches behind the worst verify steps of the live conversation run (H200,
    2026-11-29), width 6: 8 requests of mean KV 1821.5 with one at 4099 took as long as a
    uniform batch at about 2,800; 5 at mean 1546.2 with one at 4116, as long as one at about
    1,850. The steps record only the mean and the longest, so the rule takes the others at one
    length: (8 x 1821.5 - 4099) / 7 = 1496.1 and (5 x 1546.2 - 4116) / 4 = 903.8.

    8 x 256 = 2,048 programs: two full waves of 1,023 and one of 2 (f ** 0.3 = 0.15394); phi =
    (256 / 1023) ** 0.3 = 0.65995: K = (1496.1 x 2.15394 + 0.65995 x 2602.9) / 2.15394 = 2294,
    short of 2,800 (the rule of 1,056 slots and exponent 0.4: 2,243). 5 x 256 = 1,280
    programs: f ** 0.3 = 0.66072: K = (903.8 x 1.66072 + 0.65995 x 3212.3) / 1.66072 = 2180,
    above 1,850 (before: 2,088). Both within a quarter of the straggler's excess over the mean
    of the measured K."""
    f = cf()
    kv8 = effective_kv(8 * 1821.5, 4099.0, 8.0, 8.0, 48.0, False, f)
    assert kv8 == pytest.approx(2293.6, abs=1)
    assert abs(kv8 - 2800) < 0.25 * (4099 - 1821.5)
    kv5 = effective_kv(5 * 1546.2, 4116.0, 5.0, 5.0, 30.0, False, f)
    assert kv5 == pytest.approx(2180.3, abs=1)
    assert abs(kv5 - 1850) < 0.25 * (4116 - 1546.2)


def test_many_waves_bring_it_back_towards_the_mean():
    f = cf()
    # 256 x 8 rows: (512 + 256) * 8 = 6144 programs > 528 -> the 2D kernel, one program per query
    # block and head: 256 x 2 x 8 = 4096 programs on 8 x 132 slots, 3.9 waves -> 4
    mean = (255 * 1000.0 + 8000.0) / 256
    kv = effective_kv(255 * 1000.0 + 8000.0, 8000.0, 256.0, 256.0, 2048.0, False, f)
    assert kv == pytest.approx((4096 / 1056 * mean + phi(1.0, 8.0, "2d") * (8000.0 - mean)) / 4)
    assert mean < kv < mean + 0.25 * (8000.0 - mean)


def test_graph_padding_counts_in_the_waves_of_the_launch_not_in_the_work():
    f = cf()
    # 3 real requests at 2,000 padded to a graph of 8 (width 6): their 768 programs fill one
    # wave to 768 / 1023; the launch's uniform batch (2,048 programs) takes two full waves and
    # one of 2. K = 2000 (768 / 1023) ** 0.3 / (2 + (2 / 1023) ** 0.3) = 852.0, above the mean
    # over the launch (750) and below the 1,000 of the rule that counted whole waves
    kv = effective_kv(3 * 2000.0, 2000.0, 8.0, 3.0, 48.0, False, f)
    assert kv == pytest.approx(2000.0 * (768 / 1023) ** 0.3 / (2 + (2 / 1023) ** 0.3))
    assert kv == pytest.approx(852.0, abs=0.1)
    assert 750 < kv < 1000


@settings(max_examples=300, deadline=None)
@given(kvs=st.lists(st.integers(1, 131072), min_size=1, max_size=300),
       width=st.integers(1, 21), graph_pad=st.integers(0, 8), draft=st.booleans(),
       more=st.integers(0, 50_000), mla=st.booleans())
def test_between_the_mean_and_the_longest_exact_for_uniform_batches_and_monotone(
        kvs, width, graph_pad, draft, more, mla):
    """On unified_attention's grid and on the MLA decode kernel's (``mla``)."""
    f = cf(MLA if mla else ATT)
    kv = np.asarray(kvs, dtype=np.float64)
    nreal = float(len(kv))
    nseq = nreal + graph_pad  # padded rows count as sequences with no KV
    rows = nseq * (1 if draft else width)
    got = effective_kv(kv.sum(), kv.max(), nseq, nreal, rows, draft, f)
    mean = kv.sum() / nseq
    assert mean * (1 - 1e-12) <= got <= kv.max() * (1 + 1e-12)
    if graph_pad == 0 and kv.min() == kv.max():
        assert got == pytest.approx(kv[0])
    # a longer straggler (the rest unchanged) never makes the batch faster
    longer = kv.copy()
    longer[int(np.argmax(kv))] += more
    got2 = effective_kv(longer.sum(), longer.max(), nseq, nreal, rows, draft, f)
    assert got2 >= got * (1 - 1e-12)


@pytest.fixture(params=["unified_attention", "mla_decode"])
def att_profile(tmp_path, request):
    """A profile carrying attention metadata (unified_attention's grid, or the MLA decode
    kernel's), and the first 150 requests of the code sample."""
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
    meta["attention"] = MLA if request.param == "mla_decode" else ATT
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
    """Called per batch (the engine's live path, and fidelity's offset and jitter runs), a
    profile executor with attention metadata gives every pass the latency the compiled fast path
    gives it under the straggler rule and under auto (the fluid lookup on the MLA profile), the
    engine telling it which (``set_kv_lookup``; ``mean`` switches off the compiled lookups only),
    with batch sizes between grid points on the line or by waves (``backend.bs_interp``, which
    the engine tells it too: ``set_bs_interp``)."""
    from backends.profile import ProfileExecutor
    from simulator import SimConfig, run
    from tests.simulator.helpers import LiveLike

    path, trace = att_profile
    for lookup, bsi in (("auto", "auto"), ("straggler", "auto"), ("auto", "waves"),
                        ("straggler", "line")):
        cfg = SimConfig.load(None, {"backend.kv_lookup": lookup, "backend.bs_interp": bsi})
        fast = run(trace, cfg, ProfileExecutor(path), kv_capacity_tokens=400_000)
        live = LiveLike(ProfileExecutor(path))
        slow = run(trace, cfg, live, kv_capacity_tokens=400_000)
        assert live.calls > 0
        assert fast.requests.equals(slow.requests), (lookup, bsi)
        np.testing.assert_array_equal(fast.steps.column("latency_s").to_numpy(),
                                      slow.steps.column("latency_s").to_numpy())


def test_bs_interp_waves_moves_launches_between_grid_batch_sizes(att_profile):
    """``backend.bs_interp``: ``auto`` is the line on unified attention and waves on the MLA
    decode (the summary says which); ``waves`` changes some passes of the unified-attention run
    (batch sizes between the roofline grid's 1, 2, 4, 8, ... at several KV) and none of the MLA
    run, where it already was; ``line`` changes some of the MLA run's."""
    from backends.profile import ProfileExecutor
    from simulator import SimConfig, run

    path, trace = att_profile
    mla = "mla" in str(ProfileExecutor(path).latency_table().attention.get("kernel", ""))
    lat, said = {}, {}
    for bsi in ("auto", "waves", "line"):
        res = run(trace, SimConfig.load(None, {"backend.bs_interp": bsi}), ProfileExecutor(path),
                  kv_capacity_tokens=400_000)
        lat[bsi] = res.steps.column("latency_s").to_numpy()
        said[bsi] = res.summary["bs_interp"]
    assert said == {"auto": "waves" if mla else "line", "waves": "waves", "line": "line"}
    same = "waves" if mla else "line"
    other = "line" if mla else "waves"
    np.testing.assert_array_equal(lat["auto"], lat[same])
    assert len(lat["auto"]) != len(lat[other]) or np.any(lat["auto"] != lat[other])
