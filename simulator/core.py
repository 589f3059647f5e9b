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

This module holds :func:`advance`, the loop; its parts live by concern: the state layout (the
columns of every state array) in :mod:`simulator.layout`, the verify policies and the
acceptance rule in :mod:`simulator.policies`, the waiting queue in :mod:`simulator.waiting`,
KV-pool bookkeeping and retraction in :mod:`simulator.kv_ops`, prefill admission in
:mod:`simulator.admission`, decode rounds in :mod:`simulator.decode`, timing from a table in
:mod:`simulator.timing`, and applying a finished iteration in :mod:`simulator.apply`.  This
module re-exports their names, so ``core.X`` reaches them all.
"""

from __future__ import annotations

import numpy as np

from backends.jit import njit
from backends.attention_kv import ATT_FNSAT, ATT_ON, attention_params  # noqa: F401  (re-exported)
from simulator import controllers as K
from simulator.sglang import LPM_QUEUE_LIMIT
from simulator.layout import *  # noqa: F401,F403  (the state layout, re-exported)
from simulator.layout import pages_for  # noqa: F401
from simulator.policies import (_distinct_sorted, _mix32, accepted_at_step,  # noqa: F401
                                accepted_under_width, apply_policy, misattributed_rows,
                                uniform_draw)
from simulator.waiting import (_lpm_order, _queue_pop, _requeue, _waiting_head,  # noqa: F401
                               _waiting_pop, _waiting_remove, queue_push_back)
# the core's parts, by concern (re-exported: ``core.X`` reaches them all)
from simulator.kv_ops import (_evict_for, _mark_kv_used, _release_node,  # noqa: F401
                              _retract, _sync_cached)
from simulator.timing import (_set_lookups, _time_passes, iteration_time,  # noqa: F401
                              pass_kv, set_attention)
from simulator.decode import (_build_decode_passes, _choose_by_cost,  # noqa: F401
                              _decide_decode, _decode_mem_ok, _fill_members, _proposal,
                              _retract_victim, _round_width, _update_running,
                              _verify_need_pages)
from simulator.admission import _decide_prefill, _wants_prefill  # noqa: F401
from simulator.apply import (_apply_decode, _apply_pending, _apply_prefill,  # noqa: F401
                             _cache_prefilled, _deliver, _finish, _record_steps,
                             _release_finished)


@njit(_nrt=True)
def advance(r, horizon, arrival, prompt, output, mnt, off, draft, acc, pacc, R, RF, E, EF, Q, W,
            WT, RUN, MB, PI, PF, SI, SF, RSI, RSF, G, CI, CF, padmap, capw, buckets, tab, KC, KS,
            poff, pids, rx, MK):
    """Run replica r's iterations until something outside it must happen.

    Iterations are decided at the replica's clock, strictly before ``horizon`` (the next
    external event: an arrival the router may send here); one whose end is at or before the
    horizon is applied at once, one that ends later is left pending (``ADV_PENDING``: the caller
    waits until its end).  Returns one of the ``ADV_*`` codes.  ``poff``/``pids`` are the
    trace's prefix block ids (``TraceArrays.prefix_offsets``/``prefix_ids``) and ``rx`` the
    replicas' radix caches (``simulator.cache_ops``); ``MK`` the member buffer (each recorded
    step's members' KV, ``CI[C_RECORD_MK]``).
    """
    lw = np.zeros(MAXPASS, np.int64)
    tmp = np.zeros(2 * RUN.shape[1] + 2, np.int64)
    # the MLA fluid lookup's scratch, only under it: groups of programs, at most one per query
    # row (backends.mla_fluid.scratch_size of 16 query rows per request or padded slot)
    fluid_rows = 16 * max(RUN.shape[1], padmap.shape[0]) if CF[CF_ATT + ATT_FNSAT] > 0.0 else 0
    fs = np.zeros(2 * (fluid_rows + 2), np.float64)
    committed = np.zeros(MAXPASS, np.int64)
    cand = np.zeros((LPM_QUEUE_LIMIT + 1, 3), np.int64)
    maxrun = RUN.shape[1]
    applied = 0
    while True:
        if E[r, E_PENDING] != 0:
            if E[r, E_TIMED] == 0:
                _set_lookups(r, PI, PF, E, CF, tab, MB, fs)
                if CI[C_FAST] == 1:
                    _time_passes(r, PI, PF, E, CF, tab)
                else:
                    return ADV_TIMING
                EF[r, EF_PEND_END] = EF[r, EF_CLOCK] + iteration_time(r, E, EF, PF, CI, CF)
            if EF[r, EF_PEND_END] > horizon:
                return ADV_PENDING
            if (G[G_SFILL] + MAXPASS > SI.shape[1] or G[G_RSFILL] + maxrun > RSI.shape[1]
                    or G[G_MFILL] + 3 * (maxrun + 1) > MK.shape[0]):
                return ADV_FULL  # (an iteration records at most three passes' members each)
            radix_on = CI[C_RADIX] == 1
            if radix_on and E[r, E_PENDING] == 1:
                _cache_prefilled(r, EF[r, EF_PEND_END], R, E, MB, prompt, CI, poff, pids, rx)
            _apply_pending(r, R, RF, E, EF, RUN, MB, PI, PF, prompt, output, off, draft, acc,
                           pacc, SI, SF, RSI, RSF, G, CI, CF, committed, KC, KS, MK)
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
                                     CI, CF, padmap, capw, buckets, lw, tmp, KC, KS, tab, fs)
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
