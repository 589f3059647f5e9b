"""The engine's calls into the radix prefix cache, one cache per replica, in compiled code.

The engine keeps every replica's cache state (``simulator.radix``) stacked along a leading
replica axis: ``rx = (N, T, K, H, S, Q)`` with ``N[r]`` replica ``r``'s node table and so on
(:func:`new_states`).  The functions here are the operations the engine's scheduler performs
(``docs/prefix_cache.md``, "How the engine calls it"): match and lock at admission, insert after
a prefill pass moving the request's lock, unlock at finish or retraction, evict when the pool
needs pages, and the read-only peek of the ``lpm`` policy.  Without a cache (no prefix
information in the trace, or ``engine.radix_cache = "off"``) the states hold an empty cache of
capacity 0: every call is then a no-op that returns 0, so the engine needs no second code path.
"""

from __future__ import annotations

import numpy as np

from backends.jit import njit
from simulator import radix as X

__all__ = ["new_states", "match_blocks", "match_lock", "insert_move", "unlock", "evict",
           "evictable_pages", "cached_pages", "peek", "inserted_blocks", "evicted_blocks"]


def new_states(replicas: int, capacity_blocks: int, pages_per_block: int) -> tuple:
    """``replicas`` empty caches of ``capacity_blocks`` blocks, stacked (capacity 0: no cache)."""
    one = X.new_cache(capacity_blocks, pages_per_block)
    return tuple(np.stack([a] * replicas) for a in one)


@njit
def match_blocks(i, prompt, gen, poff, block):
    """Blocks request ``i`` may match: its ids, at most up to the token before the last one of
    its sequence (``(P + G - 1) // B``), and prompt blocks only (``P // B``)."""
    n = poff[i + 1] - poff[i]
    return min(n, (prompt + gen - 1) // block, prompt // block)


@njit
def match_lock(rx, r, i, n, poff, pids, now):
    """Match request ``i``'s first ``n`` blocks in replica ``r``'s cache and lock where the match
    ends (SGLang ``match_prefix`` at ``init_next_round_input``, ``inc_lock_ref`` in
    ``PrefillAdder``); returns (blocks matched, node)."""
    if n <= 0:
        return 0, 0
    N, T, K, H, S, Q = rx
    ids = pids[poff[i]:poff[i + 1]]
    blocks, node = X.match(N[r], T[r], K[r], H[r], S[r], Q[r], ids, n, now)
    X.lock(N[r], T[r], K[r], H[r], S[r], Q[r], node)
    return blocks, node


@njit
def insert_move(rx, r, i, k, node, poff, pids, now):
    """Insert request ``i``'s first ``k`` blocks and move its lock from ``node`` to the node
    ending at block ``k`` (SGLang ``cache_unfinished_req``); returns (blocks already cached,
    new node)."""
    N, T, K, H, S, Q = rx
    ids = pids[poff[i]:poff[i + 1]]
    prefix, node2 = X.insert(N[r], T[r], K[r], H[r], S[r], Q[r], ids, k, now)
    X.lock(N[r], T[r], K[r], H[r], S[r], Q[r], node2)
    if node != 0:
        X.unlock(N[r], T[r], K[r], H[r], S[r], Q[r], node)
    return prefix, node2


@njit
def unlock(rx, r, node):
    """Release a request's lock (finish, retraction: SGLang ``dec_lock_ref``)."""
    if node != 0:
        N, T, K, H, S, Q = rx
        X.unlock(N[r], T[r], K[r], H[r], S[r], Q[r], node)


@njit
def evict(rx, r, need_pages):
    """Evict least recently used unlocked leaves of replica ``r`` until ``need_pages`` pages are
    freed or nothing evictable is left; returns the pages freed."""
    N, T, K, H, S, Q = rx
    if need_pages <= 0 or S[r, X.S_EVICTABLE] == 0:
        return 0
    return X.evict(N[r], T[r], K[r], H[r], S[r], Q[r], need_pages)


@njit
def evictable_pages(rx, r):
    return X.evictable_pages(rx[4][r])


@njit
def cached_pages(rx, r):
    return X.cached_pages(rx[4][r])


@njit
def peek(rx, r, i, n, poff, pids):
    """Blocks of request ``i``'s first ``n`` that replica ``r`` holds (no side effect)."""
    if n <= 0:
        return 0
    N, T, K, H, S, Q = rx
    return X.peek(N[r], T[r], K[r], H[r], S[r], Q[r], pids[poff[i]:poff[i + 1]], n)


def inserted_blocks(rx) -> int:
    """Blocks inserted into all replicas' caches over the run."""
    return int(rx[4][:, X.S_INSERTED].sum())


def evicted_blocks(rx) -> int:
    """Blocks evicted from all replicas' caches over the run."""
    return int(rx[4][:, X.S_EVICTED].sum())
