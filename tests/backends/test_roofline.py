"""Roofline: the table reproduces the formula, latency is monotone, closed forms hold."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from backends import roofline as R
from backends.models import load_model
from backends.protocol import DraftBatch, PrefillBatch, VerifyBatch
from traces.errors import SpecschedError

from backends_helpers import round_gpu, tiny_model

TABLES = {}


def table(model, gpu="H200"):
    key = (model, gpu)
    if key not in TABLES:
        TABLES[key] = R.build_table(model, gpu)
    return TABLES[key]


# batch sizes as the engine sends them: integers (every integer up to 256 is a grid point, so
# draw above it too, where eager launches are off-grid), KV lengths anywhere
bs_st = st.one_of(st.integers(1, 256), st.floats(256.5, 2048.0))
kv_st = st.floats(0.0, 2.0 ** 21)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "llama-3.1-70b", "deepseek-v3"])
@settings(max_examples=150, deadline=None)
@given(bs=bs_st, w=st.integers(1, 16), kv=kv_st, graph=st.booleans())
def test_verify_table_matches_formula_off_grid(model, bs, w, kv, graph):
    want = float(R.verify_time(model, "H200", bs, w, kv, graph=graph))
    got, outside = table(model).verify_s(float(bs), float(w), kv, graph)
    assert not outside
    assert got == pytest.approx(want, rel=0.01)
    if not load_model(model).is_moe:
        assert got == pytest.approx(want, rel=1e-9)  # ridge points are grid points: exact


@pytest.mark.parametrize("model", ["llama-3.1-8b", "deepseek-v3"])
@settings(max_examples=150, deadline=None)
@given(bs=bs_st, kv=kv_st, graph=st.booleans())
def test_draft_table_matches_formula_off_grid(model, bs, kv, graph):
    want = float(R.draft_pass_time(model, "H200", bs, kv, graph=graph))
    got, outside = table(model).draft_pass_s(float(bs), kv, graph)
    assert not outside and got == pytest.approx(want, rel=0.01)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "qwen2.5-32b", "deepseek-v3"])
@settings(max_examples=150, deadline=None)
@given(tokens=st.floats(1.0, 65536.0), prefix=st.one_of(st.just(0.0), st.floats(0.0, 2.0 ** 20)))
def test_prefill_table_matches_formula_off_grid(model, tokens, prefix):
    want = float(R.prefill_time(model, "H200", tokens, prefix))
    got, outside = table(model).prefill_s(tokens, prefix)
    assert not outside and got == pytest.approx(want, rel=0.01)


@pytest.mark.parametrize("model", ["llama-3.1-8b", "llama-3.1-70b", "deepseek-v3"])
def test_formula_is_monotone_in_every_axis(model):
    bs = np.arange(1, 600, dtype=float)[:, None, None]
    w = np.arange(1, 17, dtype=float)[None, :, None]
    kv = np.concatenate([[0.0], 2.0 ** np.arange(0, 21, 0.5)])[None, None, :]
    for graph in (True, False):
        t = R.verify_time(model, "H200", bs, w, kv, graph=graph)
        for ax in range(3):
            assert np.all(np.diff(t, axis=ax) >= -1e-15)
    d = R.draft_pass_time(model, "H200", bs[:, :, 0], kv[:, 0, :])
    assert np.all(np.diff(d, axis=0) >= 0) and np.all(np.diff(d, axis=1) >= 0)
    tok = np.concatenate([np.arange(1, 300), 2.0 ** np.arange(9, 16.5, 0.25)])[:, None]
    p = R.prefill_time(model, "H200", tok, kv[0])
    assert np.all(np.diff(p, axis=0) >= 0) and np.all(np.diff(p, axis=1) >= 0)
    assert np.all(R.verify_time(model, "H200", bs, w, kv, graph=False)
                  > R.verify_time(model, "H200", bs, w, kv, graph=True))


def test_bigger_gpu_is_faster():
    bs = np.array([1, 8, 64, 256, 1024], dtype=float)[:, None, None]
    w = np.array([1, 4, 8, 16], dtype=float)[None, :, None]
    kv = np.array([0, 1024, 32768, 1 << 20], dtype=float)[None, None, :]
    for model in ("llama-3.1-8b", "deepseek-v3"):
        for small, big in (("H100", "H200"), ("MI300X", "MI355X")):
            a = R.verify_time(model, small, bs, w, kv)
            b = R.verify_time(model, big, bs, w, kv)
            assert np.all(b <= a) and np.all(b[:, :, -1] < a[:, :, -1])
    # memory-bound decode scales with bandwidth: H200 / H100 = 3.35 / 4.8
    m = load_model("llama-3.1-8b")
    ratio = (R.breakdown(m, "H200")["gemm"] / R.breakdown(m, "H100")["gemm"])
    assert ratio == pytest.approx(3.35 / 4.8, rel=1e-9)



def test_closed_form_small_decode_is_bytes_over_bandwidth():
    """bs 1, width 1, no KV: everything is bandwidth-bound, so the pass reads its bytes."""
    m, g = tiny_model(), round_gpu()
    B = 1e12
    h, hd, I, V, L = 64, 32, 128, 256, 2
    qkv = (h * (2 + 2) * hd * 2 + 1 * (h + 4 * hd) * 2) / B
    o = (2 * hd * h * 2 + (2 * hd + h) * 2) / B
    gate_up = (h * 2 * I * 2 + (h + 2 * I) * 2) / B
    down = (I * h * 2 + (I + h) * 2) / B
    # attention, kv = 0, w = 1: reads K,V of 1 token, writes them, reads q, writes o
    kvb = 1 * 2 * hd * 2
    attn = max(4 * 2 * hd * 1 / 1e14, (kvb * 1 + kvb + 2 * 2 * hd * 2) / B)
    ew = 1 * 2 * (6 * h + 3 * I) / B
    lm = (h * V * 2 + (h + V) * 2) / B
    final = (h * 2 + V * 4) / B
    want = L * (qkv + o + gate_up + down + attn + ew) + lm + final + 5e-6
    assert float(R.verify_time(m, g, 1, 1, 0)) == pytest.approx(want, rel=1e-12)
    eager = float(R.verify_time(m, g, 1, 1, 0, graph=False))
    assert eager - (want - 5e-6) == pytest.approx(R.kernel_count(m) * 1e-6, rel=1e-9)
    assert R.kernel_count(m) == 2 * (6 + 4) + 6


def test_closed_form_large_gemm_is_flops_over_rate():
    """A huge batch of a wide model makes every GEMM compute-bound: 2*T*K*N / FLOP/s."""
    m = tiny_model(hidden=4096, heads=32, kv_heads=8, head_dim=128, intermediate=8192, vocab=32000)
    g = round_gpu(hbm_bw=1e13)
    T = 1e6
    parts = R.breakdown(m, g, bs=T, width=1, kv=0)
    gemms = [(4096, (32 + 16) * 128), (32 * 128, 4096), (4096, 2 * 8192), (8192, 4096)]
    flops = 2 * T * sum(k * n for k, n in gemms) * 2  # 2 layers
    assert parts["gemm"] == pytest.approx(flops / 1e14, rel=1e-12)
    assert parts["lm_head"] == pytest.approx(2 * T * 4096 * 32000 / 1e14, rel=1e-12)


def test_closed_form_tensor_parallel_allreduce():
    m, g = tiny_model(tp=2, heads=2, kv_heads=2), round_gpu()
    parts = R.breakdown(m, g, bs=4, width=2, kv=10)
    T = 8
    ring = lambda nbytes: 1e-5 + 2 * (2 - 1) / 2 * nbytes / 1e11
    want = 2 * 2 * ring(T * 64 * 2) + ring(T * 128 * 2)
    assert parts["allreduce"] == pytest.approx(want, rel=1e-12)
    assert R.breakdown(tiny_model(), g, bs=4, width=2, kv=10)["allreduce"] == 0


def test_attention_positions_closed_form():
    """Verify attention of width w after L tokens sees w*L + w(w+1)/2 keys per request."""
    m = tiny_model(layers=1)
    g = round_gpu(hbm_bw=1e20, achievable_bw_frac=1.0)  # make attention compute-bound
    bs, w, L = 3, 5, 1000
    attn = R.breakdown(m, g, bs=bs, width=w, kv=L)["attention"]
    assert attn == pytest.approx(bs * 4 * 2 * 32 * (w * L + w * (w + 1) / 2) / 1e14, rel=1e-12)


def test_executor_and_batches():
    ex = R.make_roofline_executor("llama-3.1-8b", "H200")
    assert ex.name == "roofline" and ex.latency_table() is not None
    d = ex.describe()
    assert "least accurate" in d["accuracy"] and d["backend"] == "roofline"
    vb = VerifyBatch(bs_real=5, bs_padded=6, widths=np.full(5, 4), kv_lens=np.array([100, 200, 300, 400, 500]),
                     launch_width=4, mode="uniform", graph=True)
    t = ex.verify(vb)
    assert t.latency_s == pytest.approx(float(R.verify_time("llama-3.1-8b", "H200", 6, 4, 1500 / 6)))
    db = DraftBatch(bs_real=3, bs_padded=4, kv_lens=np.array([10, 20, 30]), passes=3, graph=True)
    assert ex.draft(db) == pytest.approx(3 * float(R.draft_pass_time("llama-3.1-8b", "H200", 4, 15.0)))
    pb = PrefillBatch(tokens=np.array([1000]), prefix=np.array([0]))
    assert ex.prefill(pb) == pytest.approx(float(R.prefill_time("llama-3.1-8b", "H200", 1000, 0)), rel=1e-3)
    assert ex.verify(replace(vb, widths=np.full(5, 20), launch_width=20)).out_of_grid


def test_options_override_the_sheet():
    slow = R.make_roofline_executor("llama-3.1-8b", "H200", achievable_bw_frac=0.45)
    fast = R.make_roofline_executor("llama-3.1-8b", "H200")
    a = slow.latency_table().verify_s(1, 1, 100, True)[0]
    b = fast.latency_table().verify_s(1, 1, 100, True)[0]
    assert a > 1.9 * b
    with pytest.raises(SpecschedError, match="unknown roofline option"):
        R.make_roofline_executor("llama-3.1-8b", "H200", bogus=1)
    with pytest.raises(SpecschedError, match=r"in \(0, 1\]"):
        R.make_roofline_executor("llama-3.1-8b", "H200", achievable_bw_frac=2)
