"""The storage under ``simulator.radix``: node-table layout, children table, candidate heap.

Compiled helpers (``backends.jit.njit``) over the cache state ``(N, T, K, H, S, Q)`` that
``simulator.radix`` documents: the column and scalar indices, the open-addressing hash table of
children keyed by (parent, first block id) with linear probing and backward-shift deletion, the
binary min-heap of eviction candidates (touch, node, version) kept across calls, and node rows
(allocation, access, split, arena compaction).  Nothing here is called from outside the cache.
"""

from __future__ import annotations

import numpy as np

from backends.jit import njit

ROOT = 0

# node table N[row, :]
N_PARENT = 0
N_KSTART = 1
N_KLEN = 2
N_LOCK = 3
N_NCHILD = 4
N_TOUCH = 5
N_DEPTH = 6
N_NEXT = 7
N_VER = 8
NN = 9

FREE_ROW = -2

# scalars S[:]
S_ROWS = 0        # rows handed out so far (high-water mark)
S_FREE = 1        # head of the free-row list, -1 when empty
S_LIVE = 2        # live nodes, root included
S_KTOP = 3        # next free position of the arena K
S_CACHED = 4      # blocks in the tree
S_EVICTABLE = 5   # blocks in nodes with lock count 0
S_TOUCH = 6       # operation counter
S_PPB = 7         # KV pages per block
S_CAP = 8         # capacity in blocks
S_INSERTED = 9    # blocks inserted, cumulative
S_EVICTED = 10    # blocks evicted, cumulative
S_QSIZE = 11      # entries in the candidate heap Q
NS = 12

MASK32 = 0xFFFFFFFF


# ------------------------------------------------------------------------------ hash table


@njit
def _mix32(x):
    x = (((x >> 16) ^ x) * 0x45D9F3B) & MASK32
    x = (((x >> 16) ^ x) * 0x45D9F3B) & MASK32
    return (x >> 16) ^ x


@njit
def _home(parent, bid, mask):
    h = _mix32((parent & MASK32) ^ 0x9E3779B9)
    h = _mix32(h ^ (bid & MASK32))
    h = _mix32(h ^ ((bid >> 32) & MASK32))
    return h & mask


@njit
def _find(H, parent, bid):
    """The slot holding (parent, bid), or the empty slot where it would go."""
    mask = H.shape[0] - 1
    s = _home(parent, bid, mask)
    while H[s, 2] >= 0 and not (H[s, 0] == parent and H[s, 1] == bid):
        s = (s + 1) & mask
    return s


@njit
def _child(H, parent, bid):
    return H[_find(H, parent, bid), 2]


@njit
def _set_child(H, parent, bid, child):
    s = _find(H, parent, bid)
    H[s, 0] = parent
    H[s, 1] = bid
    H[s, 2] = child


@njit
def _del_child(H, parent, bid):
    """Remove (parent, bid), shifting later entries of its probe run back (linear probing)."""
    mask = H.shape[0] - 1
    i = _find(H, parent, bid)
    if H[i, 2] < 0:
        return
    H[i, 2] = -1
    j = i
    while True:
        j = (j + 1) & mask
        if H[j, 2] < 0:
            return
        k = _home(H[j, 0], H[j, 1], mask)
        # the entry at j may stay when its home lies cyclically in (i, j]
        if (i <= j and i < k <= j) or (i > j and (k > i or k <= j)):
            continue
        H[i, 0] = H[j, 0]
        H[i, 1] = H[j, 1]
        H[i, 2] = H[j, 2]
        H[j, 2] = -1
        i = j


# ------------------------------------------------------------------------------ candidate heap


@njit
def _q_less(Q, a, b):
    """Whether heap entry ``a`` is used less recently than ``b`` (touch, then row)."""
    if Q[a, 0] != Q[b, 0]:
        return Q[a, 0] < Q[b, 0]
    return Q[a, 1] < Q[b, 1]


@njit
def _q_swap(Q, a, b):
    for c in range(3):
        Q[a, c], Q[b, c] = Q[b, c], Q[a, c]


@njit
def _q_add(Q, S, touch, node, ver):
    i = S[S_QSIZE]
    S[S_QSIZE] = i + 1
    Q[i, 0] = touch
    Q[i, 1] = node
    Q[i, 2] = ver
    while i > 0:
        p = (i - 1) // 2
        if not _q_less(Q, i, p):
            break
        _q_swap(Q, i, p)
        i = p


@njit
def _evictable_leaf(N, r):
    return N[r, N_PARENT] != FREE_ROW and r != ROOT and N[r, N_LOCK] == 0 and N[r, N_NCHILD] == 0


@njit
def _q_rebuild(N, S, Q):
    """Drop every entry and add one per unlocked leaf (when the heap is full of stale ones)."""
    S[S_QSIZE] = 0
    for r in range(1, S[S_ROWS]):
        if _evictable_leaf(N, r):
            _q_add(Q, S, N[r, N_TOUCH], r, N[r, N_VER])


@njit
def _q_push(N, S, Q, r):
    """Make ``r`` (an unlocked leaf) a candidate under its current order key."""
    if S[S_QSIZE] >= Q.shape[0]:
        _q_rebuild(N, S, Q)         # adds r too
    else:
        _q_add(Q, S, N[r, N_TOUCH], r, N[r, N_VER])


@njit
def _q_pop(Q, S):
    """Remove the least recently used entry; returns (node, version)."""
    node = Q[0, 1]
    ver = Q[0, 2]
    size = S[S_QSIZE] - 1
    S[S_QSIZE] = size
    for c in range(3):
        Q[0, c] = Q[size, c]
    i = 0
    while True:
        left = 2 * i + 1
        if left >= size:
            break
        c = left
        if left + 1 < size and _q_less(Q, left + 1, left):
            c = left + 1
        if not _q_less(Q, c, i):
            break
        _q_swap(Q, c, i)
        i = c
    return node, ver


# ------------------------------------------------------------------------------ nodes


@njit
def _new_row(N, S):
    r = S[S_FREE]
    if r >= 0:
        S[S_FREE] = N[r, N_NEXT]
    else:
        r = S[S_ROWS]
        if r >= N.shape[0]:
            raise ValueError("radix cache: out of node rows (more blocks than its capacity)")
        S[S_ROWS] = r + 1
    S[S_LIVE] += 1
    N[r, N_NEXT] = -1
    N[r, N_VER] += 1
    return r


@njit
def _free_row(N, S, r):
    N[r, N_PARENT] = FREE_ROW
    N[r, N_KLEN] = 0
    N[r, N_LOCK] = 0
    N[r, N_NCHILD] = 0
    N[r, N_VER] += 1
    N[r, N_NEXT] = S[S_FREE]
    S[S_FREE] = r
    S[S_LIVE] -= 1


@njit
def _touch(N, T, S, Q, r, touch, now):
    T[r] = now
    if N[r, N_TOUCH] != touch:
        N[r, N_TOUCH] = touch
        N[r, N_VER] += 1
        if _evictable_leaf(N, r):
            _q_push(N, S, Q, r)


@njit
def _split(N, T, K, H, S, child, m):
    """Split ``child`` after its first ``m`` blocks; return the new upper node
    (SGLang ``RadixCache._split_node``: the upper part keeps the lock count and access time)."""
    top = _new_row(N, S)
    p = N[child, N_PARENT]
    ks = N[child, N_KSTART]
    N[top, N_PARENT] = p
    N[top, N_KSTART] = ks
    N[top, N_KLEN] = m
    N[top, N_LOCK] = N[child, N_LOCK]
    N[top, N_NCHILD] = 1
    N[top, N_TOUCH] = N[child, N_TOUCH]
    N[top, N_DEPTH] = N[p, N_DEPTH] + m
    T[top] = T[child]
    N[child, N_PARENT] = top
    N[child, N_KSTART] = ks + m
    N[child, N_KLEN] -= m
    _set_child(H, p, K[ks], top)
    _set_child(H, top, K[ks + m], child)
    return top


@njit(_nrt=True)
def _compact(N, K, S):
    """Move the live nodes' block ids to the front of the arena, in arena order."""
    rows = S[S_ROWS]
    live = np.empty(rows, np.int64)
    starts = np.empty(rows, np.int64)
    c = 0
    for r in range(1, rows):
        if N[r, N_PARENT] != FREE_ROW:
            live[c] = r
            starts[c] = N[r, N_KSTART]
            c += 1
    order = np.argsort(starts[:c])
    top = 0
    for q in range(c):
        r = live[order[q]]
        src = N[r, N_KSTART]
        for j in range(N[r, N_KLEN]):          # dst <= src: a forward copy is safe
            K[top + j] = K[src + j]
        N[r, N_KSTART] = top
        top += N[r, N_KLEN]
    S[S_KTOP] = top
