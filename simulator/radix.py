"""A prefix cache with SGLang's radix-cache semantics, over prompt block ids, in plain arrays.

The cache holds the KV of prompt prefixes as a radix tree whose edges are runs of block ids (a
trace's ``prefix_hashes``; one block is ``B = prefix_block_tokens`` tokens, ``pages_per_block``
KV pages).  It follows ``python/sglang/srt/mem_cache/radix_cache.py`` (``RadixCache``) with the
page size set to ``B``: matching is page-granular, a match that ends inside a node splits it,
nodes hold a lock count (``inc_lock_ref`` / ``dec_lock_ref`` walk to the root), and eviction
removes the least recently used unlocked leaves, whole nodes at a time, until enough pages are
free.  ``docs/prefix_cache.md`` cites SGLang's function for each rule.

Every function is compiled with ``backends.jit.njit`` and works on six preallocated arrays, the
*state* ``(N, T, K, H, S, Q)`` from :func:`new_cache`, so the compiled engine loop can call them
(``match(*state, ids, n, now)`` from Python; ``match(N, T, K, H, S, Q, ids, n, now)`` in compiled
code; one state per replica):

``N`` int64 [rows, NN]   one row per node: ``N_PARENT`` (-1 root, -2 a free row), ``N_KSTART`` /
                         ``N_KLEN`` (the node's block ids are ``K[kstart:kstart+klen]``),
                         ``N_LOCK`` (lock_ref), ``N_NCHILD``, ``N_TOUCH`` (operation counter of
                         the last access), ``N_DEPTH`` (blocks from the root to the node's end),
                         ``N_NEXT`` (free-row list), ``N_VER`` (bumped when the row's order key
                         or owner changes).  Row 0 is the root.
``T`` float64 [rows]     last access time (the caller's clock; SGLang's ``last_access_time``)
``K`` int64 [arena]      block ids of the nodes (compacted when full)
``H`` int64 [slots, 3]   children: an open-addressing hash table (parent, first block id) ->
                         child, -1 in column 2 when the slot is empty
``S`` int64 [NS]         scalars: ``S_CACHED`` / ``S_EVICTABLE`` blocks, ``S_PPB`` pages per
                         block, ``S_CAP`` capacity in blocks, totals ``S_INSERTED`` /
                         ``S_EVICTED``, and bookkeeping (rows, free list, arena top, live nodes)
``Q`` int64 [qcap, 3]    eviction candidates: a binary min-heap of (touch, node, version) kept
                         across calls; an entry counts only while its version is the node's and
                         the node is an unlocked leaf (stale entries are dropped when popped,
                         and the heap is rebuilt from the nodes when it fills up)

Least recently used means the smallest operation counter of the last access (each ``match`` or
``insert`` is one operation; ties, the nodes of one path, go to the lower row).  With a clock that
never goes back (one replica's), that is the order of ``T``, SGLang's LRU key.

The cache never holds more than ``capacity_blocks`` blocks: it shares the engine's KV pool, so a
caller makes room (``evict``) before it inserts; inserting beyond the capacity raises.

How the engine calls it (SGLang's scheduler; ``docs/prefix_cache.md``).  Per request keep
``node`` (the locked node, root = 0 when none) and ``protected`` (prompt blocks the cache owns for
it).  ``...`` stands for the state, ``ids`` for the request's ``prefix_ids``, ``n_ids`` for their
count, ``P`` for its prompt tokens and ``G`` for the tokens it has generated:

1. **Admission** (first time, or again after a retraction): ``m = min(n_ids, (P + G - 1) // B,
   P // B)`` (the match stops one token short of the sequence, and only prompt blocks have ids),
   ``matched, node = match(..., ids, m, now)``, then ``lock(..., node)``.  The request needs
   pool pages only for its tokens past ``matched * B``; room is the free pages plus
   ``evictable_pages(S)`` (the lock keeps its own prefix out of that).  If it does not fit,
   ``unlock`` and stop admitting.  If it fits and the free pages fall short, ``evict`` the
   difference.  Its prefill computes ``P + G - matched * B`` tokens after a prefix of
   ``matched * B``.  ``protected = matched``.
2. **After each prefill pass** of the request (its last chunk included), with ``done`` prompt
   tokens computed so far: ``k = min(n_ids, done // B)``; if ``k > protected``:
   ``prefix, node2 = insert(..., ids, k, now)``; the request frees the pages of blocks
   ``[protected, prefix)`` (another request cached them meanwhile) and hands the pages of blocks
   ``[prefix, k)`` to the cache (they leave its own count); ``lock(..., node2)``,
   ``unlock(..., node)``, ``node = node2``, ``protected = k``.
3. **Finish**: the request frees its own pages (everything past ``protected * B``: generated
   tokens and the partial last block), then ``unlock(..., node)``.  Output tokens have no ids
   and are not inserted.
4. **Retraction**: the same as finish (free own pages, ``unlock``); the prompt blocks stay
   cached, unlocked, and the re-admission (1) matches whatever is still there.
5. **The pool needs pages** (admission, decode growth): ``evict(..., need - free)`` first; it
   returns the pages freed (whole nodes: possibly more than asked, or less when everything left
   is locked); retract only if that is not enough.

Pool accounting: ``free + sum of requests' own pages + cached_pages(S) == pool pages`` at every
step.  Counters: ``cached_pages``, ``evictable_pages``, ``protected_pages`` (locked).
"""

from __future__ import annotations

import numpy as np

from backends.jit import njit
from simulator.radix_store import (  # noqa: F401  (the layout is part of the API)
    ROOT, N_PARENT, N_KSTART, N_KLEN, N_LOCK, N_NCHILD, N_TOUCH, N_DEPTH, N_NEXT, N_VER, NN,
    FREE_ROW, S_ROWS, S_FREE, S_LIVE, S_KTOP, S_CACHED, S_EVICTABLE, S_TOUCH, S_PPB, S_CAP,
    S_INSERTED, S_EVICTED, S_QSIZE, NS, _child, _compact, _del_child, _evictable_leaf, _find,
    _free_row, _new_row, _q_less, _q_pop, _q_push, _set_child, _split, _touch,
)

__all__ = ["new_cache", "match", "peek", "lock", "unlock", "insert", "evict", "cached_pages",
           "evictable_pages", "protected_pages", "node_blocks", "check_state", "path_ids",
           "ROOT"]


def new_cache(capacity_blocks: int, pages_per_block: int = 1):
    """The state ``(N, T, K, H, S, Q)`` of an empty cache of at most ``capacity_blocks`` blocks."""
    cap = int(capacity_blocks)
    ppb = int(pages_per_block)
    if cap < 0 or ppb < 1:
        raise ValueError(f"capacity_blocks must be >= 0 and pages_per_block >= 1, got {cap}, {ppb}")
    rows = cap + 2                       # every node but the root holds >= 1 block; +1 for a split
    slots = 8
    while slots < 2 * rows:
        slots *= 2
    N = np.zeros((rows, NN), np.int64)
    N[:, N_PARENT] = FREE_ROW
    N[:, N_NEXT] = -1
    N[ROOT, N_PARENT] = -1
    T = np.zeros(rows, np.float64)
    K = np.zeros(2 * cap + 2, np.int64)
    H = np.full((slots, 3), -1, np.int64)
    S = np.zeros(NS, np.int64)
    S[S_ROWS] = 1
    S[S_FREE] = -1
    S[S_LIVE] = 1
    S[S_PPB] = ppb
    S[S_CAP] = cap
    Q = np.zeros((2 * rows + 16, 3), np.int64)
    return N, T, K, H, S, Q



# ------------------------------------------------------------------------------ operations


@njit
def _edge_match(N, K, child, ids, pos, n):
    """Blocks of ``ids[pos:n]`` that ``child``'s edge holds, from its first (already matched by
    the child lookup): at least 1, at most the edge's length."""
    ks = N[child, N_KSTART]
    kl = N[child, N_KLEN]
    m = 1
    while m < kl and pos + m < n and K[ks + m] == ids[pos + m]:
        m += 1
    return m


@njit
def _walk(N, T, K, H, S, Q, ids, n, now):
    """Follow ``ids[:n]`` from the root, touching the nodes passed; a match that ends inside a
    node splits it there.  Returns (blocks matched, last node)."""
    touch = S[S_TOUCH] + 1
    S[S_TOUCH] = touch
    T[ROOT] = now
    node = ROOT
    pos = 0
    while pos < n:
        child = _child(H, node, ids[pos])
        if child < 0:
            break
        _touch(N, T, S, Q, child, touch, now)
        m = _edge_match(N, K, child, ids, pos, n)
        pos += m
        if m < N[child, N_KLEN]:
            node = _split(N, T, K, H, S, child, m)
            break
        node = child
    return pos, node


@njit
def match(N, T, K, H, S, Q, ids, n, now):
    """Longest cached prefix of ``ids[:n]`` (SGLang ``RadixCache.match_prefix``).

    Returns ``(blocks, node)``: the matched blocks and the node where the match ends (the root
    when nothing matched).  Touches the nodes on the path (time ``now``); a match ending inside a
    node splits it, so ``node`` ends exactly there.  ``n`` is the caller's cap (see the module
    docstring: one token short of the sequence).
    """
    if n <= 0:
        return 0, ROOT
    return _walk(N, T, K, H, S, Q, ids, n, now)


@njit
def peek(N, T, K, H, S, Q, ids, n):
    """Blocks of ``ids[:n]`` that ``match`` would find, without touching or splitting anything
    (for a router or a scheduling policy that only compares)."""
    node = ROOT
    pos = 0
    while pos < n:
        child = _child(H, node, ids[pos])
        if child < 0:
            break
        m = _edge_match(N, K, child, ids, pos, n)
        pos += m
        if m < N[child, N_KLEN]:
            break
        node = child
    return pos


@njit
def lock(N, T, K, H, S, Q, node):
    """Lock ``node`` and its ancestors (SGLang ``inc_lock_ref``); returns the blocks that stopped
    being evictable."""
    delta = 0
    while node != ROOT:
        if N[node, N_LOCK] == 0:
            delta += N[node, N_KLEN]
        N[node, N_LOCK] += 1
        node = N[node, N_PARENT]
    S[S_EVICTABLE] -= delta
    return delta


@njit
def unlock(N, T, K, H, S, Q, node):
    """Undo one ``lock`` of ``node`` (SGLang ``dec_lock_ref``); returns the blocks that became
    evictable."""
    delta = 0
    while node != ROOT:
        if N[node, N_LOCK] <= 0:
            raise ValueError("radix cache: unlock of a node that is not locked")
        N[node, N_LOCK] -= 1
        if N[node, N_LOCK] == 0:
            delta += N[node, N_KLEN]
            if N[node, N_NCHILD] == 0:
                _q_push(N, S, Q, node)
        node = N[node, N_PARENT]
    S[S_EVICTABLE] += delta
    return delta


@njit
def insert(N, T, K, H, S, Q, ids, n, now):
    """Cache the blocks ``ids[:n]`` (SGLang ``RadixCache.insert``).

    Returns ``(prefix, node)``: the blocks that were already cached (the caller frees its own
    copies of those it computed itself) and the node ending exactly at block ``n`` (lock it to
    keep the blocks).  The ``n - prefix`` new blocks form one new unlocked leaf, touched at
    ``now``.  Raises when they would exceed the capacity (evict first).
    """
    if n <= 0:
        return 0, ROOT
    pos, node = _walk(N, T, K, H, S, Q, ids, n, now)
    new = n - pos
    if new > 0:
        if S[S_CACHED] + new > S[S_CAP]:
            raise ValueError("radix cache: insert beyond its capacity (evict first)")
        if S[S_KTOP] + new > K.shape[0]:
            _compact(N, K, S)
        leaf = _new_row(N, S)
        ks = S[S_KTOP]
        for j in range(new):
            K[ks + j] = ids[pos + j]
        S[S_KTOP] = ks + new
        N[leaf, N_PARENT] = node
        N[leaf, N_KSTART] = ks
        N[leaf, N_KLEN] = new
        N[leaf, N_LOCK] = 0
        N[leaf, N_NCHILD] = 0
        N[leaf, N_TOUCH] = S[S_TOUCH]
        N[leaf, N_DEPTH] = N[node, N_DEPTH] + new
        T[leaf] = now
        N[node, N_NCHILD] += 1
        _set_child(H, node, ids[pos], leaf)
        S[S_CACHED] += new
        S[S_EVICTABLE] += new
        S[S_INSERTED] += new
        _q_push(N, S, Q, leaf)
        node = leaf
    return pos, node


@njit
def evict(N, T, K, H, S, Q, need_pages):
    """Free at least ``need_pages`` pages by removing least recently used unlocked leaves
    (SGLang ``RadixCache.evict`` with the LRU strategy); returns the pages freed.

    Whole nodes go, so more than asked may be freed; less when only locked nodes are left.  A
    parent that becomes an unlocked leaf joins the candidates.
    """
    ppb = S[S_PPB]
    freed = 0
    while freed * ppb < need_pages and S[S_QSIZE] > 0:
        x, ver = _q_pop(Q, S)
        if N[x, N_VER] != ver or not _evictable_leaf(N, x):
            continue                                  # stale: used, locked or gone since
        p = N[x, N_PARENT]
        kl = N[x, N_KLEN]
        _del_child(H, p, K[N[x, N_KSTART]])
        N[p, N_NCHILD] -= 1
        S[S_CACHED] -= kl
        S[S_EVICTABLE] -= kl
        S[S_EVICTED] += kl
        freed += kl
        _free_row(N, S, x)
        if _evictable_leaf(N, p):
            _q_push(N, S, Q, p)
    return freed * ppb


@njit
def cached_pages(S):
    """KV pages the cache holds (locked or not)."""
    return S[S_CACHED] * S[S_PPB]


@njit
def evictable_pages(S):
    """KV pages in unlocked nodes (SGLang ``evictable_size``)."""
    return S[S_EVICTABLE] * S[S_PPB]


@njit
def protected_pages(S):
    """KV pages in locked nodes (SGLang ``protected_size``)."""
    return (S[S_CACHED] - S[S_EVICTABLE]) * S[S_PPB]


@njit
def node_blocks(N, node):
    """Blocks from the root to the end of ``node`` (0 for the root)."""
    return N[node, N_DEPTH]


# ------------------------------------------------------------------------------ checks (Python)


def path_ids(state, node: int) -> list[int]:
    """The block ids from the root to the end of ``node`` (for tests and debugging)."""
    N, _, K, _, _, _ = state
    parts = []
    while node != ROOT:
        ks, kl = int(N[node, N_KSTART]), int(N[node, N_KLEN])
        parts.append(K[ks:ks + kl].tolist())
        node = int(N[node, N_PARENT])
    return [x for part in reversed(parts) for x in part]


def check_state(state) -> list[str]:
    """Every broken invariant of a cache state, in words (empty when all hold).

    Checked: the live rows form one tree under the root; child counts, depths and the children
    table agree with the parents; siblings start with different blocks; the lock count of a node
    is at least its children's; ``S_CACHED`` and ``S_EVICTABLE`` equal the sums over the nodes;
    the cache is within its capacity; node keys lie below the arena top; the candidate heap is
    a heap and holds a current entry for every unlocked leaf.
    """
    N, T, K, H, S, Q = state
    out: list[str] = []
    rows = int(S[S_ROWS])
    live = [r for r in range(rows) if N[r, N_PARENT] != FREE_ROW]
    if int(S[S_LIVE]) != len(live):
        out.append(f"S_LIVE {int(S[S_LIVE])} != {len(live)} live rows")
    children: dict[int, list[int]] = {r: [] for r in live}
    cached = evictable = 0
    for r in live:
        if r == ROOT:
            continue
        p = int(N[r, N_PARENT])
        if p not in children:
            out.append(f"node {r}: parent {p} is not a live node")
            continue
        children[p].append(r)
        kl = int(N[r, N_KLEN])
        if kl < 1:
            out.append(f"node {r}: {kl} blocks")
        if int(N[r, N_KSTART]) + kl > int(S[S_KTOP]):
            out.append(f"node {r}: blocks beyond the arena top")
        if int(N[r, N_DEPTH]) != int(N[p, N_DEPTH]) + kl:
            out.append(f"node {r}: depth {int(N[r, N_DEPTH])} != parent's + {kl}")
        if int(N[r, N_LOCK]) > int(N[p, N_LOCK]) and p != ROOT:
            out.append(f"node {r}: lock {int(N[r, N_LOCK])} > parent's {int(N[p, N_LOCK])}")
        cached += kl
        if int(N[r, N_LOCK]) == 0:
            evictable += kl
        first = int(K[N[r, N_KSTART]])
        s = _find(H, p, first)
        if int(H[s, 2]) != r:
            out.append(f"node {r}: the children table maps ({p}, {first}) to {int(H[s, 2])}")
    for r, ch in children.items():
        if int(N[r, N_NCHILD]) != len(ch):
            out.append(f"node {r}: N_NCHILD {int(N[r, N_NCHILD])} != {len(ch)} children")
        firsts = [int(K[N[c, N_KSTART]]) for c in ch]
        if len(set(firsts)) != len(firsts):
            out.append(f"node {r}: children start with the same block")
    entries = int(np.count_nonzero(H[:, 2] >= 0))
    if entries != len(live) - 1:
        out.append(f"children table holds {entries} entries for {len(live) - 1} nodes")
    if int(S[S_CACHED]) != cached:
        out.append(f"S_CACHED {int(S[S_CACHED])} != {cached} blocks in the tree")
    if int(S[S_EVICTABLE]) != evictable:
        out.append(f"S_EVICTABLE {int(S[S_EVICTABLE])} != {evictable} unlocked blocks")
    if cached > int(S[S_CAP]):
        out.append(f"{cached} blocks cached beyond the capacity {int(S[S_CAP])}")
    size = int(S[S_QSIZE])
    for i in range(1, size):
        if _q_less(Q, i, (i - 1) // 2):
            out.append(f"candidate heap: entry {i} is older than its parent")
            break
    current = {(int(Q[i, 1]), int(Q[i, 2])) for i in range(size)}
    for r in live:
        if _evictable_leaf(N, r) and (r, int(N[r, N_VER])) not in current:
            out.append(f"node {r}: an unlocked leaf with no current eviction candidate entry")
        if _evictable_leaf(N, r) and any(int(Q[i, 1]) == r and int(Q[i, 2]) == int(N[r, N_VER])
                                         and int(Q[i, 0]) != int(N[r, N_TOUCH])
                                         for i in range(size)):
            out.append(f"node {r}: a current candidate entry with an old touch")
    # every live node reaches the root
    for r in live:
        seen, x = 0, r
        while x != ROOT and seen <= rows:
            x, seen = int(N[x, N_PARENT]), seen + 1
            if x == FREE_ROW:
                break
        if x != ROOT:
            out.append(f"node {r} does not reach the root")
    return out
