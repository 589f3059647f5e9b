"""The radix prefix cache (simulator/radix.py): small trees worked out by hand, SGLang's rules
(page-granular match, split on a partial match, locks, LRU eviction of whole unlocked leaves),
the infinite-cache hit rate against traces.prefix, and page conservation under random use."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backends.jit import njit
from simulator import radix as X
from traces import read_trace_arrays
from traces.prefix import cacheable_blocks, ideal_hits, matchable_blocks
from traces.synth import synth

SAMPLES = Path(__file__).resolve().parents[2] / "traces" / "samples"


def ids(*xs):
    return np.asarray(xs, np.int64)


def ins(c, xs, now, n=None):
    a = ids(*xs)
    return X.insert(*c, a, len(a) if n is None else n, float(now))


def mat(c, xs, now, n=None):
    a = ids(*xs)
    return X.match(*c, a, len(a) if n is None else n, float(now))


def live(c) -> int:
    return int(c[4][X.S_LIVE])


def ok(c):
    assert X.check_state(c) == []


def test_insert_match_and_split_by_hand():
    c = X.new_cache(20)
    assert ins(c, [1, 2, 3], 1) == (0, 1)                  # a new leaf in row 1
    assert X.cached_pages(c[4]) == 3 and X.evictable_pages(c[4]) == 3
    assert mat(c, [1, 2, 3, 4], 2) == (3, 1)               # all 3 cached blocks, the leaf
    assert mat(c, [1, 2, 3, 4], 2, n=2) == (2, 2)          # capped at 2: splits [1,2 | 3]
    assert X.path_ids(c, 2) == [1, 2] and X.path_ids(c, 1) == [1, 2, 3]
    prefix, node = ins(c, [1, 2, 5], 3)                    # [1,2] is there: one new block
    assert prefix == 2 and X.path_ids(c, node) == [1, 2, 5]
    assert X.cached_pages(c[4]) == 4 and live(c) == 4     # root, [1,2], [3], [5]
    assert X.node_blocks(c[0], node) == 3
    assert mat(c, [1, 9], 4) == (1, 4)                     # [1] then 9: splits [1 | 2] again
    assert X.path_ids(c, 4) == [1] and live(c) == 5 and X.cached_pages(c[4]) == 4
    assert mat(c, [9, 1], 5) == (0, X.ROOT)
    assert mat(c, [1, 2, 3], 5, n=0) == (0, X.ROOT)
    assert ins(c, [1, 2, 3], 6) == (3, 1)                  # all cached: nothing new
    assert X.cached_pages(c[4]) == 4
    ok(c)


def test_peek_finds_what_match_finds_without_changing_anything():
    c = X.new_cache(20)
    ins(c, [1, 2, 3, 4], 1)
    before = [a.copy() for a in c]
    assert X.peek(*c, ids(1, 2, 7), 3) == 2
    assert X.peek(*c, ids(1, 2, 3, 4, 5), 5) == 4
    assert X.peek(*c, ids(1, 2, 3, 4, 5), 3) == 3
    assert all(np.array_equal(a, b) for a, b in zip(before, c))
    assert mat(c, [1, 2, 7], 2)[0] == 2 and live(c) == 3   # match splits; peek did not


def test_lru_order_whole_nodes_and_pages_per_block():
    c = X.new_cache(20, pages_per_block=2)
    ins(c, [1, 2, 3], 1)        # row 1
    ins(c, [4, 5], 2)           # row 2
    ins(c, [6], 3)              # row 3
    mat(c, [1, 2, 3], 4)        # [1,2,3] used last
    # least recent first: [4,5] (t=2, 2 blocks = 4 pages: a whole node, more than asked)
    assert X.evict(*c, 1) == 4
    assert X.evict(*c, 1) == 2                             # then [6] (t=3)
    assert X.evict(*c, 1) == 6                             # then [1,2,3]
    assert X.evict(*c, 1) == 0 and X.cached_pages(c[4]) == 0
    assert int(c[4][X.S_EVICTED]) == 6 and int(c[4][X.S_INSERTED]) == 6
    ok(c)


def test_evicting_a_leaf_makes_its_parent_a_candidate():
    c = X.new_cache(20)
    ins(c, [1, 2, 3], 1)
    ins(c, [7], 2)
    ins(c, [1, 2, 6], 3)        # splits [1,2 | 3] and refreshes both halves at t=3 (SGLang
    #                             touches the node before splitting it), adds [6] at t=3
    assert X.evict(*c, 1) == 1                             # [7] (t=2)
    # [3] and [6]: same time and operation; [3] keeps the older row
    assert X.evict(*c, 1) == 1 and mat(c, [1, 2, 6], 4)[0] == 3
    assert mat(c, [1, 2, 3], 4)[0] == 2
    # [6] (t=4) goes, then its parent [1,2] is a leaf and goes too: 1 + 2 pages
    assert X.evict(*c, 2) == 3 and X.cached_pages(c[4]) == 0
    ok(c)


def test_locked_nodes_are_never_evicted():
    c = X.new_cache(20)
    _, a = ins(c, [1, 2, 3], 1)
    assert X.lock(*c, a) == 3 and X.evictable_pages(c[4]) == 0
    prefix, _ = ins(c, [1, 2, 4], 2)                       # splits the locked node
    assert prefix == 2
    assert X.evictable_pages(c[4]) == 1                    # only the new [4]
    assert X.protected_pages(c[4]) == 3
    assert X.evict(*c, 100) == 1                           # [4] only: [1,2] still has [3]
    assert X.path_ids(c, a) == [1, 2, 3] and X.cached_pages(c[4]) == 3
    X.lock(*c, a)                                  # two locks on the same path
    assert X.unlock(*c, a) == 0                    # still locked once
    assert X.evict(*c, 100) == 0
    assert X.unlock(*c, a) == 3                    # now [1,2] and [3] are evictable
    assert X.evict(*c, 100) == 3
    _, d = ins(c, [9], 3)
    with pytest.raises(ValueError, match="not locked"):
        X.unlock(*c, d)
    ok(c)


def test_capacity_is_enforced_and_the_arena_compacts():
    c = X.new_cache(4)                                     # arena of 2 * 4 + 2 = 10 ids
    ins(c, [1, 2, 3], 1)
    with pytest.raises(ValueError, match="beyond its capacity"):
        ins(c, [4, 5], 2)
    assert X.evict(*c, 2) == 3
    for k in range(12):                                    # more ids than the arena holds
        _, node = ins(c, [100 + k, 200 + k], 3 + k)
        assert X.path_ids(c, node) == [100 + k, 200 + k]
        ok(c)
        X.evict(*c, 1)
    ok(c)


def test_negative_and_large_ids_hash_like_any_other():
    c = X.new_cache(20)
    big = [-(2**63), 2**63 - 1, -1, 0, 2**32, -(2**32)]
    for i, b in enumerate(big):
        _, node = ins(c, [b, i], 1)
        assert X.path_ids(c, node) == [b, i]
    for i, b in enumerate(big):
        assert mat(c, [b, i], 2)[0] == 2
    ok(c)


# ------------------------------------------------------------------------ the ideal hit rate


@njit
def _replay(N, T, K, H, S, Q, off, flat, m, k, t, hits):
    """A compiled caller, as the engine's loop will be: match, then insert, per request."""
    for i in range(m.size):
        a = flat[off[i]:off[i + 1]]
        hits[i], node = X.match(N, T, K, H, S, Q, a, m[i], t[i])
        X.insert(N, T, K, H, S, Q, a, k[i], t[i])


def replay_infinite(ta) -> np.ndarray:
    """Each request in arrival order: match its matchable blocks, then insert its cacheable
    blocks, in a cache larger than the trace."""
    B = ta.prefix_block_tokens
    n_ids = np.diff(ta.prefix_offsets)
    m = matchable_blocks(ta.prompt_tokens, n_ids, B)
    k = cacheable_blocks(ta.prompt_tokens, n_ids, B)
    c = X.new_cache(int(k.sum()))
    hits = np.zeros(len(ta), np.int64)
    _replay(*c, ta.prefix_offsets, ta.prefix_ids, m, k, ta.arrival_s, hits)
    ok(c)
    return hits


def test_infinite_cache_hits_equal_the_ideal_on_the_mooncake_sample():
    ta = read_trace_arrays(SAMPLES / "mooncake_conv_1k.parquet")
    hits = replay_infinite(ta)
    ideal = ideal_hits(ta.prompt_tokens, ta.prefix_offsets, ta.prefix_ids, ta.prefix_block_tokens)
    assert np.array_equal(hits, ideal)
    assert hits.sum() > 0


def test_infinite_cache_hits_equal_the_ideal_on_sessions(tmp_path):
    p = tmp_path / "s.parquet"
    synth(p, n=400, rate=4.0, turns="lognormal:median=3,sigma=0.8,max=12", turn_gap=20.0,
          system_prompts=3, system_prompt_len="lognormal:median=300,sigma=0.6", prefix_block=16,
          prompt="lognormal:median=120,sigma=0.8", output="lognormal:median=60,sigma=0.8", seed=5)
    ta = read_trace_arrays(p, acceptance="geometric:k=2,alpha=0.5")
    hits = replay_infinite(ta)
    ideal = ideal_hits(ta.prompt_tokens, ta.prefix_offsets, ta.prefix_ids, 16)
    assert np.array_equal(hits, ideal) and hits.sum() > 0


def test_a_small_cache_hits_less_and_never_more_than_the_ideal():
    ta = read_trace_arrays(SAMPLES / "mooncake_conv_1k.parquet")
    B = ta.prefix_block_tokens
    n_ids = np.diff(ta.prefix_offsets)
    m = matchable_blocks(ta.prompt_tokens, n_ids, B)
    k = cacheable_blocks(ta.prompt_tokens, n_ids, B)
    c = X.new_cache(300)                                   # 300 blocks: about 11 prompts
    hits = np.zeros(len(ta), np.int64)
    for i in range(len(ta)):
        a = ta.prefix_ids[ta.prefix_offsets[i]:ta.prefix_offsets[i + 1]]
        hits[i], _ = X.match(*c, a, int(m[i]), float(i))
        room = 300 - X.cached_pages(c[4])
        if room < k[i]:
            X.evict(*c, int(k[i]) - room)
        X.insert(*c, a, int(k[i]), float(i))
    ideal = ideal_hits(ta.prompt_tokens, ta.prefix_offsets, ta.prefix_ids, B)
    assert np.all(hits <= ideal) and 0 < hits.sum() < ideal.sum()
    ok(c)


# ------------------------------------------------------------------------ conservation


@st.composite
def workloads(draw):
    return (draw(st.integers(0, 2**31 - 1)), draw(st.integers(20, 200)),
            draw(st.sampled_from([1, 2, 4])), draw(st.integers(8, 80)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workloads())
def test_pages_are_conserved_and_locked_prefixes_stay(w):
    """A pool of pages shared by running requests and the cache, used the way the engine will
    (module docstring): free + requests' own + cached == pool after every operation."""
    seed, n_ops, ppb, pool = w
    rng = np.random.default_rng(seed)
    B = 4                                                  # tokens per block; a page is B/ppb
    c = X.new_cache(pool // ppb, pages_per_block=ppb)
    templates = [rng.integers(0, 5, 8) for _ in range(3)]
    free = pool
    reqs: list[dict] = []
    now = 0.0

    def pages_for(tokens):
        return -(-tokens * ppb // B)

    def conserve():
        own = sum(r["own"] for r in reqs if r["state"] != "done")
        assert free + own + X.cached_pages(c[4]) == pool
        assert 0 <= X.evictable_pages(c[4]) <= X.cached_pages(c[4])
        for r in reqs:                                     # a locked prefix is still cached
            if r["state"] == "running":
                assert X.path_ids(c, r["node"])[:r["protected"]] == r["ids"][:r["protected"]].tolist()
        ok(c)

    for _ in range(n_ops):
        now += 1.0
        op = rng.integers(0, 4)
        waiting = [r for r in reqs if r["state"] == "waiting"]
        running = [r for r in reqs if r["state"] == "running"]
        if op == 0 or not (waiting or running):            # a new request arrives
            t = templates[rng.integers(0, 3)]
            keep = int(rng.integers(0, 9))
            tail = rng.integers(0, 50, int(rng.integers(0, 5)))
            a = np.concatenate([t[:keep], tail]).astype(np.int64)
            P = int(len(a) * B - rng.integers(0, B)) if len(a) else int(rng.integers(1, B))
            reqs.append({"ids": a, "P": max(P, 1), "state": "waiting", "own": 0, "node": 0,
                         "protected": 0})
        elif op == 1 and waiting:                          # admission
            r = waiting[0]
            m = min(len(r["ids"]), (r["P"] - 1) // B)
            matched, node = X.match(*c, r["ids"], m, now)
            X.lock(*c, node)
            need = pages_for(r["P"]) - matched * ppb
            if free < need and free + X.evictable_pages(c[4]) >= need:
                free += X.evict(*c, need - free)
            if free >= need:
                free -= need
                r.update(state="running", own=need, node=node, protected=matched)
            else:
                X.unlock(*c, node)
        elif op == 2 and running:                          # prefill done: cache the prompt
            r = running[int(rng.integers(0, len(running)))]
            k = min(len(r["ids"]), r["P"] // B)
            if k > r["protected"]:
                prefix, node2 = X.insert(*c, r["ids"], k, now)
                dup = max(prefix - r["protected"], 0) * ppb
                free += dup
                r["own"] -= (k - r["protected"]) * ppb
                X.lock(*c, node2)
                X.unlock(*c, r["node"])
                r.update(node=node2, protected=k)
        elif running:                                      # finish or retraction
            r = running[int(rng.integers(0, len(running)))]
            free += r["own"]
            X.unlock(*c, r["node"])
            r.update(own=0, node=0, protected=0,
                     state="done" if rng.integers(0, 2) else "waiting")
        conserve()
    for r in reqs:
        if r["state"] == "running":
            free += r["own"]
            X.unlock(*c, r["node"])
            r["state"] = "done"
    assert X.evictable_pages(c[4]) == X.cached_pages(c[4])   # nothing locked any more
    assert free + X.evict(*c, pool) == pool


def test_check_state_notices_broken_states():
    c = X.new_cache(10)
    ins(c, [1, 2, 3], 1)
    ins(c, [1, 4], 2)
    ok(c)
    bad = [a.copy() for a in c]
    bad[4][X.S_CACHED] += 1
    assert any("S_CACHED" in p for p in X.check_state(bad))
    bad = [a.copy() for a in c]
    bad[4][X.S_QSIZE] = 0                                  # candidates forgotten
    assert any("no current eviction candidate" in p for p in X.check_state(bad))
    bad = [a.copy() for a in c]
    bad[3][:, 2] = -1                                      # children table wiped
    assert any("children table" in p for p in X.check_state(bad))
