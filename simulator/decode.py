"""Deciding a decode round: SGLang's ``update_running_batch`` (check_decode_mem, retraction,
``new_token_ratio``), the controller's width, the verify policy, KV slots, and the round's passes
(draft, verify launches, draft-extend)."""

from __future__ import annotations

import numpy as np

from backends.jit import njit
from simulator import controllers as K
from simulator.layout import *  # noqa: F401,F403  (the state layout's column names)
from simulator.layout import pages_for
from simulator.policies import _distinct_sorted, accepted_at_step, apply_policy, misattributed_rows
from simulator.kv_ops import _evict_for, _mark_kv_used, _retract
from simulator.timing import _set_lookups, _time_passes, iteration_time


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
    (at least one request, until it passes or one is left; a last one that still fails is kept
    and counted in ``E_XKEEP``, where SGLang aborts it) and re-estimate ``new_token_ratio``
    as ``min(1, (decoded + RETRACT_DECODE_STEPS x running) / (sum of max_new_tokens + 1))``; else
    decay the ratio towards its minimum."""
    n = E[r, E_NRUN]
    if _decode_mem_ok(r, n, R, E, RUN, CI, rx):
        EF[r, EF_RATIO] = max(EF[r, EF_RATIO] - CF[CF_RATIO_DECAY], CF[CF_RATIO_MIN])
        return
    fits = False  # the check above failed: retract at least one
    while not fits:
        n = E[r, E_NRUN]
        if n <= 1:
            if n == 1:
                # SGLang aborts this last request (FINISH_ABORT, HTTP 500); specsched keeps it
                E[r, E_XKEEP] += 1
            break
        _retract(r, _retract_victim(r, n, R, RUN, prompt), clock, R, E, W, WT, RUN, rx)
        fits = _decode_mem_ok(r, E[r, E_NRUN], R, E, RUN, CI, rx)
    decoded = 0
    maxnew = 0
    for j in range(E[r, E_NRUN]):
        i = RUN[r, j]
        decoded += R[i, R_GEN]
        maxnew += mnt[i]
    EF[r, EF_RATIO] = min(1.0, (decoded + CI[C_RETRACT_STEPS] * E[r, E_NRUN]) / (maxnew + 1))


@njit
def _round_width(r, R, E, EF, RUN, MB, PI, PF, off, draft, acc, pacc, output, CI, CF, padmap,
                 capw, buckets, lw, tmp, KC, KS, tab, fs):
    """The verify width of replica r's next decode round as a controller other than static
    chooses it.  Reads what a scheduler sees (batch size and the controller's state from
    finished rounds); only the oracle reads the round's acceptance.  (The static controller,
    engine.num_draft_tokens every round, never calls this: the hot loop stays as it was.)"""
    kind = int(KC[K.K_KIND])
    n = E[r, E_NRUN]
    if kind == K.CT_GOODPUT or kind == K.CT_ORACLE:
        return _choose_by_cost(r, kind == K.CT_ORACLE, R, E, EF, RUN, MB, PI, PF, off, draft,
                               acc, pacc, output, CI, CF, padmap, capw, buckets, lw, tmp, KC,
                               KS, tab, fs)
    bspad = padmap[n] if n <= CI[C_MAXCAPBS] else n
    return K.choose_width(r, n, bspad, CI[C_FIXED], KC, KS)


@njit
def _choose_by_cost(r, oracle, R, E, EF, RUN, MB, PI, PF, off, draft, acc, pacc, output, CI, CF,
                    padmap, capw, buckets, lw, tmp, KC, KS, tab, fs):
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
        _set_lookups(r, PI, PF, E, CF, tab, MB, fs)
        _time_passes(r, PI, PF, E, CF, tab)
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
        # the MLA path's metadata keeps num_draft_tokens whatever the batch holds (SGLang's
        # AITER MLA path): an unsafe-derived launch there is the uniform one at that width
        fixed_meta = mode == MODE_UNSAFE and CI[C_MLA] == 1
        if mode == MODE_UNIFORM:
            width = lw[L]
        elif fixed_meta:
            width = CI[C_FIXED]
        else:
            width = toks // bs
        gw = width if (mode == MODE_UNIFORM or fixed_meta) else maxvw
        graph = 1 if (bs <= maxcap and gw < capw.shape[0] and capw[gw]) else 0
        viol = 0
        if mode == MODE_UNSAFE:
            for j in range(j0, j1):
                tmp[j - j0] = MB[r, j, M_V]
            viol = misattributed_rows(tmp, bs, width)
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
