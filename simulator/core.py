"""The engine's compiled core: one replica's iterations over array state.

Everything here is a plain function over NumPy arrays and scalars, compiled with numba when it
is available (``backends.jit.njit``) and run as plain Python otherwise, with identical results.
The SimPy layer (:mod:`simulator.engine`) owns time and events; this module owns what one
replica does between two external events: decide an iteration (which forward passes, which
requests, which widths), time it (from a latency table, or by handing the passes back to a live
executor), and apply it when it ends (acceptance, KV pages, finished requests).

Semantics follow SGLang's scheduler with speculative decoding (chain drafting, top-k 1):

* Prefill first.  Waiting requests are admitted FCFS (strictly: the head blocks the rest)
  while the paged KV cache has room for their whole context plus a growth reserve for every
  running request; a prefill pass holds at most ``chunked_prefill_size`` tokens and the last
  request of a pass may be chunked, continuing in the next pass (SGLang ``chunked_req``).
  With a radix prefix cache (``simulator.cache_ops``; the trace's prefix block ids) a request
  matches and locks its cached prefix at admission, needs pages and prefill only for the rest,
  and inserts its prompt blocks after each prefill pass; unlocked cached pages count as room
  and are evicted (least recently used first) when the pool needs pages.  ``lpm`` orders the
  waiting requests by cached prefix instead of FCFS.
  Every completed prefill emits one token (the first token, or the next one after a
  retraction, as SGLang's re-prefill does).
* Otherwise a decode iteration over the running requests: a draft phase (as many draft-model
  passes as the longest draft), then the verify launches the policy makes.
* Before a decode iteration every running request needs KV slots for its context plus its
  verify width; if the pool cannot hold them, requests are retracted the way SGLang does with
  speculative decoding (from the back of the batch: the most recently admitted first), their
  pages freed, and they rejoin the end of the waiting queue, to be prefilled again over
  prompt + generated tokens.  The waiting queue is FCFS by entry: arrivals enter at their
  arrival time, retracted requests when they are retracted (SGLang's FCFS never reorders it).

A scheduling decision reads only what a real scheduler knows: the proposed draft counts and
history.  The recorded acceptance of a step (``acc``) is read only in :func:`_apply_decode`,
after the step's latency has been fixed, and by the ``oracle`` controller
(:func:`_choose_by_cost`), a labelled upper bound.  A speculation controller
(:mod:`simulator.controllers`) sets each decode round's width before the round
(:func:`_round_width`) and learns its acceptance after it ends (:func:`_apply_pending`).

The state layout (the columns of every state array) is :mod:`simulator.layout`, the verify
policies and the acceptance rule :mod:`simulator.policies`, the waiting queue
:mod:`simulator.waiting`; this module re-exports their names, so ``core.X`` reaches them all.
"""

from __future__ import annotations

import numpy as np

from backends.jit import njit
from backends.latency_table import (ATT_ON, attention_params, attention_rows, effective_kv,
                                    interp2, interp3, interp_prefill)
from simulator import cache_ops as X
from simulator import controllers as K
from simulator.sglang import LPM_QUEUE_LIMIT
from simulator.layout import *  # noqa: F401,F403  (the state layout, re-exported)
from simulator.layout import pages_for  # noqa: F401
from simulator.policies import (_distinct_sorted, _mix32, accepted_at_step,  # noqa: F401
                                accepted_under_width, apply_policy, misattributed_rows,
                                uniform_draw)
from simulator.waiting import (_lpm_order, _queue_pop, _requeue, _waiting_head,  # noqa: F401
                               _waiting_pop, _waiting_remove, queue_push_back)


# ---------------------------------------------------------------- deciding
@njit
def _mark_kv_used(r, E, PI):
    """Record the pages in use by the decided passes; the pool must never be overdrawn."""
    if E[r, E_FREE] < 0:
        raise RuntimeError("specsched engine bug: KV pages allocated beyond capacity")
    for p in range(E[r, E_NPASS]):
        PI[r, p, P_KVUSED] = E[r, E_CAP] - E[r, E_FREE]
        PI[r, p, P_KVCACHED] = E[r, E_CACHED]


@njit
def _proposal(i, R, off, draft, maxdraft):
    k = R[i, R_STEPK]
    ns = off[i + 1] - off[i]
    if ns == 0:
        return np.int64(0)
    d = np.int64(draft[off[i] + k % ns])
    if maxdraft > 0 and d > maxdraft:
        d = maxdraft
    return d


@njit
def _verify_need_pages(r, n, MB, R, page):
    need = 0
    for j in range(n):
        i = MB[r, j, M_REQ]
        need += pages_for(R[i, R_KV] + MB[r, j, M_V], page) - R[i, R_PAGES]
    return need


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


@njit
def _fill_members(r, R, E, RUN, MB, off, draft, CI):
    n = E[r, E_NRUN]
    for j in range(n):
        i = RUN[r, j]
        MB[r, j, M_REQ] = i
        MB[r, j, M_D] = _proposal(i, R, off, draft, CI[C_MAXDRAFT])
        MB[r, j, M_KV] = R[i, R_KV]
    return n


@njit
def _decode_mem_ok(r, n, R, E, RUN, CI, rx):
    """SGLang's ``check_decode_mem``: the pool has the pages that the next decode may need, each
    running request growing by ``C_DECODE_RESERVE`` tokens past its KV (with speculative decoding
    ``2 * max(num_steps * topk, num_draft_tokens)``; one token without)."""
    page = CI[C_PAGE]
    need = 0
    for j in range(n):
        i = RUN[r, j]
        need += pages_for(R[i, R_KV] + CI[C_DECODE_RESERVE], page) - R[i, R_PAGES]
    if need > E[r, E_FREE]:
        _evict_for(r, need, E, rx)
    return E[r, E_FREE] >= need


@njit
def _retract_victim(r, n, R, RUN, prompt):
    """The request SGLang's ``retract_decode`` retracts next: the fewest output tokens, the longest
    prompt among those, and the latest in the batch on a full tie."""
    best = RUN[r, n - 1]
    for j in range(n - 1, -1, -1):
        i = RUN[r, j]
        if R[i, R_GEN] < R[best, R_GEN] or (R[i, R_GEN] == R[best, R_GEN]
                                            and prompt[i] > prompt[best]):
            best = i
    return best


@njit
def _update_running(r, clock, R, E, EF, W, WT, RUN, prompt, mnt, CI, CF, rx):
    """SGLang's ``update_running_batch`` before a decode: when ``check_decode_mem`` fails, retract
    (at least one request, until it passes or one is left) and re-estimate ``new_token_ratio``
    as ``min(1, (decoded + RETRACT_DECODE_STEPS x running) / (sum of max_new_tokens + 1))``; else
    decay the ratio towards its minimum."""
    n = E[r, E_NRUN]
    if _decode_mem_ok(r, n, R, E, RUN, CI, rx):
        EF[r, EF_RATIO] = max(EF[r, EF_RATIO] - CF[CF_RATIO_DECAY], CF[CF_RATIO_MIN])
        return
    first = True
    while first or not _decode_mem_ok(r, E[r, E_NRUN], R, E, RUN, CI, rx):
        n = E[r, E_NRUN]
        if n <= 1:
            break
        first = False
        _retract(r, _retract_victim(r, n, R, RUN, prompt), clock, R, E, W, WT, RUN, rx)
    decoded = 0
    maxnew = 0
    for j in range(E[r, E_NRUN]):
        i = RUN[r, j]
        decoded += R[i, R_GEN]
        maxnew += mnt[i]
    EF[r, EF_RATIO] = min(1.0, (decoded + CI[C_RETRACT_STEPS] * E[r, E_NRUN]) / (maxnew + 1))


@njit
def _round_width(r, R, E, EF, RUN, MB, PI, PF, off, draft, acc, pacc, output, CI, CF, padmap,
                 capw, buckets, lw, tmp, KC, KS, tab):
    """The verify width of replica r's next decode round as a controller other than static
    chooses it.  Reads what a scheduler sees (batch size and the controller's state from
    finished rounds); only the oracle reads the round's acceptance.  (The static controller,
    engine.num_draft_tokens every round, never calls this: the hot loop stays as it was.)"""
    kind = int(KC[K.K_KIND])
    n = E[r, E_NRUN]
    if kind == K.CT_GOODPUT or kind == K.CT_ORACLE:
        return _choose_by_cost(r, kind == K.CT_ORACLE, R, E, EF, RUN, MB, PI, PF, off, draft,
                               acc, pacc, output, CI, CF, padmap, capw, buckets, lw, tmp, KC,
                               KS, tab)
    bspad = padmap[n] if n <= CI[C_MAXCAPBS] else n
    return K.choose_width(r, n, bspad, CI[C_FIXED], KC, KS)


@njit
def _choose_by_cost(r, oracle, R, E, EF, RUN, MB, PI, PF, off, draft, acc, pacc, output, CI, CF,
                    padmap, capw, buckets, lw, tmp, KC, KS, tab):
    """goodput / oracle: the candidate width committing the most tokens per second of the round,
    each candidate's round built and timed from the latency table.  goodput expects
    ``(1 - a^(k+1)) / (1 - a)`` tokens per request from its acceptance estimate ``a``; the
    oracle counts the tokens the round would really commit (hindsight: an upper bound).  Ties
    go to the fewer drafts."""
    seed = CI[C_SEED]
    a = K.accept_estimate(r, KS)
    best_w = CI[C_FIXED]
    best = -1.0
    for c in range(int(KC[K.K_NCAND])):
        w = int(KC[K.K_CAND + c]) + 1
        n = _fill_members(r, R, E, RUN, MB, off, draft, CI)
        nl = apply_policy(POL_FIXED, MB[r], n, lw, tmp, buckets, w, CI[C_WIDEN], CI[C_MLA])
        _build_decode_passes(r, n, nl, E, MB, PI, PF, CI, padmap, capw, lw, tmp)
        _set_lookups(r, PI, PF, E, CF)
        _time_passes(r, PI, PF, E, tab)
        last = KS[r, K.KS_LASTW]
        EF[r, EF_SWITCH] = KC[K.K_SWITCH_COST] if (last != 0 and last != w) else 0.0
        t = iteration_time(r, E, EF, PF, CI, CF)
        tokens = 0.0
        if oracle:
            for j in range(n):
                i = MB[r, j, M_REQ]
                got = accepted_at_step(i, R[i, R_STEPK], MB[r, j, M_R], off, draft, acc, pacc,
                                       seed)
                tokens += min(got + 1, output[i] - R[i, R_GEN])
        else:
            per = float(w) if a >= 1.0 else (1.0 - a ** w) / (1.0 - a)
            tokens = n * per
        rate = tokens / t if t > 0 else tokens
        if rate > best:
            best = rate
            best_w = w
    E[r, E_TIMED] = 0
    return best_w


@njit
def _decide_decode(r, clock, width, R, E, EF, W, WT, RUN, MB, PI, PF, off, draft, prompt, CI,
                   padmap, capw, buckets, lw, tmp, KC, KS, rx):
    """A decode round at ``width`` (the controller's) over the running requests, after
    :func:`_update_running`: fit it in the KV pool, allocate its slots, build its passes."""
    page = CI[C_PAGE]
    policy = CI[C_POLICY]
    while True:
        n = _fill_members(r, R, E, RUN, MB, off, draft, CI)
        nl = apply_policy(policy, MB[r], n, lw, tmp, buckets, width, CI[C_WIDEN], CI[C_MLA])
        need = _verify_need_pages(r, n, MB, R, page)
        if need > E[r, E_FREE]:
            _evict_for(r, need, E, rx)
        if need <= E[r, E_FREE]:
            break
        if n == 1:
            # the last running request must fit: make room by undoing a chunked prefill
            # (the configuration check guarantees that one request alone always fits)
            c = E[r, E_CHUNKED]
            if c < 0:
                break
            E[r, E_CHUNKED] = -1
            _retract(r, c, clock, R, E, W, WT, RUN, rx)
            continue
        # beyond SGLang's rule (which would run out of KV slots here): retract its next victim
        E[r, E_XRETRACT] += 1
        _retract(r, _retract_victim(r, n, R, RUN, prompt), clock, R, E, W, WT, RUN, rx)
    # allocate the verify slots
    for j in range(n):
        i = MB[r, j, M_REQ]
        p = pages_for(R[i, R_KV] + MB[r, j, M_V], page)
        E[r, E_FREE] -= p - R[i, R_PAGES]
        R[i, R_PAGES] = p
    _build_decode_passes(r, n, nl, E, MB, PI, PF, CI, padmap, capw, lw, tmp)
    EF[r, EF_SWITCH] = K.note_round(r, width, KC, KS) if policy == POL_FIXED else 0.0
    E[r, E_PENDING] = 2
    _mark_kv_used(r, E, PI)


@njit
def _build_decode_passes(r, n, nl, E, MB, PI, PF, CI, padmap, capw, lw, tmp):
    """The passes of a decode round over members MB[r, :n] whose widths and launches the policy
    set: a draft row, the verify launches and the draft-extend pass."""
    policy = CI[C_POLICY]
    # iteration-level width mix (proposed widths)
    for j in range(n):
        tmp[j] = MB[r, j, M_D] + 1
    E[r, E_ITERDISTINCT] = _distinct_sorted(tmp, n, tmp[n:])
    # stable order of members by launch, so each launch is a contiguous range
    for a in range(1, n):
        b = a
        while b > 0 and MB[r, b - 1, M_LAUNCH] > MB[r, b, M_LAUNCH]:
            for f in range(NMB):
                t = MB[r, b - 1, f]
                MB[r, b - 1, f] = MB[r, b, f]
                MB[r, b, f] = t
            b -= 1
    maxcap = CI[C_MAXCAPBS]
    fixed_draft = policy == POL_FIXED and CI[C_WIDEN] == 1
    # the draft phase
    # (SGLang's EAGLE worker: the first draft token of a round comes from the previous round's
    # draft-extend, so d drafts take d - 1 draft-model decode passes)
    passes = 0
    kvsum = 0
    kvmax = 0
    extw = 0
    for j in range(n):
        dr = MB[r, j, M_R] if fixed_draft else max(MB[r, j, M_D], MB[r, j, M_R])
        passes = max(passes, dr - 1)
        kvsum += MB[r, j, M_KV]
        kvmax = max(kvmax, MB[r, j, M_KV])
        extw = max(extw, MB[r, j, M_V])
    ext_kvsum = kvsum
    ext_kvmax = kvmax
    np_ = 0
    if passes > 0:
        graph = 1 if (n <= maxcap) else 0
        PI[r, 0, P_KIND] = KIND_DRAFT
        PI[r, 0, P_MINW] = 0
        PI[r, 0, P_MAXW] = 0
        PI[r, 0, P_DISTINCT] = 0
        PI[r, 0, P_PADSLOTS] = 0
        PI[r, 0, P_VIOL] = 0
        PI[r, 0, P_MAXVW] = 1
        PI[r, 0, P_BS] = n
        PI[r, 0, P_BSPAD] = padmap[n] if graph == 1 else n
        PI[r, 0, P_WIDTH] = 1
        PI[r, 0, P_TOKENS] = n
        PI[r, 0, P_GRAPH] = graph
        PI[r, 0, P_PASSES] = passes
        PI[r, 0, P_MODE] = MODE_UNIFORM
        PI[r, 0, P_KVMAX] = kvmax
        PI[r, 0, P_MSTART] = 0
        PI[r, 0, P_MCOUNT] = n
        PF[r, 0, PF_KVSUM] = kvsum
        PF[r, 0, PF_KVMEAN] = kvsum / n
        np_ = 1
    # verify launches
    j0 = 0
    for L in range(nl):
        j1 = j0
        while j1 < n and MB[r, j1, M_LAUNCH] == L:
            j1 += 1
        bs = j1 - j0
        p = np_
        np_ += 1
        minw = 1 << 30
        maxw = 0
        maxvw = 0
        toks = 0
        pad = 0
        kvsum = 0
        kvmax = 0
        for j in range(j0, j1):
            w = MB[r, j, M_D] + 1
            minw = min(minw, w)
            maxw = max(maxw, w)
            maxvw = max(maxvw, MB[r, j, M_V])
            toks += MB[r, j, M_V]
            pad += MB[r, j, M_V] - 1 - MB[r, j, M_R]
            kvsum += MB[r, j, M_KV]
            kvmax = max(kvmax, MB[r, j, M_KV])
        for j in range(j0, j1):
            tmp[j - j0] = MB[r, j, M_D] + 1
        distinct = _distinct_sorted(tmp, bs, tmp[bs:])
        mode = MODE_UNIFORM
        if policy == POL_RAGGED:
            mode = MODE_RAGGED
        elif policy == POL_UNSAFE:
            mode = MODE_UNSAFE
        width = lw[L] if mode == MODE_UNIFORM else toks // bs
        gw = width if mode == MODE_UNIFORM else maxvw
        graph = 1 if (bs <= maxcap and gw < capw.shape[0] and capw[gw]) else 0
        viol = 0
        if mode == MODE_UNSAFE:
            for j in range(j0, j1):
                tmp[j - j0] = MB[r, j, M_V]
            viol = misattributed_rows(tmp, bs)
        PI[r, p, P_KIND] = KIND_VERIFY
        PI[r, p, P_BS] = bs
        PI[r, p, P_BSPAD] = padmap[bs] if graph == 1 else bs
        PI[r, p, P_WIDTH] = width
        PI[r, p, P_MINW] = minw
        PI[r, p, P_MAXW] = maxw
        PI[r, p, P_DISTINCT] = distinct
        PI[r, p, P_TOKENS] = toks
        PI[r, p, P_PADSLOTS] = pad
        PI[r, p, P_GRAPH] = graph
        PI[r, p, P_PASSES] = 1
        PI[r, p, P_MODE] = mode
        PI[r, p, P_VIOL] = viol
        PI[r, p, P_KVMAX] = kvmax
        PI[r, p, P_MSTART] = j0
        PI[r, p, P_MCOUNT] = bs
        PI[r, p, P_MAXVW] = maxvw
        PF[r, p, PF_KVSUM] = kvsum
        PF[r, p, PF_KVMEAN] = kvsum / bs
        j0 = j1
    # the draft-extend pass: the draft model over each request's accepted tokens + 1, every
    # request padded to the round's verify width (SGLang's draft-extend graph pads to
    # num_steps + 1 tokens per request); none without speculation
    if extw > 1 and CI[C_SPEC] == 1:
        p = np_
        np_ += 1
        graph = 1 if (n <= maxcap and extw < capw.shape[0] and capw[extw]) else 0
        PI[r, p, P_KIND] = KIND_EXTEND
        PI[r, p, P_BS] = n
        PI[r, p, P_BSPAD] = padmap[n] if graph == 1 else n
        PI[r, p, P_WIDTH] = extw
        PI[r, p, P_MINW] = 0
        PI[r, p, P_MAXW] = 0
        PI[r, p, P_DISTINCT] = 0
        PI[r, p, P_TOKENS] = n * extw
        PI[r, p, P_PADSLOTS] = 0
        PI[r, p, P_GRAPH] = graph
        PI[r, p, P_PASSES] = 1
        PI[r, p, P_MODE] = MODE_UNIFORM
        PI[r, p, P_VIOL] = 0
        PI[r, p, P_KVMAX] = ext_kvmax
        PI[r, p, P_MSTART] = 0
        PI[r, p, P_MCOUNT] = n
        PI[r, p, P_MAXVW] = extw
        PF[r, p, PF_KVSUM] = ext_kvsum
        PF[r, p, PF_KVMEAN] = ext_kvsum / n
    E[r, E_NPASS] = np_
    E[r, E_NMEM] = n


@njit
def _wants_prefill(r, clock, arrival, Q, E):
    """Whether anything could be prefilled now: a chunked prefill to continue, a retracted
    request, or an arrived one (else :func:`_decide_prefill` would find nothing; skipping it
    keeps decode-only iterations cheap)."""
    if E[r, E_CHUNKED] >= 0 or E[r, E_WLEN] > 0:
        return True
    return E[r, E_QLEN] > 0 and arrival[Q[r, E[r, E_QHEAD]]] <= clock


@njit
def _decide_prefill(r, clock, R, RF, E, EF, Q, W, WT, RUN, MB, PI, PF, arrival, prompt, mnt, CI,
                    poff, pids, rx, cand):
    """Build a prefill pass if anything can be prefilled now; returns whether one was built.

    Admission follows SGLang's ``PrefillAdder``: the pool's free tokens plus the radix cache's
    evictable tokens, less every running request's remaining ``min(max_new_tokens - output,
    CLIP) * new_token_ratio``, must exceed a new request's extend tokens (those past its cached
    prefix) plus its remaining ``min(max_new_tokens, CLIP)``; each admitted request then counts
    its paged extend tokens and ``min(max_new_tokens, CLIP)``; a pass holds at most
    ``chunked_prefill_size`` (and ``max_prefill_tokens``) tokens, the last request chunked at a
    page boundary.  The queue is strictly FCFS (or, with ``lpm``, longest cached prefix first
    while at most ``LPM_QUEUE_LIMIT`` requests wait): the first request that does not fit stops
    it.  A request matches and locks its cached prefix first (released again if it does not
    fit); KV pages are allocated for the tokens each pass computes, evicting unlocked cache
    leaves when the free pages fall short.
    """
    page = CI[C_PAGE]
    clip = CI[C_CLIP]
    block = CI[C_BLOCK]
    ppb = CI[C_PPB]
    radix_on = CI[C_RADIX] == 1
    ratio = EF[r, EF_RATIO]
    rem_chunk = CI[C_CHUNK]
    rem_input = CI[C_MAXPREFILL]
    nmem = 0
    tokens = 0
    wprefix = 0.0
    pairs = 0.0
    kvmax = 0
    nrun = E[r, E_NRUN]
    offset = 0.0
    alloc = 0      # pages allocated by this decision (SGLang allocates after the adder loop)
    for j in range(nrun):
        i = RUN[r, j]
        offset += min(mnt[i] - R[i, R_GEN], clip) * ratio
    avail = float((E[r, E_FREE] + X.evictable_pages(rx, r)) * page)
    # continue a chunked prefill first (SGLang add_chunked_req)
    c = E[r, E_CHUNKED]
    if c >= 0:
        left = R[c, R_PTARGET] - R[c, R_PDONE]
        take = min(left, rem_chunk, int(avail - offset))
        if take > 0:
            truncated = take < left
            if truncated:
                take = take // page * page
            grow = pages_for(R[c, R_PDONE] + take, page) - R[c, R_PAGES]
            _evict_for(r, grow, E, rx)
            if take > 0 and grow <= E[r, E_FREE]:
                E[r, E_FREE] -= grow
                alloc += grow
                R[c, R_PAGES] += grow
                MB[r, 0, M_REQ] = c
                MB[r, 0, M_TOK] = take
                MB[r, 0, M_KV] = R[c, R_PDONE]
                nmem = 1
                tokens += take
                wprefix += take * R[c, R_PDONE]
                pairs += take * (R[c, R_PDONE] + take / 2.0)
                kvmax = R[c, R_PDONE]
                ptake = pages_for(take, page) * page
                offset += ptake + page + (0 if truncated else min(mnt[c], clip))
                rem_chunk -= ptake
                rem_input -= ptake
                if truncated:
                    rem_chunk = 0
        if nmem == 0:
            rem_chunk = 0  # the chunked request waits for room; nothing overtakes it
    # lpm: the waiting requests, longest cached prefix first (SGLang calc_priority)
    ncand = -1
    if CI[C_LPM] == 1 and rem_chunk > 0:
        ncand = _lpm_order(r, clock, R, E, Q, W, WT, arrival, prompt, poff, pids, block, rx, cand)
    k = 0
    while (rem_chunk > 0 and rem_input > 0 and avail - offset > 0
           and nrun + nmem < CI[C_MAXRUN]):
        if ncand >= 0:
            if k >= ncand:
                break
            i = cand[k, 0]
            from_retracted = cand[k, 1] == 1
            k += 1
        else:
            i, from_retracted = _waiting_head(r, clock, arrival, Q, W, WT, E)
            if i < 0:
                break
        target = prompt[i] + R[i, R_GEN]
        matched = 0
        node = 0
        if radix_on:
            nm = X.match_blocks(i, prompt[i], R[i, R_GEN], poff, block)
            matched, node = X.match_lock(rx, r, i, nm, poff, pids, clock)
            _sync_cached(r, E, rx)
        cached = matched * block
        extend = target - cached
        # SGLang's rem_total_tokens: free + evictable (the lock keeps this prefix out of it)
        avail = float((E[r, E_FREE] + alloc + X.evictable_pages(rx, r)) * page)
        total = extend + min(max(mnt[i] - R[i, R_GEN], 0), clip) + page
        ptarget = pages_for(extend, page) * page
        take = extend
        if ptarget > rem_chunk:
            take = rem_chunk // page * page
        grow = pages_for(take, page)
        if (total >= avail - offset                       # NO_TOKEN: the head waits for room
                or (ptarget >= rem_input and nmem != 0) or take <= 0):
            X.unlock(rx, r, node)
            _sync_cached(r, E, rx)
            break
        _evict_for(r, grow, E, rx)
        if grow > E[r, E_FREE]:
            X.unlock(rx, r, node)
            _sync_cached(r, E, rx)
            break
        if ncand >= 0:
            _waiting_remove(r, i, from_retracted, Q, W, WT, E)
        else:
            _waiting_pop(r, from_retracted, Q, W, E)
        if R[i, R_ADMITTED] == 0:
            R[i, R_ADMITTED] = 1
            RF[i, F_ADMIT] = clock
            R[i, R_HIT] = cached
        R[i, R_STATUS] = ST_PREFILL
        R[i, R_PTARGET] = target
        R[i, R_PDONE] = cached
        R[i, R_KV] = cached
        R[i, R_NODE] = node
        R[i, R_PROT] = matched
        R[i, R_SHARED] = matched * ppb
        R[i, R_PAGES] = matched * ppb + grow
        E[r, E_FREE] -= grow
        alloc += grow
        MB[r, nmem, M_REQ] = i
        MB[r, nmem, M_TOK] = take
        MB[r, nmem, M_KV] = cached
        nmem += 1
        tokens += take
        wprefix += take * cached
        pairs += take * (cached + take / 2.0)
        kvmax = max(kvmax, cached)
        if take < extend:
            E[r, E_CHUNKED] = i
            offset += take + page
            rem_chunk = 0
            break
        offset += ptarget + page + min(mnt[i], clip)
        rem_chunk -= ptarget
        rem_input -= ptarget
    if nmem == 0:
        return False
    PI[r, 0, P_KIND] = KIND_PREFILL
    PI[r, 0, P_BS] = nmem
    PI[r, 0, P_BSPAD] = nmem
    PI[r, 0, P_WIDTH] = 0
    PI[r, 0, P_MINW] = 0
    PI[r, 0, P_MAXW] = 0
    PI[r, 0, P_DISTINCT] = 0
    PI[r, 0, P_TOKENS] = tokens
    PI[r, 0, P_PADSLOTS] = 0
    PI[r, 0, P_GRAPH] = 0
    PI[r, 0, P_PASSES] = 1
    PI[r, 0, P_MODE] = MODE_UNIFORM
    PI[r, 0, P_VIOL] = 0
    PI[r, 0, P_KVMAX] = kvmax
    PI[r, 0, P_MSTART] = 0
    PI[r, 0, P_MCOUNT] = nmem
    PF[r, 0, PF_KVSUM] = wprefix
    PF[r, 0, PF_PREFIX] = pairs / tokens - tokens / 2.0 if tokens > 0 else 0.0
    PF[r, 0, PF_KVMEAN] = wprefix / tokens if tokens > 0 else 0.0
    E[r, E_NPASS] = 1
    E[r, E_NMEM] = nmem
    E[r, E_PENDING] = 1
    _mark_kv_used(r, E, PI)
    return True


# ---------------------------------------------------------------- timing from a table
def set_attention(CF: np.ndarray, att) -> bool:
    """Put a profile's ``attention`` metadata into ``CF[CF_ATT:]``; without it (``None``, or an
    older profile) lookups use the mean KV.  True when set."""
    CF[CF_ATT:] = attention_params(att)
    return bool(CF[CF_ATT + ATT_ON])


@njit
def pass_kv(r, p, PI, PF, CF):
    """The KV coordinate pass ``p`` is looked up at (prefill: its attention-equivalent prefix)."""
    kind = PI[r, p, P_KIND]
    if kind == KIND_PREFILL:
        return PF[r, p, PF_PREFIX]
    nseq = float(PI[r, p, P_BSPAD])
    draft = kind == KIND_DRAFT  # a draft-extend pass has `width` query rows, like a verify
    rows = attention_rows(draft, PI[r, p, P_GRAPH] == 1, nseq, float(PI[r, p, P_WIDTH]),
                          float(PI[r, p, P_TOKENS]))
    return effective_kv(PF[r, p, PF_KVSUM], float(PI[r, p, P_KVMAX]), nseq,
                        float(PI[r, p, P_BS]), rows, draft, CF[CF_ATT:])


@njit
def _set_lookups(r, PI, PF, E, CF):
    """The lookup coordinate of every pending pass, once (both timing paths record it)."""
    for p in range(E[r, E_NPASS]):
        PF[r, p, PF_LOOKUP] = pass_kv(r, p, PI, PF, CF)


@njit
def _time_passes(r, PI, PF, E, tab):
    """Latency of every pending pass from the latency table (the fast path)."""
    (vg0, vg1, vg2, vgv, ve0, ve1, ve2, vev, dg0, dg1, dgv, de0, de1, dev, pf0, pf1, pfv,
     xg0, xg1, xg2, xgv, xe0, xe1, xe2, xev) = tab
    for p in range(E[r, E_NPASS]):
        kind = PI[r, p, P_KIND]
        oog = False
        if kind == KIND_PREFILL:
            lat, oog = interp_prefill(pf0, pf1, pfv, float(PI[r, p, P_TOKENS]),
                                      PF[r, p, PF_LOOKUP])
        elif kind == KIND_DRAFT:
            bs = float(PI[r, p, P_BSPAD])
            kv = PF[r, p, PF_LOOKUP]
            if PI[r, p, P_GRAPH] == 1:
                lat, oog = interp2(dg0, dg1, dgv, bs, kv)
            else:
                lat, oog = interp2(de0, de1, dev, bs, kv)
            lat = lat * PI[r, p, P_PASSES]
        elif kind == KIND_EXTEND:
            bs = float(PI[r, p, P_BSPAD])
            w = float(PI[r, p, P_WIDTH])
            kv = PF[r, p, PF_LOOKUP]
            if PI[r, p, P_GRAPH] == 1:
                lat, oog = interp3(xg0, xg1, xg2, xgv, bs, w, kv)
            else:
                lat, oog = interp3(xe0, xe1, xe2, xev, bs, w, kv)
        else:
            bs = float(PI[r, p, P_BSPAD])
            kv = PF[r, p, PF_LOOKUP]
            if PI[r, p, P_MODE] == MODE_UNIFORM:
                w = float(PI[r, p, P_WIDTH])
            else:
                w = PI[r, p, P_TOKENS] / float(PI[r, p, P_BS])
            if PI[r, p, P_GRAPH] == 1:
                lat, oog = interp3(vg0, vg1, vg2, vgv, bs, w, kv)
            else:
                lat, oog = interp3(ve0, ve1, ve2, vev, bs, w, kv)
        PF[r, p, PF_LAT] = lat
        PF[r, p, PF_ERR] = np.nan
        PI[r, p, P_OOG] = 1 if oog else 0
    E[r, E_TIMED] = 1


# ---------------------------------------------------------------- applying
@njit
def _deliver(i, t, tokens, RF, RSI, RSF, G, record):
    if RF[i, F_LAST] >= 0.0:
        gap = t - RF[i, F_LAST]
        if gap > RF[i, F_MAXGAP]:
            RF[i, F_MAXGAP] = gap
    RF[i, F_LAST] = t
    if record == 1:
        k = G[G_RSFILL]
        RSI[0, k] = i
        RSI[1, k] = tokens
        RSF[k] = t
        G[G_RSFILL] = k + 1


@njit
def _finish(r, i, t, R, RF, E, prompt):
    R[i, R_STATUS] = ST_DONE
    RF[i, F_FINISH] = t
    E[r, E_FREE] += R[i, R_PAGES] - R[i, R_SHARED]  # blocks the cache owns stay cached
    R[i, R_PAGES] = 0
    R[i, R_SHARED] = 0  # its lock (R_NODE) is released after the pass: _release_finished
    E[r, E_OUTSTANDING] -= prompt[i] + R[i, R_GEN]
    E[r, E_FINISHED] += 1


@njit
def _cache_prefilled(r, t, R, E, MB, prompt, CI, poff, pids, rx):
    """Before a prefill pass is applied: insert the full prompt blocks each member will have
    computed into the radix cache and move its lock to their end (SGLang
    ``cache_unfinished_req``, after every prefill pass, the last chunk included): blocks another
    request cached meanwhile are freed, the new ones pass from the request to the cache (both
    stay in its ``R_PAGES``, as ``R_SHARED``)."""
    block = CI[C_BLOCK]
    ppb = CI[C_PPB]
    for j in range(E[r, E_NMEM]):
        i = MB[r, j, M_REQ]
        done = R[i, R_PDONE] + MB[r, j, M_TOK]
        k = min(poff[i + 1] - poff[i], min(done, prompt[i]) // block)
        if k > R[i, R_PROT]:
            prefix, node = X.insert_move(rx, r, i, k, R[i, R_NODE], poff, pids, t)
            E[r, E_FREE] += (prefix - R[i, R_PROT]) * ppb
            R[i, R_NODE] = node
            R[i, R_PROT] = k
            R[i, R_SHARED] = k * ppb
            _sync_cached(r, E, rx)


@njit
def _apply_prefill(r, t, R, RF, E, RUN, MB, prompt, output, RSI, RSF, G, CI):
    """Prefill chunks computed; completed prefills emit a token.  Returns tokens emitted.
    (With the radix cache, :func:`_cache_prefilled` has inserted their blocks just before.)"""
    page = CI[C_PAGE]
    emitted = 0
    for j in range(E[r, E_NMEM]):
        i = MB[r, j, M_REQ]
        R[i, R_PDONE] += MB[r, j, M_TOK]
        R[i, R_KV] = R[i, R_PDONE]
        if R[i, R_PDONE] < R[i, R_PTARGET]:
            continue
        if E[r, E_CHUNKED] == i:
            E[r, E_CHUNKED] = -1
        # the prefill emits one token
        if R[i, R_GEN] == 0:
            RF[i, F_FIRST] = t
        R[i, R_GEN] += 1
        emitted += 1
        E[r, E_OUTSTANDING] += 1
        _deliver(i, t, 1, RF, RSI, RSF, G, CI[C_RECORD_RS])
        p = pages_for(R[i, R_KV], page)
        E[r, E_FREE] += R[i, R_PAGES] - p
        R[i, R_PAGES] = p
        if R[i, R_GEN] >= output[i]:
            _finish(r, i, t, R, RF, E, prompt)
        else:
            R[i, R_STATUS] = ST_RUNNING
            RUN[r, E[r, E_NRUN]] = i
            E[r, E_NRUN] += 1
    return emitted


@njit
def _release_finished(r, R, E, MB, rx):
    """Release the radix-cache locks of the requests the applied iteration finished
    (``_finish`` leaves them, so the decode path needs no cache state)."""
    for j in range(E[r, E_NMEM]):
        i = MB[r, j, M_REQ]
        if R[i, R_STATUS] == ST_DONE and R[i, R_NODE] != 0:
            _release_node(r, i, R, E, rx)


@njit
def _apply_decode(r, t, R, RF, E, RUN, MB, prompt, output, off, draft, acc, pacc, RSI, RSF,
                  G, CI, committed):
    """Acceptance, KV and finishes of a decode iteration that ended at t; committed[L] gets the
    tokens committed by launch L.  Returns (accepted drafts, requests that saw a rejection)."""
    page = CI[C_PAGE]
    seed = CI[C_SEED]
    nfin = 0
    acc_sum = 0
    rejected = 0
    for j in range(E[r, E_NMEM]):
        i = MB[r, j, M_REQ]
        k = R[i, R_STEPK]
        a = accepted_at_step(i, k, MB[r, j, M_R], off, draft, acc, pacc, seed)
        acc_sum += a
        if a < MB[r, j, M_R]:
            rejected += 1
        c = min(a + 1, output[i] - R[i, R_GEN])
        R[i, R_GEN] += c
        R[i, R_KV] += c
        R[i, R_STEPK] = k + 1
        R[i, R_STEPS] += 1
        R[i, R_DRAFTED] += MB[r, j, M_D]
        R[i, R_VERIFIED] += MB[r, j, M_R]
        R[i, R_ACCEPTED] += a
        R[i, R_TRUNC] += max(0, MB[r, j, M_D] - MB[r, j, M_R])
        R[i, R_PADDED] += MB[r, j, M_V] - 1 - MB[r, j, M_R]
        E[r, E_OUTSTANDING] += c
        committed[MB[r, j, M_LAUNCH]] += c
        _deliver(i, t, c, RF, RSI, RSF, G, CI[C_RECORD_RS])
        p = pages_for(R[i, R_KV], page)  # rejected drafts' slots are freed
        E[r, E_FREE] += R[i, R_PAGES] - p
        R[i, R_PAGES] = p
        if R[i, R_GEN] >= output[i]:
            _finish(r, i, t, R, RF, E, prompt)
            nfin += 1
    if nfin > 0:
        n = E[r, E_NRUN]
        q = 0
        for j in range(n):
            i = RUN[r, j]
            if R[i, R_STATUS] != ST_DONE:
                RUN[r, q] = i
                q += 1
        E[r, E_NRUN] = q
    return acc_sum, rejected


@njit
def _record_steps(r, t0, PI, PF, E, SI, SF, G, committed):
    t = t0
    for p in range(E[r, E_NPASS]):
        k = G[G_SFILL]
        G[G_SFILL] = k + 1
        SI[S_REPLICA, k] = r
        SI[S_ITER, k] = E[r, E_ITER]
        SI[S_KIND, k] = PI[r, p, P_KIND]
        SI[S_BS, k] = PI[r, p, P_BS]
        SI[S_BSPAD, k] = PI[r, p, P_BSPAD]
        SI[S_WIDTH, k] = PI[r, p, P_WIDTH]
        SI[S_MINW, k] = PI[r, p, P_MINW]
        SI[S_MAXW, k] = PI[r, p, P_MAXW]
        SI[S_DISTINCT, k] = PI[r, p, P_DISTINCT]
        SI[S_TOKENS, k] = PI[r, p, P_TOKENS]
        SI[S_PADSLOTS, k] = PI[r, p, P_PADSLOTS]
        SI[S_GRAPH, k] = PI[r, p, P_GRAPH]
        SI[S_PASSES, k] = PI[r, p, P_PASSES]
        SI[S_KVMAX, k] = PI[r, p, P_KVMAX]
        SI[S_VIOL, k] = PI[r, p, P_VIOL]
        SI[S_OOG, k] = PI[r, p, P_OOG]
        SI[S_MODE, k] = PI[r, p, P_MODE]
        SI[S_KVUSED, k] = PI[r, p, P_KVUSED]
        SI[S_KVCACHED, k] = PI[r, p, P_KVCACHED]
        if PI[r, p, P_KIND] == KIND_VERIFY:
            L = p - (1 if E[r, E_NPASS] > 0 and PI[r, 0, P_KIND] == KIND_DRAFT else 0)
            SI[S_LAUNCH, k] = L
            SI[S_ITERDISTINCT, k] = E[r, E_ITERDISTINCT]
            SI[S_GPADSLOTS, k] = (PI[r, p, P_BSPAD] - PI[r, p, P_BS]) * PI[r, p, P_WIDTH]
            SI[S_COMMITTED, k] = committed[L]
        elif PI[r, p, P_KIND] == KIND_DRAFT:
            SI[S_LAUNCH, k] = 0
            SI[S_ITERDISTINCT, k] = E[r, E_ITERDISTINCT]
            SI[S_GPADSLOTS, k] = PI[r, p, P_BSPAD] - PI[r, p, P_BS]
            SI[S_COMMITTED, k] = 0
        elif PI[r, p, P_KIND] == KIND_EXTEND:
            SI[S_LAUNCH, k] = 0
            SI[S_ITERDISTINCT, k] = E[r, E_ITERDISTINCT]
            SI[S_GPADSLOTS, k] = (PI[r, p, P_BSPAD] - PI[r, p, P_BS]) * PI[r, p, P_WIDTH]
            SI[S_COMMITTED, k] = 0
        else:
            SI[S_LAUNCH, k] = 0
            SI[S_ITERDISTINCT, k] = 0
            SI[S_GPADSLOTS, k] = 0
            SI[S_COMMITTED, k] = committed[0]
        SF[SF_START, k] = t
        SF[SF_LAT, k] = PF[r, p, PF_LAT]
        SF[SF_KVMEAN, k] = PF[r, p, PF_KVMEAN]
        SF[SF_ERR, k] = PF[r, p, PF_ERR]
        SF[SF_LOOKUP, k] = PF[r, p, PF_LOOKUP]
        t += PF[r, p, PF_LAT]


@njit
def iteration_time(r, E, EF, PF, CI, CF):
    """Wall time of the pending iteration: its passes back to back, plus the scheduler's host
    time between iterations, or, with overlap scheduling, the longer of the two (the host
    prepares the next batch while the GPU runs this one); plus the controller's switching cost
    when the round changed its draft count."""
    gpu = 0.0
    for p in range(E[r, E_NPASS]):
        gpu += PF[r, p, PF_LAT]
    if CI[C_OVERLAP] == 1:
        return max(gpu, CF[CF_OVERHEAD]) + EF[r, EF_SWITCH]
    return gpu + CF[CF_OVERHEAD] + EF[r, EF_SWITCH]


@njit
def _apply_pending(r, R, RF, E, EF, RUN, MB, PI, PF, prompt, output, off, draft, acc, pacc,
                   SI, SF, RSI, RSF, G, CI, CF, committed, KC, KS):
    t_end = EF[r, EF_PEND_END]
    t0 = EF[r, EF_CLOCK] + (0.0 if CI[C_OVERLAP] == 1 else CF[CF_OVERHEAD])
    for L in range(committed.shape[0]):
        committed[L] = 0
    if E[r, E_PENDING] == 1:
        committed[0] = _apply_prefill(r, t_end, R, RF, E, RUN, MB, prompt, output, RSI, RSF,
                                      G, CI)
    else:
        acc_sum, rejected = _apply_decode(r, t_end, R, RF, E, RUN, MB, prompt, output, off,
                                          draft, acc, pacc, RSI, RSF, G, CI, committed)
        # the controller learns the round's acceptance only now, after the round has ended
        K.observe(r, E[r, E_NMEM], acc_sum, rejected, KC, KS)
    EF[r, EF_SWITCH] = 0.0
    _record_steps(r, t0, PI, PF, E, SI, SF, G, committed)
    EF[r, EF_BUSY] += t_end - t0
    EF[r, EF_CLOCK] = t_end
    E[r, E_ITER] += 1
    E[r, E_PENDING] = 0
    E[r, E_TIMED] = 0


@njit(_nrt=True)
def advance(r, horizon, arrival, prompt, output, mnt, off, draft, acc, pacc, R, RF, E, EF, Q, W,
            WT, RUN, MB, PI, PF, SI, SF, RSI, RSF, G, CI, CF, padmap, capw, buckets, tab, KC, KS,
            poff, pids, rx):
    """Run replica r's iterations until something outside it must happen.

    Iterations are decided at the replica's clock, strictly before ``horizon`` (the next
    external event: an arrival the router may send here); one whose end is at or before the
    horizon is applied at once, one that ends later is left pending (``ADV_PENDING``: the caller
    waits until its end).  Returns one of the ``ADV_*`` codes.  ``poff``/``pids`` are the
    trace's prefix block ids (``TraceArrays.prefix_offsets``/``prefix_ids``) and ``rx`` the
    replicas' radix caches (``simulator.cache_ops``).
    """
    lw = np.zeros(MAXPASS, np.int64)
    tmp = np.zeros(2 * RUN.shape[1] + 2, np.int64)
    committed = np.zeros(MAXPASS, np.int64)
    cand = np.zeros((LPM_QUEUE_LIMIT + 1, 3), np.int64)
    maxrun = RUN.shape[1]
    applied = 0
    while True:
        if E[r, E_PENDING] != 0:
            if E[r, E_TIMED] == 0:
                _set_lookups(r, PI, PF, E, CF)
                if CI[C_FAST] == 1:
                    _time_passes(r, PI, PF, E, tab)
                else:
                    return ADV_TIMING
                EF[r, EF_PEND_END] = EF[r, EF_CLOCK] + iteration_time(r, E, EF, PF, CI, CF)
            if EF[r, EF_PEND_END] > horizon:
                return ADV_PENDING
            if G[G_SFILL] + MAXPASS > SI.shape[1] or G[G_RSFILL] + maxrun > RSI.shape[1]:
                return ADV_FULL
            radix_on = CI[C_RADIX] == 1
            if radix_on and E[r, E_PENDING] == 1:
                _cache_prefilled(r, EF[r, EF_PEND_END], R, E, MB, prompt, CI, poff, pids, rx)
            _apply_pending(r, R, RF, E, EF, RUN, MB, PI, PF, prompt, output, off, draft, acc,
                           pacc, SI, SF, RSI, RSF, G, CI, CF, committed, KC, KS)
            if radix_on:
                _release_finished(r, R, E, MB, rx)
            applied += 1
            if applied == CI[C_YIELD]:  # state is all in the arrays: the next call resumes here
                return ADV_YIELD
            continue
        clock = EF[r, EF_CLOCK]
        if clock >= horizon:
            return ADV_HORIZON
        if _wants_prefill(r, clock, arrival, Q, E) and _decide_prefill(
                r, clock, R, RF, E, EF, Q, W, WT, RUN, MB, PI, PF, arrival, prompt, mnt, CI, poff,
                pids, rx, cand):
            continue
        if E[r, E_NRUN] > 0:
            _update_running(r, clock, R, E, EF, W, WT, RUN, prompt, mnt, CI, CF, rx)
            width = CI[C_FIXED]
            if KC[K.K_KIND] != K.CT_STATIC:
                width = _round_width(r, R, E, EF, RUN, MB, PI, PF, off, draft, acc, pacc, output,
                                     CI, CF, padmap, capw, buckets, lw, tmp, KC, KS, tab)
            _decide_decode(r, clock, width, R, E, EF, W, WT, RUN, MB, PI, PF, off, draft, prompt,
                           CI, padmap, capw, buckets, lw, tmp, KC, KS, rx)
            continue
        # idle (SGLang's self_check_during_idle): new_token_ratio back to its initial value
        EF[r, EF_RATIO] = CF[CF_RATIO_INIT]
        # idle: jump to the next queued arrival, if it comes before the horizon
        if E[r, E_WLEN] > 0:
            return ADV_STUCK  # a retracted request waits with nothing running: cannot be
        if E[r, E_QLEN] == 0:
            return ADV_DONE
        nxt = arrival[Q[r, E[r, E_QHEAD]]]
        if nxt <= clock:
            return ADV_STUCK
        if nxt >= horizon:
            EF[r, EF_CLOCK] = max(clock, horizon)
            return ADV_HORIZON
        EF[r, EF_CLOCK] = max(clock, nxt)
    return ADV_DONE  # unreachable; keeps numba's type inference simple
