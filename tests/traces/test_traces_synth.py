"""Synthetic traces: arrival processes, lengths, streaming writes, determinism."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from traces import read_trace_arrays, validate_trace
from traces.errors import SpecschedError
from traces.synth import parse_lengths, synth

from tracekit import SAMPLES


def arrivals(path):
    return pq.read_table(path, columns=["arrival_s"])["arrival_s"].to_numpy()


def test_poisson_rate_and_cv(tmp_path):
    p = tmp_path / "p.parquet"
    synth(p, n=20000, rate=8.0, seed=1)
    gaps = np.diff(arrivals(p))
    assert arrivals(p)[0] == 0.0
    assert 1 / gaps.mean() == pytest.approx(8.0, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.03)


@pytest.mark.parametrize("cv", [0.5, 3.0])
def test_gamma_cv(tmp_path, cv):
    p = tmp_path / "g.parquet"
    synth(p, n=40000, rate=5.0, arrival="gamma", cv=cv, seed=2)
    gaps = np.diff(arrivals(p))
    assert 1 / gaps.mean() == pytest.approx(5.0, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.08)


def test_lognormal_lengths(tmp_path):
    p = tmp_path / "l.parquet"
    synth(p, n=20000, rate=1.0, prompt="lognormal:median=500,sigma=0.5,max=2000",
          output="fixed:7", seed=3)
    t = pq.read_table(p)
    prompt = t["prompt_tokens"].to_numpy()
    assert np.median(prompt) == pytest.approx(500, rel=0.03)
    assert prompt.max() <= 2000 and prompt.min() >= 1
    assert set(t["output_tokens"].to_numpy().tolist()) == {7}
    assert "draft_tokens" not in t.column_names      # no acceptance: no lists


def test_empirical_lengths_resample_pairs(tmp_path):
    import pyarrow.csv as pacsv
    src = pacsv.read_csv(SAMPLES / "azure2023_code_head2000.csv")
    pairs = set(zip(src["ContextTokens"].to_pylist(), src["GeneratedTokens"].to_pylist()))
    for spec in (f"empirical:azure:{SAMPLES / 'azure2023_code_head2000.csv'}",
                 f"empirical:{SAMPLES / 'azure_code_sps_2k.parquet'}"):
        p = tmp_path / "e.parquet"
        res = synth(p, n=500, rate=2.0, lengths=spec, seed=4)
        t = pq.read_table(p)
        got = set(zip(t["prompt_tokens"].to_pylist(), t["output_tokens"].to_pylist()))
        assert got <= pairs
        assert res.metadata["specsched.source"]["lengths"]["pairs"] == 2000


def test_empirical_vidur_lengths_without_arrivals(tmp_path):
    v = tmp_path / "v.csv"
    v.write_text("num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio\n"
                 "3772,54,3826,69.85\n2015,156,2171,12.9\n")
    p = tmp_path / "s.parquet"
    synth(p, n=50, rate=1.0, lengths=f"empirical:vidur:{v}", seed=0)
    assert set(pq.read_table(p)["output_tokens"].to_pylist()) <= {54, 156}


def test_streamed_blocks_with_acceptance(tmp_path):
    p = tmp_path / "b.parquet"
    res = synth(p, n=1000, rate=3.0, acceptance=f"specbench:{SAMPLES / 'specbench_vicuna7b_eagle_lengths.jsonl'}",
                seed=5, block_rows=128)
    rep = validate_trace(p)
    assert rep.rows == 1000 and rep.steps == res.steps and rep.sorted
    ta = read_trace_arrays(p)
    assert ta.acceptance["kind"] == "specbench"
    assert np.all(np.diff(ta.arrival_s) >= 0)
    assert ta.request_id.to_pylist()[:3] == ["0", "1", "2"]
    assert ta.category is not None


def test_same_seed_same_bytes(tmp_path):
    a, b, c = tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "c.parquet"
    kw = dict(n=2000, rate=4.0, arrival="gamma", cv=2.0, acceptance="dynamic:k=2-8,alpha=0.7")
    synth(a, seed=9, **kw)
    synth(b, seed=9, **kw)
    synth(c, seed=10, **kw)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


@pytest.mark.parametrize("kw,match", [
    (dict(n=0, rate=1.0), "-n must be"),
    (dict(n=5, rate=0.0), "--rate"),
    (dict(n=5, rate=1.0, arrival="uniform"), "poisson or gamma"),
    (dict(n=5, rate=1.0, arrival="gamma", cv=-1.0), "--cv"),
    (dict(n=5, rate=1.0, prompt="normal:mean=3"), "unknown kind"),
    (dict(n=5, rate=1.0, output="lognormal:median=0,sigma=1"), "median >= 1"),
    (dict(n=5, rate=1.0, lengths="empirical:/no/such.parquet"), "no such file"),
])
def test_bad_arguments(tmp_path, kw, match):
    out = tmp_path / "x.parquet"
    with pytest.raises(SpecschedError, match=match):
        synth(out, **kw)
    assert not out.exists()


def test_length_spec_parsing():
    assert parse_lengths("fixed:12").draw(3, np.random.default_rng(0)).tolist() == [12, 12, 12]
    spec = parse_lengths("lognormal:median=100,sigma=0,min=5,max=50")
    assert spec.draw(4, np.random.default_rng(0)).tolist() == [50] * 4
