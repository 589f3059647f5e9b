"""Applying an iteration when it ends: acceptance (read only here, after the latency is fixed),
committed tokens, KV pages, finished requests, the radix cache's inserts, and the step rows."""

from __future__ import annotations

from backends.jit import njit
from simulator import cache_ops as X
from simulator import controllers as K
from simulator.layout import *  # noqa: F401,F403  (the state layout's column names)
from simulator.layout import pages_for
from simulator.policies import accepted_at_step
from simulator.kv_ops import _release_node, _sync_cached


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
def _record_steps(r, t0, PI, PF, E, SI, SF, G, committed, MB, MK, record_mk):
    t = t0
    for p in range(E[r, E_NPASS]):
        k = G[G_SFILL]
        G[G_SFILL] = k + 1
        if record_mk == 1:  # the members' KV as the pass was timed, in launch order
            j0 = PI[r, p, P_MSTART]
            n = PI[r, p, P_MCOUNT]
            m = G[G_MFILL]
            for j in range(n):
                MK[m + j] = MB[r, j0 + j, M_KV]
            G[G_MFILL] = m + n
            SI[S_NMEM, k] = n
        else:
            SI[S_NMEM, k] = 0
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
def _apply_pending(r, R, RF, E, EF, RUN, MB, PI, PF, prompt, output, off, draft, acc, pacc,
                   SI, SF, RSI, RSF, G, CI, CF, committed, KC, KS, MK):
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
    _record_steps(r, t0, PI, PF, E, SI, SF, G, committed, MB, MK, CI[C_RECORD_MK])
    EF[r, EF_BUSY] += t_end - t0
    EF[r, EF_CLOCK] = t_end
    E[r, E_ITER] += 1
    E[r, E_PENDING] = 0
    E[r, E_TIMED] = 0
