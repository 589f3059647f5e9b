"""The compiled engine's state layout: the column of every field in its state arrays.

Request state, replica state, pending passes, members, configuration and step buffers are plain
NumPy arrays (so numba compiles the engine loop); these constants name their columns, and
:func:`pages_for` is the page arithmetic everyone shares.  :mod:`simulator.core` re-exports
all of them.
"""

from __future__ import annotations

from backends.jit import njit
from backends.attention_kv import NATT
from simulator.registry import VERIFY_POLICIES

# ---------------------------------------------------------------- per-request int state R[n, NR]
R_REPLICA = 0
R_STATUS = 1      # ST_* below
R_GEN = 2         # output tokens generated so far (first token included)
R_KV = 3          # tokens whose KV is cached
R_PAGES = 4       # KV pages held
R_STEPK = 5       # index of the next verify step in the request's recorded lists
R_PDONE = 6       # tokens of the current prefill target already computed
R_PTARGET = 7     # tokens the current (re)prefill must compute
R_STEPS = 8       # verify steps taken
R_DRAFTED = 9     # drafts proposed
R_VERIFIED = 10   # real drafts verified (after the policy)
R_ACCEPTED = 11   # drafts accepted
R_TRUNC = 12      # proposed drafts the policy dropped
R_PADDED = 13     # verify slots holding no token of the request (width padding)
R_RETRACT = 14    # retractions
R_ADMITTED = 15   # 1 once admitted for the first time
R_NODE = 16       # radix cache: the node the request has locked (0: none)
R_PROT = 17       # radix cache: prompt blocks of its KV that the cache owns (locked for it)
R_SHARED = 18     # radix cache: the pages of those blocks (counted in R_PAGES, owned by the cache)
R_HIT = 19        # prompt tokens its first admission found in the cache
NR = 20

ST_QUEUED = 0
ST_PREFILL = 1
ST_RUNNING = 2
ST_DONE = 3

# ---------------------------------------------------------------- per-request float state RF[n, NRF]
F_ADMIT = 0
F_FIRST = 1
F_FINISH = 2
F_LAST = 3        # last token delivery
F_MAXGAP = 4      # longest time between two deliveries
NRF = 5

# ---------------------------------------------------------------- per-replica int state E[r, NE]
E_FREE = 0        # free KV pages
E_QHEAD = 1       # arrival queue: ring buffer Q[r, :] in arrival order, head index
E_QLEN = 2        # arrival queue length (may hold requests whose arrival is still ahead)
E_NRUN = 3        # running requests (RUN[r, :E_NRUN])
E_ITER = 4        # iterations started
E_CHUNKED = 5     # request whose prefill is chunked and unfinished, or -1
E_PENDING = 6     # 0 none, 1 prefill pass decided, 2 decode iteration decided
E_NPASS = 7       # passes of the pending iteration
E_NMEM = 8        # members of the pending iteration
E_TIMED = 9       # 1 once the pending passes have latencies
E_OUTSTANDING = 10  # prompt + generated tokens of unfinished requests routed here
E_ITERDISTINCT = 11  # distinct proposed widths in the pending decode iteration
E_FINISHED = 12   # requests finished on this replica
E_CAP = 13        # KV pages in the pool
E_WHEAD = 14      # retracted queue: ring buffer W[r, :] (entry times WT[r, :]), head index
E_WLEN = 15       # retracted queue length
E_XRETRACT = 16   # retractions beyond SGLang's rule, to fit a verify (SGLang would run out of KV)
E_CACHED = 17     # KV pages the radix cache holds for no running request (its evictable pages)
E_XKEEP = 18      # decodes whose last running request failed check_decode_mem after retraction
                  # (SGLang aborts it with HTTP 500; specsched keeps it)
NE = 19

EF_CLOCK = 0      # the replica's clock: the start of its next decision
EF_PEND_END = 1   # end time of the pending iteration
EF_BUSY = 2       # seconds spent in forward passes
EF_RATIO = 3      # SGLang's new_token_ratio (admission reservation of running requests' growth)
EF_SWITCH = 4     # switching cost the pending iteration pays (its draft count changed), seconds
NEF = 5

# ---------------------------------------------------------------- pending passes PI[r, p, NPI], PF[r, p, NPF]
P_KIND = 0        # KIND_* below
P_BS = 1
P_BSPAD = 2
P_WIDTH = 3       # launch width (uniform) or sum(widths)//bs (ragged / unsafe-derived)
P_MINW = 4        # of proposed widths of the members
P_MAXW = 5
P_DISTINCT = 6
P_TOKENS = 7      # real query tokens (verify), prompt tokens (prefill), bs (draft, per pass)
P_PADSLOTS = 8    # width padding slots
P_GRAPH = 9
P_PASSES = 10     # draft passes (draft rows)
P_MODE = 11       # MODE_* below
P_VIOL = 12       # misattributed query rows (unsafe-derived)
P_OOG = 13        # looked up outside the latency table's grid
P_KVMAX = 14
P_MSTART = 15     # members [P_MSTART, P_MSTART + P_MCOUNT) of MB
P_MCOUNT = 16
P_MAXVW = 17      # widest verify width of a member (buffers of a ragged launch)
P_KVUSED = 18     # KV pages in use while the pass runs
P_KVCACHED = 19   # of those, pages only the radix cache holds (evictable)
NPI = 20
PF_LAT = 0
PF_KVMEAN = 1
PF_KVSUM = 2
PF_PREFIX = 3     # prefill: attention-equivalent prefix (backends.latency_table.prefill_axes)
PF_ERR = 4        # measured max |output error| (live executor, unsafe-derived), else NaN
PF_LOOKUP = 5     # the KV coordinate the pass is looked up at (pass_kv; set once per pass)
NPF = 6

KIND_PREFILL = 0
KIND_DRAFT = 1
KIND_VERIFY = 2
KIND_EXTEND = 3   # the draft-extend pass after the verify (SGLang forward_draft_extend_after_decode)
MODE_UNIFORM = 0
MODE_RAGGED = 1
MODE_UNSAFE = 2

# ---------------------------------------------------------------- members MB[r, j, NMB]
M_REQ = 0
M_LAUNCH = 1
M_V = 2           # verify width after the policy (slots incl. the last committed token)
M_R = 3           # real drafts verified
M_D = 4           # drafts proposed (recorded, capped by max_draft)
M_KV = 5          # KV tokens before the pass
M_TOK = 6         # prefill: tokens computed in this pass
NMB = 7

# ---------------------------------------------------------------- config CI[NCI], CF[NCF]
C_PAGE = 0
C_MAXRUN = 1
C_CHUNK = 2
C_POLICY = 3
C_FIXED = 4
C_WIDEN = 5       # 1: widths raised by a policy hold real drafts; 0: padding
C_MAXDRAFT = 6    # cap on proposals, 0 = none
C_SEED = 7
C_CLIP = 8        # SGLang CLIP_MAX_NEW_TOKENS: cap on the max_new_tokens a request reserves
C_MAXCAPBS = 9    # largest captured batch size (0: no graphs)
C_FAST = 10       # 1: time passes from the latency table here
C_MAXPREFILL = 11  # max tokens of one prefill pass (SGLang max_prefill_tokens)
C_RECORD_RS = 12  # record request steps
C_SPEC = 13       # 1: speculative decoding (draft and draft-extend passes); 0: plain decode
C_DECODE_RESERVE = 14  # tokens per request check_decode_mem wants free (spec: 2 x draft tokens)
C_RETRACT_STEPS = 15  # SGLang SGLANG_RETRACT_DECODE_STEPS (the ratio estimate after a retraction)
C_OVERLAP = 16    # 1: the scheduler's host time overlaps the GPU (SGLang's overlap schedule)
C_YIELD = 17      # return ADV_YIELD after this many iterations in one advance() call (0: never),
                  # so a compiled call is short in wall time and the caller can see Ctrl-C
C_RADIX = 18      # 1: the radix prefix cache is on (simulator.cache_ops)
C_BLOCK = 19      # tokens per prefix block (the trace's prefix_block_tokens; 1 without a cache)
C_PPB = 20        # KV pages per block
C_LPM = 21        # 1: schedule policy lpm (longest prefix match first), else fcfs
C_MLA = 22        # 1: AITER's MLA kernels: a fixed width of 3 launches padded to 4 (2 drafts)
C_RECORD_MK = 23  # 1: record each pass's members' KV (steps.parquet member_kv)
NCI = 24
CF_OVERHEAD = 0   # scheduler overhead per iteration, seconds
CF_RATIO_INIT = 1  # SGLang init_new_token_ratio
CF_RATIO_MIN = 2   # SGLang min_new_token_ratio
CF_RATIO_DECAY = 3  # SGLang new_token_ratio_decay (per decode iteration)
CF_ATT = 4        # CF[CF_ATT:]: backends.attention_kv.attention_params (all 0: mean KV lookups)
NCF = CF_ATT + NATT

# verify policies: codes from the registry (simulator.registry.VERIFY_POLICIES)
POL_PAD = VERIFY_POLICIES.code("pad")
POL_SPLIT = VERIFY_POLICIES.code("split")
POL_BUCKET = VERIFY_POLICIES.code("bucket")
POL_TRUNCATE = VERIFY_POLICIES.code("truncate")
POL_FIXED = VERIFY_POLICIES.code("fixed")
POL_RAGGED = VERIFY_POLICIES.code("ragged")
POL_UNSAFE = VERIFY_POLICIES.code("unsafe-derived")
POLICY_CODES = VERIFY_POLICIES.codes()

# ---------------------------------------------------------------- step buffers, column-major: SI[NSI, c], SF[NSF, c]
S_REPLICA = 0
S_ITER = 1
S_LAUNCH = 2
S_KIND = 3
S_BS = 4
S_BSPAD = 5
S_WIDTH = 6
S_MINW = 7
S_MAXW = 8
S_DISTINCT = 9
S_ITERDISTINCT = 10
S_TOKENS = 11
S_PADSLOTS = 12
S_GPADSLOTS = 13
S_GRAPH = 14
S_PASSES = 15
S_KVMAX = 16
S_COMMITTED = 17
S_VIOL = 18
S_OOG = 19
S_MODE = 20
S_KVUSED = 21
S_KVCACHED = 22
S_NMEM = 23        # members whose KV the member buffer holds for this step (0: not recorded)
NSI = 24
SF_START = 0
SF_LAT = 1
SF_KVMEAN = 2
SF_ERR = 3
SF_LOOKUP = 4     # the KV coordinate of the latency lookup (prefill: attention-equivalent prefix)
NSF = 5

# request-step buffer RSI[2, c] (request, tokens), RSF[c] (delivery time)
# member buffer MK[c]: each recorded step's members' KV before the pass, in launch order
# (CI[C_RECORD_MK]; S_NMEM of them per step row)
# global fill counters G[NG]
G_SFILL = 0
G_RSFILL = 1
G_MFILL = 2
NG = 3

# advance() results
ADV_DONE = 0        # the queue is empty and nothing runs: wait for a new request
ADV_HORIZON = 1     # the clock reached the horizon: let the external event happen first
ADV_PENDING = 2     # the pending iteration ends after the horizon: wait for its end
ADV_FULL = 3        # the step buffers are full: flush them
ADV_TIMING = 4      # passes need latencies from a live executor
ADV_STUCK = 5       # the queue head can never be admitted (a configuration the checks missed)
ADV_YIELD = 6       # CI[C_YIELD] iterations applied in this call: call again (nothing else to do)

MAXPASS = 3 + 64    # a draft row, at most 64 verify launches, a draft-extend row (or one prefill)

MASK32 = 0xFFFFFFFF


@njit
def pages_for(tokens, page):
    return (tokens + page - 1) // page

