"""The waiting queue of one replica: arrivals in a ring buffer, retracted requests in another.

FCFS by entry into the waiting queue (arrivals at their arrival time, retracted requests at
their retraction), and SGLang's longest-prefix-match order when the prefix cache is on.
"""

from __future__ import annotations

from backends.jit import njit

from simulator import cache_ops as X
from simulator.layout import *  # noqa: F401,F403  (the state layout's column names)


# ---------------------------------------------------------------- waiting queue (ring buffer)
@njit
def queue_push_back(Q, E, r, i):
    cap = Q.shape[1]
    Q[r, (E[r, E_QHEAD] + E[r, E_QLEN]) % cap] = i
    E[r, E_QLEN] += 1


@njit
def _queue_pop(Q, E, r):
    cap = Q.shape[1]
    i = Q[r, E[r, E_QHEAD]]
    E[r, E_QHEAD] = (E[r, E_QHEAD] + 1) % cap
    E[r, E_QLEN] -= 1
    return i


@njit
def _requeue(W, WT, E, r, i, t):
    """Append a retracted request to the waiting queue at time t (SGLang appends retracted
    requests to its waiting queue; with FCFS it keeps them in entry order)."""
    cap = W.shape[1]
    k = (E[r, E_WHEAD] + E[r, E_WLEN]) % cap
    W[r, k] = i
    WT[r, k] = t
    E[r, E_WLEN] += 1


@njit
def _waiting_head(r, clock, arrival, Q, W, WT, E):
    """The waiting request admitted next, FCFS by entry into the waiting queue: arrivals enter at
    their arrival time, retracted requests at their retraction (arrivals first on ties).  Returns
    (request, from_retracted) or (-1, False) when nothing has arrived."""
    q = -1
    if E[r, E_QLEN] > 0:
        q = Q[r, E[r, E_QHEAD]]
        if arrival[q] > clock:
            q = -1
    if E[r, E_WLEN] > 0:
        w = W[r, E[r, E_WHEAD]]
        if q < 0 or WT[r, E[r, E_WHEAD]] < arrival[q]:
            return w, True
    return q, False


@njit
def _waiting_pop(r, from_retracted, Q, W, E):
    if from_retracted:
        cap = W.shape[1]
        E[r, E_WHEAD] = (E[r, E_WHEAD] + 1) % cap
        E[r, E_WLEN] -= 1
    else:
        _queue_pop(Q, E, r)


@njit
def _ring_offset(A, r, h, i):
    """How far entry ``i`` stands from the head ``h`` of ring buffer ``A[r]`` (it must be there)."""
    cap = A.shape[1]
    m = 0
    while A[r, (h + m) % cap] != i:
        m += 1
    return m


@njit
def _ring_shift(A, r, h, m):
    """Move the first ``m`` entries of ring buffer ``A[r]`` (head ``h``) back by one slot."""
    cap = A.shape[1]
    for t in range(m, 0, -1):
        A[r, (h + t) % cap] = A[r, (h + t - 1) % cap]


@njit
def _waiting_remove(r, i, from_retracted, Q, W, WT, E):
    """Take request i out of the waiting queue wherever it stands (``lpm`` admits out of
    order): the entries before it move back by one."""
    if from_retracted:
        h = E[r, E_WHEAD]
        m = _ring_offset(W, r, h, i)
        _ring_shift(W, r, h, m)
        _ring_shift(WT, r, h, m)
        E[r, E_WHEAD] = (h + 1) % W.shape[1]
        E[r, E_WLEN] -= 1
    else:
        h = E[r, E_QHEAD]
        _ring_shift(Q, r, h, _ring_offset(Q, r, h, i))
        E[r, E_QHEAD] = (h + 1) % Q.shape[1]
        E[r, E_QLEN] -= 1


@njit
def _lpm_order(r, clock, R, E, Q, W, WT, arrival, prompt, poff, pids, block, rx, cand):
    """SGLang's ``lpm``: the waiting requests (arrived, in entry order) sorted stably by the
    length of their cached prefix, longest first, into ``cand[:, 0]`` (request) and
    ``cand[:, 1]`` (1: from the retracted queue); returns how many, or -1 when more than
    ``LPM_QUEUE_LIMIT`` wait (SGLang then falls back to FCFS)."""
    limit = cand.shape[0] - 1
    qcap = Q.shape[1]
    wcap = W.shape[1]
    qpos = 0
    wpos = 0
    cnt = 0
    while True:
        q = -1
        if qpos < E[r, E_QLEN]:
            q = Q[r, (E[r, E_QHEAD] + qpos) % qcap]
            if arrival[q] > clock:
                q = -1
        if wpos < E[r, E_WLEN]:
            k = (E[r, E_WHEAD] + wpos) % wcap
            if q < 0 or WT[r, k] < arrival[q]:
                q = W[r, k]
                wpos += 1
                if cnt >= limit:
                    return -1
                cand[cnt, 0] = q
                cand[cnt, 1] = 1
                cnt += 1
                continue
        if q < 0:
            break
        qpos += 1
        if cnt >= limit:
            return -1
        cand[cnt, 0] = q
        cand[cnt, 1] = 0
        cnt += 1
    for j in range(cnt):
        i = cand[j, 0]
        nm = X.match_blocks(i, prompt[i], R[i, R_GEN], poff, block)
        cand[j, 2] = X.peek(rx, r, i, nm, poff, pids)
    for a in range(1, cnt):  # insertion sort: stable, longest prefix first
        b = a
        while b > 0 and cand[b - 1, 2] < cand[b, 2]:
            for f in range(3):
                t = cand[b - 1, f]
                cand[b - 1, f] = cand[b, f]
                cand[b, f] = t
            b -= 1
    return cnt

