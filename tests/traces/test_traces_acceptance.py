"""Acceptance models: invariants (hypothesis), determinism, and faithfulness to Spec-Bench data."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traces.acceptance import (
    DynamicModel,
    GeometricModel,
    estimate_position_accept_prob,
    multi_range,
    parse_acceptance,
)
from traces.specbench import SpecBenchModel, load_specbench
from traces.errors import SpecschedError

from tracekit import SAMPLES

EAGLE = SAMPLES / "specbench_vicuna7b_eagle_lengths.jsonl"
SPS = SAMPLES / "specbench_vicuna7b_sps68m_lengths.jsonl"


def check_lists(lists, outputs, kmax):
    """The trace rules: 0 <= a <= d <= kmax; committed reaches output; the last step was needed."""
    off = lists.offsets
    d = lists.draft_tokens.astype(np.int64)
    a = lists.accepted_tokens.astype(np.int64)
    assert off[0] == 0 and off[-1] == d.size == a.size and np.all(np.diff(off) >= 0)
    assert np.all(a >= 0) and np.all(a <= d) and np.all(d <= kmax)
    cs = np.concatenate([[0], np.cumsum(a + 1)])
    committed = 1 + cs[off[1:]] - cs[off[:-1]]
    n = np.diff(off)
    assert np.all(committed >= outputs)
    last = np.zeros(n.size, np.int64)
    last[n > 0] = a[off[1:][n > 0] - 1] + 1
    assert np.all((n == 0) | (committed - last < outputs))
    assert np.all((n == 0) == (np.asarray(outputs) == 1))


outputs_st = st.lists(st.integers(1, 600), min_size=1, max_size=40).map(np.array)


@settings(max_examples=40, deadline=None)
@given(outputs=outputs_st, k=st.integers(0, 8), alpha=st.floats(0, 1), seed=st.integers(0, 2**32))
def test_geometric_invariants(outputs, k, alpha, seed):
    m = GeometricModel(k, alpha)
    lists = m.fill(outputs, np.random.default_rng(seed))
    check_lists(lists, outputs, k)
    assert np.all(lists.draft_tokens == k)
    probs = m.position_accept_prob()
    assert len(probs) >= 8 and all(0 <= p <= 1 for p in probs)


@settings(max_examples=40, deadline=None)
@given(outputs=outputs_st, lo=st.integers(1, 6), extra=st.integers(0, 4), alpha=st.floats(0, 1),
       conc=st.sampled_from([1.0, 20.0, float("inf")]), sr=st.floats(0, 1), sw=st.floats(0, 1),
       seed=st.integers(0, 2**32))
def test_dynamic_invariants(outputs, lo, extra, alpha, conc, sr, sw, seed):
    m = DynamicModel(lo, lo + extra, alpha, conc, sr, sw)
    lists = m.fill(outputs, np.random.default_rng(seed))
    check_lists(lists, outputs, lo + extra)
    assert np.all(lists.draft_tokens >= 1)
    probs = m.position_accept_prob()
    assert len(probs) >= 8 and all(0 <= p <= 1 for p in probs)


@settings(max_examples=25, deadline=None)
@given(outputs=outputs_st, seed=st.integers(0, 2**32), q=st.floats(0.05, 1.0),
       drafts=st.sampled_from(["stop", "fixed"]), start=st.sampled_from(["any", "question"]))
def test_specbench_invariants(outputs, seed, q, drafts, start):
    m = SpecBenchModel(_eagle(), drafts=drafts, start=start, q=q)
    lists = m.fill(outputs, np.random.default_rng(seed))
    check_lists(lists, outputs, 5)
    if drafts == "fixed":
        assert np.all(lists.draft_tokens == 5)
    else:   # a chain drafter proposes at least the rejected position
        a = lists.accepted_tokens
        assert np.all((a == 5) | (lists.draft_tokens >= a + 1))


_EAGLE_CACHE = {}


def _eagle():
    if "d" not in _EAGLE_CACHE:
        _EAGLE_CACHE["d"] = load_specbench(EAGLE)
    return _EAGLE_CACHE["d"]


def test_same_seed_same_draws_for_every_model():
    outputs = np.arange(1, 400)
    for spec in ("geometric:k=4,alpha=0.7", "dynamic:k=2-8,alpha=0.7",
                 f"specbench:{EAGLE}", f"specbench:{SPS},drafts=fixed"):
        a = parse_acceptance(spec).fill(outputs, np.random.default_rng(11))
        b = parse_acceptance(spec).fill(outputs, np.random.default_rng(11))
        c = parse_acceptance(spec).fill(outputs, np.random.default_rng(12))
        assert np.array_equal(a.accepted_tokens, b.accepted_tokens)
        assert np.array_equal(a.draft_tokens, b.draft_tokens)
        assert not (np.array_equal(a.accepted_tokens, c.accepted_tokens)
                    and np.array_equal(a.draft_tokens, c.draft_tokens))


def test_geometric_acceptance_matches_alpha():
    m = GeometricModel(4, 0.7)
    lists = m.fill(np.full(3000, 300), np.random.default_rng(0))
    a = lists.accepted_tokens.astype(int)
    est = estimate_position_accept_prob(lists.draft_tokens, lists.accepted_tokens)
    assert est[:4] == pytest.approx([0.7] * 4, abs=0.01)
    assert np.mean(a + 1) == pytest.approx(m.mean_committed(), rel=0.01)


def test_dynamic_model_mixes_widths_per_request_and_step():
    m = parse_acceptance("dynamic:k=2-8,alpha=0.7")
    lists = m.fill(np.full(500, 200), np.random.default_rng(0))
    d = lists.draft_tokens.astype(int)
    assert len(np.unique(d)) >= 6
    # per-request maxima differ (per-request k) and widths vary within a request (confidence stop)
    per_req_max = np.maximum.reduceat(d, lists.offsets[:-1])
    assert len(np.unique(per_req_max)) >= 5
    first = d[lists.offsets[0]:lists.offsets[1]]
    assert len(np.unique(first)) > 1
    # wrong tokens stop the drafter more often than right ones: fewer wasted drafts than fixed k
    a = lists.accepted_tokens.astype(int)
    assert a.sum() / d.sum() > 0.55


def test_dynamic_position_probs_rise_with_request_heterogeneity():
    probs = DynamicModel(8, 8, 0.7, conc=5.0).position_accept_prob()
    assert probs[0] == pytest.approx(0.7)
    assert all(b > a for a, b in zip(probs, probs[1:]))
    assert DynamicModel(8, 8, 0.7, conc=float("inf")).position_accept_prob() == [0.7] * 8


def test_position_prob_estimator_on_known_lists():
    d = np.array([3, 3, 3, 3])
    a = np.array([0, 1, 3, 3])
    # j=1: 4 steps drafted >=1, 3 accepted it; j=2: 3 steps reached it, 2 accepted; j=3: 2 of 2
    assert estimate_position_accept_prob(d, a) == [0.75, round(2 / 3, 6), 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert estimate_position_accept_prob(np.zeros(3, int), np.zeros(3, int)) == [0.0] * 8
    assert len(estimate_position_accept_prob(np.full(2, 12), np.full(2, 12))) == 12


def test_multi_range():
    assert multi_range(np.array([5, 0, 9]), np.array([2, 0, 3])).tolist() == [5, 6, 9, 10, 11]
    assert multi_range(np.array([], int), np.array([], int)).tolist() == []


# ---- Spec-Bench ------------------------------------------------------------------------------


def test_specbench_methods_are_detected_from_the_model_id():
    eagle = parse_acceptance(f"specbench:{EAGLE}")
    sps = parse_acceptance(f"specbench:{SPS}")
    assert eagle.method == "eagle" and eagle.k == 5
    assert sps.method == "sps" and sps.k == 20
    # the data respect those maxima: EAGLE's depth-5 tree accepts at most 5 drafts, HF
    # assisted generation (>= 4.45) drafts at most num_assistant_tokens = 20
    assert int(_eagle().all_lengths.max()) == 6
    assert int(load_specbench(SPS).all_lengths.max()) == 21


def test_sps_data_refutes_the_heuristic_schedule():
    """HF's old 'heuristic' schedule (start 5, +2 after a fully accepted step, else -1) cannot
    have produced the SPS data: too many steps accept more drafts than it would have proposed.
    The data fit the >= 4.45 default instead (constant 20 with a confidence stop)."""
    violations = steps = 0
    for line in SPS.read_text().splitlines():
        c = json.loads(line)["choices"][0]
        al, pos = c["accept_lengths"], 0
        for n in c["decoding_steps"]:
            k = 5
            for length in al[pos:pos + n]:
                a = length - 1
                violations += a > k
                k = k + 2 if a == k else max(1, k - 1)
                steps += 1
            pos += n
    assert steps == 36581
    assert violations / steps > 0.2


def test_specbench_keeps_the_mean_and_the_within_request_correlation():
    """Over the 2k-request Azure conversation lengths the EAGLE draws keep the data's mean
    committed tokens per step (3.58) within 0.1 and a lag-1 autocorrelation within requests
    (the data: about 0.08 after removing each answer's mean) that shuffling destroys."""
    import pyarrow.csv as pacsv
    outputs = pacsv.read_csv(SAMPLES / "azure2023_conv_head2000.csv")["GeneratedTokens"].to_numpy()
    m = parse_acceptance(f"specbench:{EAGLE}")
    lists = m.fill(outputs, np.random.default_rng(0))
    a = lists.accepted_tokens.astype(float)
    assert np.mean(a + 1) == pytest.approx(_eagle().all_lengths.mean(), abs=0.1)
    r = _lag1(a, lists.offsets)
    shuffled = np.random.default_rng(1).permutation(a)
    r0 = _lag1(shuffled, lists.offsets)
    assert 0.05 < r < 0.2
    assert r - r0 > 0.04


def _lag1(a, off):
    n = np.diff(off)
    rid = np.repeat(np.arange(n.size), n)
    mean = np.bincount(rid, a, minlength=n.size) / np.maximum(n, 1)
    x = a - mean[rid]
    same = rid[1:] == rid[:-1]
    return np.corrcoef(x[:-1][same], x[1:][same])[0, 1]


def test_specbench_source_autocorrelation_is_what_the_docs_say():
    rs = []
    for line in EAGLE.read_text().splitlines():
        c = json.loads(line)["choices"][0]
        al, pos = np.array(c["accept_lengths"], float), 0
        for n in c["decoding_steps"]:
            rs.append(al[pos:pos + n])
            pos += n
    off = np.concatenate([[0], np.cumsum([len(s) for s in rs])])
    assert _lag1(np.concatenate(rs), off) == pytest.approx(0.083, abs=0.01)


def test_specbench_stop_rule_gives_mixed_widths_and_fixed_gives_one():
    outputs = np.full(300, 150)
    stop = parse_acceptance(f"specbench:{EAGLE}").fill(outputs, np.random.default_rng(0))
    fixed = parse_acceptance(f"specbench:{EAGLE},drafts=fixed").fill(outputs, np.random.default_rng(0))
    assert set(np.unique(stop.draft_tokens).tolist()) == {1, 2, 3, 4, 5}
    assert set(np.unique(fixed.draft_tokens).tolist()) == {5}
    tight = parse_acceptance(f"specbench:{EAGLE},q=1").fill(outputs, np.random.default_rng(0))
    a, d = tight.accepted_tokens, tight.draft_tokens
    assert np.all(d == np.minimum(5, a + 1))


def test_specbench_categories():
    m = parse_acceptance(f"specbench:{EAGLE},category=coding")
    lists = m.fill(np.full(50, 100), np.random.default_rng(0))
    assert set(lists.category.tolist()) == {"coding"}
    coding_mean = np.concatenate([s for c, s in zip(_eagle().categories, _eagle().sequences)
                                  if c == "coding"]).mean()
    assert np.mean(lists.accepted_tokens.astype(float) + 1) == pytest.approx(coding_mean, abs=0.3)
    # a trace's own categories are used when they are Spec-Bench categories
    cats = np.array(["qa", "rag"] * 10, dtype=object)
    auto = parse_acceptance(f"specbench:{EAGLE}").fill(np.full(20, 50), np.random.default_rng(0), cats)
    assert auto.category is None
    with pytest.raises(SpecschedError, match="not in the Spec-Bench data"):
        parse_acceptance(f"specbench:{EAGLE},category=trace").fill(
            np.full(2, 5), np.random.default_rng(0), np.array(["x", "y"], dtype=object))
    with pytest.raises(SpecschedError, match="not in the data"):
        parse_acceptance(f"specbench:{EAGLE},category=poetry")


def test_specbench_metadata_records_the_rule():
    meta = parse_acceptance(f"specbench:{EAGLE}").metadata(0)
    p = meta["params"]
    assert meta["kind"] == "specbench" and meta["seed"] == 0
    assert p["method"] == "eagle" and p["k"] == 5 and p["drafts"] == "stop" and p["q"] == 0.5
    assert p["source_mean_committed"] == pytest.approx(3.578531)
    assert len(p["sha256"]) == 64 and p["file"] == EAGLE.name
    assert len(meta["position_accept_prob"]) >= 8


@pytest.mark.parametrize("spec,match", [
    ("geometric", "KIND:PARAMS"),
    ("geometric:k=4", "needs k= and alpha="),
    ("geometric:k=4,alpha=1.5", r"alpha=1.5 must be in"),
    ("geometric:k=x,alpha=0.5", "not a whole number"),
    ("geometric:k=4,alpha=0.5,beta=2", "unknown key 'beta'"),
    ("dynamic:k=8-2,alpha=0.5", "LO > HI"),
    ("magic:x=1", "unknown model 'magic'"),
    ("specbench:/no/such/file.jsonl", "no such file"),
    ("specbench:", "needs a path"),
])
def test_bad_specs(spec, match):
    with pytest.raises(SpecschedError, match=match):
        parse_acceptance(spec)


def test_bad_specbench_files(tmp_path):
    p = tmp_path / "a.jsonl"
    p.write_text('{"category": "qa", "model_id": "x-eagle", "choices": [{"accept_lengths": [1, 0]}]}\n')
    with pytest.raises(SpecschedError, match="row 0.*accept_lengths"):
        load_specbench(p)
    p.write_text('{"category": "qa", "model_id": "x-eagle", "choices": [{"accept_lengths": [1, 2]}]}\nnot json\n')
    with pytest.raises(SpecschedError, match="row 1"):
        load_specbench(p)
    p.write_text('{"category": "qa", "model_id": "medusa", "choices": [{"accept_lengths": [1, 9]}]}\n')
    with pytest.raises(SpecschedError, match="add k=N to the spec"):
        parse_acceptance(f"specbench:{p}")
    with pytest.raises(SpecschedError, match="more than k=4"):
        parse_acceptance(f"specbench:{p},k=4")
    assert parse_acceptance(f"specbench:{p},k=8").k == 8


def test_stop_rule_overshoot_is_geometric():
    """P(d = a + 1 | a < k - 1) = q, P(d = a + 2 | d > a + 1, a < k - 2) = q, ..."""
    a = np.zeros(200000, np.int64)
    m = SpecBenchModel(_eagle(), q=0.3)
    d = m._drafts(a, np.random.default_rng(0))
    share = np.bincount(d, minlength=6) / d.size
    assert share[1] == pytest.approx(0.3, abs=0.01)
    assert share[2] == pytest.approx(0.7 * 0.3, abs=0.01)
    assert share[5] == pytest.approx(0.7 ** 4, abs=0.01)      # capped at k = 5
