"""Speculation controllers: the draft count of each decode round, from what a scheduler sees.

A controller runs before each decode round and returns the round's verify width ``w`` (draft
tokens ``k = w - 1``; ``w = 1`` is a round without speculation).  It reads the batch size, the
captured batch size it pads to and its own state, which only :func:`observe` changes, after a
round has ended, from that round's accepted drafts.  So no controller reads the acceptance of
the round it decides; the ``goodput`` and ``oracle`` controllers, which need the cost of each
candidate from the latency table, are evaluated in :mod:`simulator.core`
(``_choose_by_cost``), the oracle there being the one labelled exception (it reads the round's
recorded acceptance: an upper bound).

State and settings are flat arrays so the compiled core can read them:

* ``KC`` (float64, one per run): the controller's settings, built by
  :func:`simulator.controller_config.build_kc`;
* ``KS`` (float64 ``[replicas, NKS]``): each replica's state (per batch-size range EMA, current
  steps and round count; rounds, switches and rounds per width).
"""

from __future__ import annotations

from backends.jit import njit
from simulator.registry import CONTROLLERS

CT_STATIC = CONTROLLERS.code("static")
CT_SCHEDULE = CONTROLLERS.code("schedule")
CT_THRESHOLD = CONTROLLERS.code("threshold")
CT_SGLANG = CONTROLLERS.code("sglang-adaptive")
CT_GOODPUT = CONTROLLERS.code("goodput")
CT_ORACLE = CONTROLLERS.code("oracle")

MAXC = 16        # candidates per range (and for goodput / oracle)
MAXRANGE = 16    # batch-size ranges

# ---------------------------------------------------------------- settings KC
K_KIND = 0
K_NRANGE = 1
K_SWITCH_COST = 2  # seconds the engine pays when the round's width differs from the last
K_MAXW = 3         # widest verify width the controller can choose
K_NCAND = 4        # goodput / oracle: candidate draft counts
K_THRESH = 5       # threshold: largest batch size that speculates
K_GRAPHKEY = 6     # 1: route a batch by its captured (padded) batch size (SGLang)
K_CAND = 7         # K_CAND .. K_CAND + MAXC
K_RANGES = K_CAND + MAXC
# one range record
RG_LO = 0          # inclusive lower batch size
RG_K = 1           # schedule: draft count
RG_NC = 2          # sglang-adaptive: candidates
RG_UP = 3
RG_DOWN = 4
RG_ALPHA = 5
RG_INTERVAL = 6
RG_WARMUP = 7
RG_CEIL = 8
RG_INIT = 9        # initial steps
RG_CAND = 10
RS = RG_CAND + MAXC
NKC = K_RANGES + MAXRANGE * RS

# ---------------------------------------------------------------- state KS[r, :]
KS_LASTW = 0       # width of the previous decode round (0: none yet)
KS_SWITCHES = 1    # rounds whose width differs from the previous round's
KS_ROUNDS = 2      # decode rounds decided
KS_LASTG = 3       # batch-size range of the last decided round (where its acceptance goes)
KS_ACC = 4         # goodput: accepted drafts (decayed)
KS_REJ = 5         # goodput: rounds that saw a rejection (decayed)
KS_HIST = 6        # KS_HIST + w: rounds verified at width w (1..64)
KS_SLOT = KS_HIST + 65   # per range: EMA, current steps, rounds seen
NKS = KS_SLOT + 3 * MAXRANGE
#: weight of the goodput controller's acceptance history per round (older rounds decay)
GOODPUT_DECAY = 0.98


@njit
def range_of(KC, bs):
    """The range a batch of ``bs`` requests falls in: the last whose lower bound is <= bs (gaps
    inherit the range before them); -1 below the first range."""
    g = -1
    for q in range(int(KC[K_NRANGE])):
        if KC[K_RANGES + q * RS + RG_LO] <= bs:
            g = q
        else:
            break
    return g


@njit
def init_state(KC, KS):
    """Every replica's starting state (SGLang: the initial steps if a candidate, else the
    middle candidate; the EMA at steps - 1)."""
    for r in range(KS.shape[0]):
        for q in range(int(KC[K_NRANGE])):
            b = K_RANGES + q * RS
            nc = int(KC[b + RG_NC])
            steps = KC[b + RG_CAND + nc // 2] if nc > 0 else KC[b + RG_K]
            for c in range(nc):
                if KC[b + RG_CAND + c] == KC[b + RG_INIT]:
                    steps = KC[b + RG_INIT]
            KS[r, KS_SLOT + 3 * q] = steps - 1.0
            KS[r, KS_SLOT + 3 * q + 1] = steps
            KS[r, KS_SLOT + 3 * q + 2] = 0.0


@njit
def choose_width(r, n, bspad, fixed, KC, KS):
    """The verify width of replica r's next round of ``n`` requests (``bspad``: the captured
    batch size it pads to, or n); ``fixed`` is engine.num_draft_tokens.  Not for goodput and
    oracle (their costs come from the core)."""
    kind = int(KC[K_KIND])
    maxw = int(KC[K_MAXW])
    if kind == CT_SCHEDULE:
        g = range_of(KC, n)
        if g < 0:
            return maxw
        k = int(KC[K_RANGES + g * RS + RG_K])
        return min(k + 1, maxw)
    if kind == CT_THRESHOLD:
        return 1 if n > KC[K_THRESH] else fixed
    if kind == CT_SGLANG:
        g = range_of(KC, bspad if KC[K_GRAPHKEY] == 1 else n)
        if g < 0:
            g = 0
        KS[r, KS_LASTG] = g
        return int(KS[r, KS_SLOT + 3 * g + 1]) + 1
    return fixed


@njit
def _sglang_recompute(KC, KS, r, g):
    """SGLang's step rule for range g: move down while the EMA is at or below the previous
    candidate's drop threshold; else up while it is above the current one's rise threshold."""
    b = K_RANGES + g * RS
    nc = int(KC[b + RG_NC])
    ema = KS[r, KS_SLOT + 3 * g]
    old = KS[r, KS_SLOT + 3 * g + 1]
    idx = 0
    for c in range(nc):
        if KC[b + RG_CAND + c] == old:
            idx = c
    if old == 0:  # after a no-speculation interval, probe the next candidate up
        idx = min(idx + 1, nc - 1)
        target = KC[b + RG_CAND + idx]
        if target > 0 and ema < 0:
            KS[r, KS_SLOT + 3 * g] = target - 1.0
        KS[r, KS_SLOT + 3 * g + 1] = target
        return
    start = idx
    while idx > 0:
        prev = KC[b + RG_CAND + idx - 1]
        drop = (0.5 if prev == 0 else prev - 0.5) + KC[b + RG_DOWN]
        if ema <= drop:
            idx -= 1
        else:
            break
    if idx == start:
        while idx < nc - 1:
            if ema > KC[b + RG_CAND + idx] - 0.5 + KC[b + RG_UP]:
                idx += 1
            else:
                break
    target = KC[b + RG_CAND + idx]
    ceil_coeff = KC[b + RG_CEIL]
    if ceil_coeff > 0:
        ceiling = ema * ceil_coeff
        ci = int(ceiling)
        if ci < ceiling:
            ci += 1
        ceiling = max(1.0, float(ci))
        if target > ceiling and target <= old:
            while idx > 0 and KC[b + RG_CAND + idx] > ceiling:
                idx -= 1
            target = KC[b + RG_CAND + idx]
    KS[r, KS_SLOT + 3 * g + 1] = target


@njit
def observe(r, n, accepted_sum, rejected, KC, KS):
    """Feed a finished round (n requests, ``accepted_sum`` accepted drafts, ``rejected`` of them
    with a draft rejected) to replica r's controller state."""
    kind = int(KC[K_KIND])
    if kind == CT_SGLANG and n > 0:
        g = int(KS[r, KS_LASTG])
        b = K_RANGES + g * RS
        s = KS_SLOT + 3 * g
        if KS[r, s + 1] > 0:
            a = KC[b + RG_ALPHA]
            KS[r, s] = (1.0 - a) * KS[r, s] + a * (accepted_sum / n)
        KS[r, s + 2] += 1.0
        count = KS[r, s + 2]
        warm = KC[b + RG_WARMUP]
        if count > warm and int(count - warm) % int(KC[b + RG_INTERVAL]) == 0:
            _sglang_recompute(KC, KS, r, g)
    elif kind == CT_GOODPUT:
        KS[r, KS_ACC] = GOODPUT_DECAY * KS[r, KS_ACC] + accepted_sum
        KS[r, KS_REJ] = GOODPUT_DECAY * KS[r, KS_REJ] + rejected


@njit
def note_round(r, w, KC, KS):
    """Count a decided round at width w; returns the switching cost it pays (seconds)."""
    KS[r, KS_ROUNDS] += 1.0
    KS[r, KS_HIST + w] += 1.0
    last = KS[r, KS_LASTW]
    KS[r, KS_LASTW] = w
    if last != 0 and last != w:
        KS[r, KS_SWITCHES] += 1.0
        return KC[K_SWITCH_COST]
    return 0.0


@njit
def accept_estimate(r, KS):
    """The goodput controller's per-position acceptance estimate: accepted drafts over accepted
    drafts plus rejections, with one pseudo-observation of each (0.5 before any round)."""
    return (KS[r, KS_ACC] + 1.0) / (KS[r, KS_ACC] + KS[r, KS_REJ] + 2.0)
