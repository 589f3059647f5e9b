"""The shipped samples: valid, small, attributed, and rebuilt byte for byte by their commands."""

from __future__ import annotations

import numpy as np
import pytest

from traces import read_trace_arrays, validate_trace
from traces.convert import convert

from tracekit import SAMPLES

BUILDS = {
    "azure_conv_eagle_2k.parquet": ("azure", "azure2023_conv_head2000.csv",
                                    "specbench_vicuna7b_eagle_lengths.jsonl"),
    "azure_code_sps_2k.parquet": ("azure", "azure2023_code_head2000.csv",
                                  "specbench_vicuna7b_sps68m_lengths.jsonl"),
    "mooncake_conv_1k.parquet": ("mooncake", "mooncake_conv_head1000.jsonl",
                                 "specbench_vicuna7b_eagle_lengths.jsonl"),
}


def test_samples_are_small_and_attributed():
    readme = (SAMPLES / "README.md").read_text()
    for f in SAMPLES.iterdir():
        assert f.stat().st_size < 300_000, f
        if f.name != "README.md":
            assert f.name in readme, f"{f.name} is not in traces/samples/README.md"
    for text in ("CC-BY-4.0", "Apache-2.0", "Azure/AzurePublicDataset", "Spec-Bench", "3b73a28c",
                 "kvcache-ai/Mooncake", "3cca71da"):
        assert text in readme


@pytest.mark.parametrize("name", sorted(BUILDS))
def test_sample_rebuilds_byte_for_byte(tmp_path, name):
    fmt, raw, answers = BUILDS[name]
    out = tmp_path / name
    convert(fmt, SAMPLES / raw, out, acceptance=f"specbench:{SAMPLES / answers}", seed=0)
    assert out.read_bytes() == (SAMPLES / name).read_bytes()


def test_long_context_sample_rebuilds_byte_for_byte(tmp_path):
    from traces.synth import synth

    out = tmp_path / "synth_longctx_200.parquet"
    synth(out, n=200, rate=1.0, arrival="gamma", cv=3.0,
          prompt="lognormal:median=8000,sigma=0.6,min=1024,max=30000",
          output="lognormal:median=250,sigma=0.7,max=2048",
          acceptance=f"specbench:{SAMPLES / 'specbench_vicuna7b_eagle_lengths.jsonl'}", seed=7)
    assert out.read_bytes() == (SAMPLES / "synth_longctx_200.parquet").read_bytes()
    ta = read_trace_arrays(out)
    assert len(ta.prompt_tokens) == 200 and ta.prompt_tokens.min() >= 1024


def test_conversation_sample_is_what_the_quick_start_needs():
    rep = validate_trace(SAMPLES / "azure_conv_eagle_2k.parquet")
    assert rep.rows == 2000 and rep.has_lists and rep.sorted
    ta = read_trace_arrays(SAMPLES / "azure_conv_eagle_2k.parquet")
    a = ta.accepted_tokens.astype(float)
    assert abs(np.mean(a + 1) - 3.58) < 0.1                 # the source's 3.58 per step
    assert len(np.unique(ta.draft_tokens)) == 5             # mixed widths 2..6
    assert ta.acceptance["params"]["method"] == "eagle"
    assert len(ta.acceptance["position_accept_prob"]) >= 8


def test_mooncake_sample_keeps_the_prefix_blocks():
    rep = validate_trace(SAMPLES / "mooncake_conv_1k.parquet")
    assert rep.rows == 1000 and rep.has_lists and rep.sorted
    ta = read_trace_arrays(SAMPLES / "mooncake_conv_1k.parquet")
    assert ta.prefix_block_tokens == 512
    # every line of the source has ceil(input_length / 512) ids
    assert np.array_equal(np.diff(ta.prefix_offsets), (ta.prompt_tokens.astype(np.int64) + 511) // 512)
    assert ta.acceptance["params"]["method"] == "eagle"


def test_code_sample_uses_sps_acceptance():
    ta = read_trace_arrays(SAMPLES / "azure_code_sps_2k.parquet")
    assert ta.acceptance["params"]["method"] == "sps" and ta.acceptance["params"]["k"] == 20
    assert int(ta.draft_tokens.max()) <= 20
    assert len(np.unique(ta.draft_tokens)) > 10


def test_conversation_sample_keeps_within_request_correlation():
    """Lag-1 autocorrelation of accepted counts within requests (each request's mean removed):
    the sample keeps a positive one (the Spec-Bench data: 0.083), which shuffling the steps
    across requests destroys."""
    ta = read_trace_arrays(SAMPLES / "azure_conv_eagle_2k.parquet")
    a = ta.accepted_tokens.astype(float)

    def lag1(x):
        n = np.diff(ta.step_offsets)
        rid = np.repeat(np.arange(n.size), n)
        mean = np.bincount(rid, x, minlength=n.size) / np.maximum(n, 1)
        y = x - mean[rid]
        same = rid[1:] == rid[:-1]
        return np.corrcoef(y[:-1][same], y[1:][same])[0, 1]

    r = lag1(a)
    r_shuffled = lag1(np.random.default_rng(0).permutation(a))
    assert 0.05 < r < 0.2, r
    assert r - r_shuffled > 0.04
