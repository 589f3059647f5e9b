"""KV-pool bookkeeping shared by admission, decode and applying: pages in use, retraction, the
radix cache's locks and eviction (the engine's compiled core, :mod:`simulator.core`)."""

from __future__ import annotations

from backends.jit import njit
from simulator import cache_ops as X
from simulator.layout import *  # noqa: F401,F403  (the state layout's column names)
from simulator.waiting import _requeue


@njit
def _mark_kv_used(r, E, PI):
    """Record the pages in use by the decided passes; the pool must never be overdrawn."""
    if E[r, E_FREE] < 0:
        raise RuntimeError("specsched engine bug: KV pages allocated beyond capacity")
    for p in range(E[r, E_NPASS]):
        PI[r, p, P_KVUSED] = E[r, E_CAP] - E[r, E_FREE]
        PI[r, p, P_KVCACHED] = E[r, E_CACHED]


@njit
def _retract(r, i, t, R, E, W, WT, RUN, rx):
    """Free request i's pages and put it back in the waiting queue (at its end).  Its prompt
    blocks in the radix cache stay there, unlocked (SGLang ``release_kv_cache`` with
    ``is_insert=False``): its re-admission matches whatever is still cached."""
    E[r, E_FREE] += R[i, R_PAGES] - R[i, R_SHARED]
    R[i, R_PAGES] = 0
    _release_node(r, i, R, E, rx)
    R[i, R_KV] = 0
    R[i, R_STATUS] = ST_QUEUED
    R[i, R_PDONE] = 0
    R[i, R_RETRACT] += 1
    n = E[r, E_NRUN]
    q = 0
    for j in range(n):
        if RUN[r, j] != i:
            RUN[r, q] = RUN[r, j]
            q += 1
    E[r, E_NRUN] = q
    _requeue(W, WT, E, r, i, t)


@njit
def _sync_cached(r, E, rx):
    E[r, E_CACHED] = X.evictable_pages(rx, r)


@njit
def _release_node(r, i, R, E, rx):
    """Release request i's lock on the radix cache (finish, retraction)."""
    if R[i, R_NODE] != 0:
        X.unlock(rx, r, R[i, R_NODE])
        _sync_cached(r, E, rx)
    R[i, R_NODE] = 0
    R[i, R_PROT] = 0
    R[i, R_SHARED] = 0


@njit
def _evict_for(r, need, E, rx):
    """Evict from the radix cache until ``need`` pages are free, if it can (SGLang evicts the
    tree cache before it allocates, and before it retracts: ``evict_from_tree_cache``)."""
    if need > E[r, E_FREE]:
        E[r, E_FREE] += X.evict(rx, r, need - E[r, E_FREE])
        _sync_cached(r, E, rx)
