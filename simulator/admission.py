"""Deciding a prefill pass: SGLang's ``PrefillAdder`` admission over the waiting queue (FCFS or
longest prefix match), chunked prefill, and the radix cache's matches and locks."""

from __future__ import annotations

from backends.jit import njit
from simulator import cache_ops as X
from simulator.layout import *  # noqa: F401,F403  (the state layout's column names)
from simulator.layout import pages_for
from simulator.waiting import _lpm_order, _waiting_head, _waiting_pop, _waiting_remove
from simulator.kv_ops import _evict_for, _mark_kv_used, _sync_cached


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
