"""The radix prefix cache inside the engine (SGLang's scheduler around ``RadixCache``), on cases
worked out by hand: what each request prefills, the hit rate, eviction that spares locked
nodes, the ideal hit rate as the bound, lpm ordering, the cache-aware router, and the what-if."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from simulator import run
from simulator.config import SimConfig
from simulator.engine import Simulation
from tests.simulator.helpers import make_trace, table_executor, with_prefix
from traces import read_trace_arrays
from traces.errors import SpecschedError
from traces.prefix import ideal_hits

SAMPLE = Path(__file__).resolve().parents[2] / "traces" / "samples" / "mooncake_conv_1k.parquet"


def _prefills(res):
    s = res.steps
    kind = s["kind"].to_numpy(zero_copy_only=False).astype(str)
    pre = kind == "prefill"
    return s["tokens"].to_numpy()[pre].tolist(), s["kv_mean"].to_numpy()[pre].tolist()


def _three():
    """Three requests far apart (each done before the next arrives), 16-token blocks.

    r0: 40 tokens, ids [1, 2, 3] -- nothing cached: prefills 40; leaves its 2 full blocks.
    r1: 40 tokens, ids [1, 2, 5] -- may match min(3, 39 // 16, 40 // 16) = 2 blocks: 32 cached,
        prefills 8 at prefix 32.
    r2: 32 tokens, ids [1, 2]    -- may match min(2, 31 // 16, 32 // 16) = 1 block (its last
        token must be computed): 16 cached, prefills 16 at prefix 16.
    Hit rate (0 + 32 + 16) / (40 + 40 + 32) = 48 / 112.
    """
    t = make_trace([0, 10, 20], [40, 40, 32], [2, 2, 2], [[(3, 3)]] * 3)
    return with_prefix(t, [[1, 2, 3], [1, 2, 5], [1, 2]], 16)


def test_three_requests_sharing_a_prefix_by_hand():
    res = run(_three(), SimConfig.load(None, {}), table_executor(), kv_capacity_tokens=10000)
    tokens, prefix = _prefills(res)
    assert tokens == [40, 8, 16] and prefix == [0.0, 32.0, 16.0]
    assert res.requests["cached_tokens"].to_pylist() == [0, 32, 16]
    s = res.summary
    assert s["radix_cache"] is True and s["prefix_cached_tokens"] == 48
    assert s["prefix_cache_hit_rate"] == pytest.approx(48 / 112)
    assert s["prefix_ideal_hit_rate"] == pytest.approx(48 / 112)
    assert s["prefix_cache_inserted_tokens"] == 32 and s["prefix_cache_evicted_tokens"] == 0
    # the pool split: while r0 decodes its 2 blocks are locked (it holds 40 pages, the cache
    # nothing of its own); between requests they are the cache's alone (evictable); r1 locks
    # both again (40 pages in use, 0 for the cache alone), r2 only the first (16 of the 32
    # cached pages stay evictable; r2 uses 16 + 16 of its own)
    st = res.steps.to_pandas()
    pre = st[st["kind"] == "prefill"]
    assert pre["kv_pages_used"].tolist() == [40, 40, 48]
    assert pre["kv_pages_cached"].tolist() == [0, 0, 16]
    assert s["what_if"] == []


def test_off_is_a_what_if_that_prefills_everything():
    res = run(_three(), SimConfig.load(None, {"engine.radix_cache": "off"}), table_executor(),
              kv_capacity_tokens=10000)
    assert _prefills(res)[0] == [40, 40, 32]
    assert res.summary["prefix_cache_hit_rate"] == 0.0
    assert res.summary["prefix_ideal_hit_rate"] == pytest.approx(48 / 112)
    assert any("radix_cache 'off'" in w for w in res.summary["what_if"])
    # without prefix information, off is no what-if (nothing could be matched anyway)
    plain = make_trace([0], [40], [2], [[(3, 3)]])
    res = run(plain, SimConfig.load(None, {"engine.radix_cache": "off"}), table_executor(),
              kv_capacity_tokens=10000)
    assert res.summary["what_if"] == [] and res.summary["radix_cache"] is False


def test_blocks_must_be_whole_pages():
    with pytest.raises(SpecschedError, match="not a whole number of KV pages"):
        Simulation(_three(), SimConfig.load(None, {"engine.page_size": 32}), table_executor(),
                   kv_capacity_tokens=10000)


def test_eviction_takes_the_unlocked_leaf_and_spares_the_running_requests_prefix():
    """Pool 560 tokens, 16-token blocks, page 1, max_new_tokens = output, ratio 0.7.

    A (0 s, 33 tokens, ids [1, 2, 9], 200 out) caches its 2 full blocks and keeps them locked
    while it decodes.  C (1 ms, 321 tokens, 20 blocks of its own, 1 out) finishes at its prefill:
    its 20 blocks (320 pages) stay cached, unlocked, used *after* A's.  B (20 ms, 300 tokens of
    new blocks, 2 out): free = 560 - 32 - 1 - 320 = 207 pages; SGLang's room is free +
    evictable - A's reservation = 207 + 320 - 199 x 0.7 = 387.7 > 300 + 2 + 1, so B is admitted,
    and its 300 pages need 93 more than are free.  Least recently used first would take A's
    blocks, but they are locked: C's leaf goes, 320 tokens.  D (30 ms, ids [1, 2, 4]) still
    finds A's 2 blocks: 32 cached tokens.  Without the lock A's blocks go first and D misses."""
    t = make_trace([0.0, 0.001, 0.02, 0.03], [33, 321, 300, 33], [200, 1, 2, 2],
                   [[(3, 3)] * 60, [(3, 3)], [(3, 3)], [(3, 3)]])
    t = with_prefix(t, [[1, 2, 9], list(range(100, 121)), list(range(200, 219)), [1, 2, 4]], 16)
    cfg = SimConfig.load(None, {"engine.max_new_tokens": 1})  # max_new_tokens = the output
    res = run(t, cfg, table_executor(), kv_capacity_tokens=560)
    req = res.requests
    assert req["cached_tokens"].to_pylist() == [0, 0, 0, 32]
    admit = req["admit_s"].to_numpy()
    assert admit[2] < admit[3] < req["finish_s"].to_numpy()[0]  # D came while A ran
    st = res.steps.to_pandas()
    pre = st[st["kind"] == "prefill"]
    # B's prefill: decided after evicting C; the cache keeps only A's locked blocks (nothing
    # evictable), and the pool holds A's 32 + 1 pages and B's 300
    assert pre["kv_pages_cached"].tolist()[2] == 0
    assert pre["kv_pages_used"].tolist()[2] == 32 + 1 + 300


def _spread(trace, gap):
    """The trace with arrivals ``gap`` seconds apart, in its order."""
    return dataclasses.replace(trace, arrival_s=np.arange(len(trace.arrival_s)) * float(gap))


def test_cache_larger_than_the_trace_serves_the_ideal_hit_rate():
    """Mooncake's first 150 requests, 1000 s apart: each finishes before the next arrives, so
    every request is inserted (after its prefill) before any later one is admitted, no two
    overlap, and a pool of 10M tokens never evicts.  That is exactly the ideal cache of
    ``trace inspect`` (infinite, inserted in arrival order): the hit rates are equal, per
    request too."""
    tr = read_trace_arrays(SAMPLE)
    tr = _spread(_head(tr, 150), 1000.0)
    res = run(tr, SimConfig.load(None, {}), table_executor(), kv_capacity_tokens=10_000_000)
    ideal = ideal_hits(tr.prompt_tokens, tr.prefix_offsets, tr.prefix_ids, 512) * 512
    assert ideal.sum() > 0
    assert np.array_equal(res.requests["cached_tokens"].to_numpy(), ideal)
    assert res.summary["prefix_cache_hit_rate"] == pytest.approx(res.summary[
        "prefix_ideal_hit_rate"])
    assert res.summary["prefix_cache_evicted_tokens"] == 0


def _head(tr, n):
    off = tr.prefix_offsets[:n + 1]
    so = tr.step_offsets[:n + 1]
    return dataclasses.replace(
        tr, request_id=tr.request_id[:n], arrival_s=tr.arrival_s[:n],
        prompt_tokens=tr.prompt_tokens[:n], output_tokens=tr.output_tokens[:n],
        step_offsets=so, draft_tokens=tr.draft_tokens[:so[-1]],
        accepted_tokens=tr.accepted_tokens[:so[-1]],
        category=None if tr.category is None else tr.category[:n],
        prefix_offsets=off, prefix_ids=tr.prefix_ids[:off[-1]])


def test_a_tiny_cache_falls_below_the_ideal_and_never_exceeds_it():
    """With FCFS every block a request finds was left by a request that arrived before it, so
    no request beats its ideal hit; a pool just large enough for the biggest request must evict
    between conversation turns and loses hits."""
    tr = _spread(_head(read_trace_arrays(SAMPLE), 150), 1000.0)
    ideal = ideal_hits(tr.prompt_tokens, tr.prefix_offsets, tr.prefix_ids, 512) * 512
    need = int((tr.prompt_tokens + tr.output_tokens).max()) + 64
    res = run(tr, SimConfig.load(None, {}), table_executor(), kv_capacity_tokens=need)
    got = res.requests["cached_tokens"].to_numpy()
    assert np.all(got <= ideal)
    assert got.sum() < ideal.sum()
    assert res.summary["prefix_cache_evicted_tokens"] > 0
    # at the recorded arrival times (requests overlap), per request still within the ideal
    real = _head(read_trace_arrays(SAMPLE), 150)
    res = run(real, SimConfig.load(None, {}), table_executor(), kv_capacity_tokens=need * 4)
    assert np.all(res.requests["cached_tokens"].to_numpy() <= ideal)


def test_lpm_admits_the_longest_cached_prefix_first():
    """r0 leaves blocks [1, 2, 3] cached.  While r1 (a long prefill) runs, r2 (ids [7, 8], no
    hit) and r3 (ids [1, 2, 3, 4], 3 blocks cached) arrive.  FCFS admits r2 then r3; lpm admits
    r3 (48 cached tokens) first.  max_running 2 keeps them in separate passes."""
    t = make_trace([0.0, 10.0, 10.001, 10.002], [64, 4000, 40, 64], [2, 50, 2, 2],
                   [[(3, 3)], [(3, 3)] * 20, [(3, 3)], [(3, 3)]])
    t = with_prefix(t, [[1, 2, 3, 4], list(range(50, 300)), [7, 8, 9], [1, 2, 3, 4]], 16)
    order = {}
    for pol in ("fcfs", "lpm"):
        res = run(t, SimConfig.load(None, {"engine.schedule_policy": pol,
                                           "engine.max_running": 2}),
                  table_executor(), kv_capacity_tokens=100000)
        admit = res.requests["admit_s"].to_numpy()
        order[pol] = admit[2] < admit[3]
        assert res.requests["cached_tokens"].to_pylist() == [0, 0, 0, 48]
    assert order == {"fcfs": True, "lpm": False}


def test_cache_aware_router_sends_a_shared_prefix_to_its_replica():
    """Two replicas, balanced loads (they differ by <= 32 requests).  r0 (ids [1, 2, 3], 40
    tokens) goes to the smallest tree (both empty: the lowest index, 0); r1 (ids [5, 6, 7]) to
    the smallest, replica 1 (replica 0's holds 40 tokens); r2 (ids [5, 6, 7, 8], 64 tokens: 48
    of them in replica 1's tree, 0.75 > 0.5) to replica 1, where r1 left 2 full blocks: 32
    cached tokens.  Round-robin sends r2 to replica 0 and it hits nothing."""
    t = make_trace([0.0, 1.0, 2.0], [40, 40, 64], [2, 2, 2], [[(3, 3)]] * 3)
    t = with_prefix(t, [[1, 2, 3], [5, 6, 7], [5, 6, 7, 8]], 16)
    res = run(t, SimConfig.load(None, {"cluster.replicas": 2, "cluster.router": "cache-aware"}),
              table_executor(), kv_capacity_tokens=10000)
    assert res.requests["replica"].to_pylist() == [0, 1, 1]
    assert res.requests["cached_tokens"].to_pylist() == [0, 0, 32]
    rr = run(t, SimConfig.load(None, {"cluster.replicas": 2}), table_executor(),
             kv_capacity_tokens=10000)
    assert rr.requests["replica"].to_pylist() == [0, 1, 0]
    assert rr.requests["cached_tokens"].to_pylist() == [0, 0, 0]


def test_cache_aware_router_balances_when_loads_drift_apart():
    """40 requests with one shared prefix arrive at once (nothing finishes meanwhile): they
    follow the prefix to replica 0 until its load exceeds the other's by more than 32 (and
    1.1x), then the least loaded replica takes the next one."""
    n = 40
    t = make_trace([0.0] * n, [64] * n, [2] * n, [[(3, 3)]] * n)
    t = with_prefix(t, [[1, 2, 3, 4]] * n, 16)
    res = run(t, SimConfig.load(None, {"cluster.replicas": 2, "cluster.router": "cache-aware"}),
              table_executor(), kv_capacity_tokens=100000)
    rep = res.requests["replica"].to_pylist()
    # r0 -> 0 (empty trees); r1..r32 follow the prefix (loads 1..32 vs 0: not > 32); r33
    # arrives with loads 33 vs 0 -> replica 1; r34 with 33 vs 1 -> 1; ...
    assert rep[:33] == [0] * 33 and rep[33] == 1
