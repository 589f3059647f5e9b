"""The discrete-event layer: a SimPy environment with one process per replica and one for arrivals.

Request state lives in arrays (``simulator.core``), not in a process per request.  A replica
process runs its engine loop through :func:`simulator.core.advance`, which executes iterations
until something outside the replica must happen: the next arrival the router may send it (its
*horizon*), the end of an iteration that crosses that horizon, full step buffers, or a live
executor that must time the passes.  So SimPy events are spent only where replicas and the
arrival process interact; between them the replica's own clock advances iteration by iteration,
and the result is the same as one event per forward pass.

Routing: ``round-robin`` does not depend on replica state, so every request is handed to its
replica up front and the replica admits it once its clock reaches the arrival time.
``least-outstanding-tokens`` reads replica state, so the arrival process routes each request at
its arrival time, after every replica has applied the iterations that ended by then
(completions at time t happen before arrivals at time t; decisions at t see arrivals at t).
``cache-aware`` (SGLang router's ``cache_aware`` policy) does the same, with its own per-replica
trees of the prefix blocks it routed.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import simpy

from backends.latency_table import LatencyTable, extend_arrays
from backends.moe_prefill import NPRM
from backends.prefill_waves import NWPRM
from backends.protocol import (VERIFY_MODES, DraftBatch, DraftExtendBatch, Executor, PrefillBatch,
                               VerifyBatch)
from simulator import cache_ops
from simulator import controller_config
from simulator import controllers as K
from simulator import core as C
from simulator import sglang, startup
from simulator.config import SimConfig
from simulator.results import StepSink
from traces.errors import SpecschedError

__all__ = ["Simulation", "StepBuffers"]

_INF = math.inf
#: SGLang router's ``CacheAwareConfig`` defaults (``sgl-router/src/policies/mod.rs``)
ROUTER_CACHE_THRESHOLD = 0.5
ROUTER_BALANCE_ABS = 32
ROUTER_BALANCE_REL = 1.1
#: Work one compiled ``advance`` call may do before it returns to Python, so that Ctrl-C or
#: SIGTERM, which Python acts on only between calls, stops a run of any size at once.  Measured
#: on the 2-core development machine: an iteration costs about 5 us plus 0.025 us per running
#: request, i.e. (max_running + ITER_SLOTS) x 0.025 us; CHUNK_WORK such units are ~0.1 s.
CHUNK_WORK = 1 << 22
ITER_SLOTS = 200


def _table_tuple(table: LatencyTable | None) -> tuple:
    """The 31 arrays the compiled core evaluates (dummies when there is no table): the grids'
    axes and values, then the prefill lookup's MoE block cost per tile and parameters
    (``backends.moe_prefill``), its attention wave cost per prefix line and parameters
    (``backends.prefill_waves``) and its prefill line's token counts and seconds (empty without
    one: ``backends.prefill_line``)."""
    if table is None:
        one = np.ones(1)
        g3 = (one, one, one, np.ones((1, 1, 1)))
        g2 = (one, one, np.ones((1, 1)))
        return g3 + g3 + g2 + g2 + g2 + g3 + g3 + (np.zeros(3), np.zeros(NPRM), np.zeros(1),
                                                    np.zeros(NWPRM), np.zeros(0), np.zeros(0))
    out = []
    for g in (table.verify_graph, table.verify_eager, table.draft_graph, table.draft_eager,
              table.prefill):
        out.extend(g.axes)
        out.append(g.values)
    return tuple(out) + tuple(extend_arrays(table)) + (table._pf_cost, table._pf_moe,
                                                        table._pf_wave, table._pf_wprm,
                                                        table._pl_tok, table._pl_val)


class StepBuffers:
    """Fixed-size buffers the core appends step rows to; handed to a sink when full."""

    def __init__(self, sink, rows: int = 1 << 16, request_rows: int = 1 << 17,
                 member_rows: int = 1 << 20):
        self.sink = sink
        # column-major, so each column of a flushed chunk is contiguous
        self.SI = np.zeros((C.NSI, rows), np.int32)
        self.SF = np.zeros((C.NSF, rows), np.float64)
        self.RSI = np.zeros((2, request_rows), np.int64)
        self.RSF = np.zeros(request_rows, np.float64)
        self.MK = np.zeros(member_rows, np.int32)
        self.G = np.zeros(C.NG, np.int64)

    def flush(self) -> None:
        k, q, m = int(self.G[C.G_SFILL]), int(self.G[C.G_RSFILL]), int(self.G[C.G_MFILL])
        if k or q:  # copies: the buffers are reused while the sink may keep what it got
            self.sink.add(self.SI[:, :k].copy(), self.SF[:, :k].copy(),
                          self.RSI[:, :q].copy(), self.RSF[:q].copy(), self.MK[:m].copy())
        self.G[:] = 0


@dataclass
class _Inputs:
    arrival: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    mnt: np.ndarray       # max_new_tokens per request (the admission reservation's bound)
    off: np.ndarray
    draft: np.ndarray
    acc: np.ndarray
    pacc: np.ndarray


class Simulation:
    """One run: the arrays, the SimPy environment and its processes.  Use :func:`simulator.run`."""

    def __init__(self, trace, config: SimConfig, executor: Executor, *,
                 kv_capacity_tokens: int, progress: Callable[[int, int], None] | None = None,
                 sink: StepSink | None = None, context_len: int = 0):
        self.trace = trace
        self.config = config
        self.executor = executor
        self.progress = progress
        e = config.engine
        n = len(trace.arrival_s)
        if n == 0:
            raise SpecschedError("the trace has no requests", path=getattr(trace, "path", None))
        self.n = n
        self.replicas = config.cluster.replicas
        self.table = executor.latency_table()
        arrival = np.ascontiguousarray(trace.arrival_s, dtype=np.float64) / config.rate_scale
        self.inp = _Inputs(
            arrival=arrival,
            prompt=np.ascontiguousarray(trace.prompt_tokens, dtype=np.int64),
            output=np.ascontiguousarray(trace.output_tokens, dtype=np.int64),
            mnt=startup.max_new_tokens(trace, e, context_len, kv_capacity_tokens),
            off=np.ascontiguousarray(trace.step_offsets, dtype=np.int64),
            draft=np.ascontiguousarray(trace.draft_tokens, dtype=np.int16),
            acc=np.ascontiguousarray(trace.accepted_tokens, dtype=np.int16),
            pacc=np.ascontiguousarray(trace.acceptance["position_accept_prob"], dtype=np.float64),
        )
        if self.inp.pacc.ndim != 1 or len(self.inp.pacc) == 0:
            raise SpecschedError("the trace's acceptance metadata has no position_accept_prob",
                                 path=getattr(trace, "path", None))
        # ---- the configuration the core reads
        ladder = e.ladder
        max_cap = max(ladder) if ladder else 0
        padmap = np.zeros(max(max_cap, 1) + 1, np.int64)
        j = 0
        for b in range(1, max_cap + 1):
            while ladder[j] < b:
                j += 1
            padmap[b] = ladder[j]
        capw = np.zeros(65, np.int64)
        for w in config.verify_widths_captured:
            capw[w] = 1
        self.padmap, self.capw = padmap, capw
        self.buckets = np.array(sorted(set(e.buckets)), np.int64)
        fixed = e.num_draft_tokens
        self.CI = np.zeros(C.NCI, np.int64)
        self.CI[C.C_PAGE] = e.page_size
        self.CI[C.C_MAXRUN] = e.running_cap
        self.CI[C.C_CHUNK] = e.chunk_size
        self.CI[C.C_POLICY] = C.POLICY_CODES[e.policy]
        self.CI[C.C_FIXED] = fixed
        self.CI[C.C_MLA] = 1 if e.mla else 0  # 3 drafts' width launches padded to 4
        self.CI[C.C_WIDEN] = 1 if e.widen_drafts else 0
        self.CI[C.C_MAXDRAFT] = e.max_draft
        self.CI[C.C_SEED] = config.seed & 0xFFFFFFFF
        self.CI[C.C_MAXCAPBS] = max_cap
        self.CI[C.C_FAST] = 1 if self.table is not None else 0
        self.CI[C.C_MAXPREFILL] = e.max_prefill_tokens
        self.CI[C.C_RECORD_RS] = 1 if e.record_request_steps else 0
        self.CI[C.C_RECORD_MK] = 1 if e.record_member_kv else 0
        spec = e.speculative and trace.acceptance.get("speculation", True) is not False
        self.CI[C.C_SPEC] = 1 if spec else 0
        self.CI[C.C_CLIP] = sglang.CLIP_MAX_NEW_TOKENS
        # with a controller, SGLang sizes the per-decode allocation for the widest candidate
        self.CI[C.C_DECODE_RESERVE] = sglang.decode_reserve_tokens(
            config.max_verify_width if spec else 1)
        self.KC = controller_config.build_kc(e.controller, config.controller,
                                             e.num_draft_tokens, speculative=spec)
        if (int(self.KC[K.K_KIND]) in (K.CT_GOODPUT, K.CT_ORACLE) and self.table is None):
            raise SpecschedError(f"engine.controller '{e.controller}' prices each candidate "
                                 "from a latency table: use the profile or roofline backend")
        self.CI[C.C_RETRACT_STEPS] = sglang.RETRACT_DECODE_STEPS
        self.CI[C.C_OVERLAP] = 1 if e.overlap else 0
        self.CI[C.C_YIELD] = max(1, CHUNK_WORK // (e.running_cap + ITER_SLOTS))
        self.CF = np.zeros(C.NCF, np.float64)
        self.CF[C.CF_OVERHEAD] = e.scheduler_overhead_s
        ratio0, ratio_min, decay = sglang.new_token_ratio_params(e.schedule_conservativeness)
        self.CF[C.CF_RATIO_INIT] = ratio0
        self.CF[C.CF_RATIO_MIN] = ratio_min
        self.CF[C.CF_RATIO_DECAY] = decay
        # backend.kv_lookup resolved on this table, the core's attention vector set for it
        self.straggler_kv, self.kv_lookup = startup.set_kv_lookup(
            self.CF, self.table, config.backend.kv_lookup, executor)
        self.bs_interp = startup.set_bs_interp(self.CF, config.backend.bs_interp, executor)
        self.tab = _table_tuple(self.table)
        startup.check_feasible(trace, config, self.inp, kv_capacity_tokens)
        self._setup_radix(trace, e, kv_capacity_tokens // e.page_size)
        # ---- state
        R = self.replicas
        self.capacity_pages = kv_capacity_tokens // e.page_size
        self.R = np.zeros((n, C.NR), np.int64)
        self.RF = np.full((n, C.NRF), np.nan)
        self.RF[:, C.F_LAST] = -1.0
        self.RF[:, C.F_MAXGAP] = 0.0
        self.E = np.zeros((R, C.NE), np.int64)
        self.E[:, C.E_FREE] = self.capacity_pages
        self.E[:, C.E_CAP] = self.capacity_pages
        self.E[:, C.E_CHUNKED] = -1
        self.EF = np.zeros((R, C.NEF), np.float64)
        self.EF[:, C.EF_RATIO] = ratio0
        self.KS = np.zeros((R, K.NKS), np.float64)
        K.init_state(self.KC, self.KS)
        self.Q = np.zeros((R, n + 1), np.int64)
        self.W = np.zeros((R, n + 1), np.int64)
        self.WT = np.zeros((R, n + 1), np.float64)
        self.RUN = np.zeros((R, e.running_cap), np.int64)
        self.MB = np.zeros((R, e.running_cap + 1, C.NMB), np.int64)
        self.PI = np.zeros((R, C.MAXPASS, C.NPI), np.int64)
        self.PF = np.zeros((R, C.MAXPASS, C.NPF), np.float64)
        self.sink = sink if sink is not None else StepSink(
            request_steps=config.engine.record_request_steps,
            member_kv=config.engine.record_member_kv)
        self.buf = StepBuffers(self.sink)
        # ---- events
        self.env = simpy.Environment()
        self.next_arrival = _INF
        self.arrivals_done = False
        self.wake: list[simpy.Event | None] = [None] * R
        self._failed: BaseException | None = None   # the first error (or Ctrl-C) of any process
        self.router = config.cluster.router
        self.state_dependent = self.router in ("least-outstanding-tokens", "cache-aware")
        self._rr = 0
        if self.router == "cache-aware":
            self._setup_router()

    # ------------------------------------------------------------------ prefix cache
    def _setup_radix(self, trace, e, pool_pages: int) -> None:
        """The replicas' radix caches (``simulator.cache_ops``) and the trace's prefix ids."""
        n = self.n
        offsets = getattr(trace, "prefix_offsets", None)
        self.has_prefix = offsets is not None
        self.radix_on = self.has_prefix and e.radix_cache in ("auto", "on")
        self.block = int(trace.prefix_block_tokens) if self.has_prefix else 1
        if self.has_prefix:
            self.poff = np.ascontiguousarray(offsets, dtype=np.int64)
            self.pids = np.ascontiguousarray(trace.prefix_ids, dtype=np.int64)
        else:
            self.poff = np.zeros(n + 1, np.int64)
            self.pids = np.zeros(1, np.int64)
        ppb = 1
        capacity_blocks = 0
        if self.radix_on:
            if self.block % e.page_size:
                raise SpecschedError(
                    f"the trace's prefix blocks ({self.block} tokens) are not a whole number of "
                    f"KV pages ({e.page_size} tokens): the radix cache matches whole blocks, "
                    "which must end on a page boundary; set engine.page_size to a divisor of "
                    f"{self.block}, or engine.radix_cache=off", path=getattr(trace, "path", None))
            ppb = self.block // e.page_size
            capacity_blocks = pool_pages // ppb
        self.rx = cache_ops.new_states(self.replicas, capacity_blocks, ppb)
        self.CI[C.C_RADIX] = 1 if self.radix_on else 0
        self.CI[C.C_BLOCK] = self.block
        self.CI[C.C_PPB] = ppb
        self.CI[C.C_LPM] = 1 if (self.radix_on and e.schedule_policy == "lpm") else 0

    def _setup_router(self) -> None:
        """SGLang router's ``cache_aware`` policy, approximated over prefix blocks: one tree per
        replica of the blocks routed there (never evicted), the tokens each tree holds, and
        the requests routed and not finished (the router's worker load)."""
        total = int(self.poff[-1]) if self.has_prefix else 0
        self.router_trees = [cache_ops.new_states(1, max(total, 1), 1)
                             for _ in range(self.replicas)]
        self.router_tokens = np.zeros(self.replicas, np.int64)
        self.routed = np.zeros(self.replicas, np.int64)

    def _route_cache_aware(self, i: int) -> int:
        """The replica SGLang's cache-aware router picks (``sgl-router/src/policies/
        cache_aware.rs``): when loads are imbalanced (max - min > 32 and max > 1.1 x min) the
        least loaded; else the replica whose tree holds the longest prefix when it covers more
        than half the prompt, else the one with the smallest tree.  Ties: lowest index."""
        load = self.routed - self.E[:, C.E_FINISHED]
        lo, hi = int(load.min()), int(load.max())
        n_ids = int(self.poff[i + 1] - self.poff[i])
        prompt = int(self.inp.prompt[i])
        if hi - lo > ROUTER_BALANCE_ABS and hi > lo * ROUTER_BALANCE_REL:
            r = int(np.argmin(load))
        else:
            hits = [int(cache_ops.peek(t, 0, i, n_ids, self.poff, self.pids))
                    for t in self.router_trees]
            best = int(np.argmax(hits))
            rate = min(hits[best] * self.block, prompt) / prompt if prompt else 0.0
            r = best if rate > ROUTER_CACHE_THRESHOLD else int(np.argmin(self.router_tokens))
        # the request joins the chosen replica's tree (both branches, as the router does)
        tree = self.router_trees[r]
        prefix = 0
        if n_ids:
            prefix, _ = cache_ops.insert_move(tree, 0, i, n_ids, 0, self.poff, self.pids, 0.0)
            cache_ops.unlock(tree, 0, int(_))
        self.router_tokens[r] += max(prompt - prefix * self.block, 0)
        self.routed[r] += 1
        return r

    # ------------------------------------------------------------------ running
    def compile(self) -> float:
        """Compile the core for this run's argument types (or load it from numba's cache)
        before the run is timed; returns the seconds it took.  The call to ``advance`` returns
        at once without touching the state: a horizon of -inf is before every clock."""
        from backends.jit import precompile

        t0 = time.perf_counter()
        self._advance(0, -_INF)
        if self.state_dependent:
            precompile(C.queue_push_back, self.Q, self.E, 0, 0)
        return time.perf_counter() - t0

    def _advance(self, r: int, horizon: float) -> int:
        i = self.inp
        b = self.buf
        return int(C.advance(r, horizon, i.arrival, i.prompt, i.output, i.mnt, i.off, i.draft, i.acc,
                             i.pacc, self.R, self.RF, self.E, self.EF, self.Q, self.W, self.WT,
                             self.RUN, self.MB,
                             self.PI, self.PF, b.SI, b.SF, b.RSI, b.RSF, b.G, self.CI, self.CF,
                             self.padmap, self.capw, self.buckets, self.tab, self.KC, self.KS,
                             self.poff, self.pids, self.rx, b.MK))

    def _route(self, i: int) -> int:
        if self.router == "cache-aware":
            return self._route_cache_aware(i)
        if self.state_dependent:
            return int(np.argmin(self.E[:, C.E_OUTSTANDING]))  # ties: lowest index
        r = self._rr
        self._rr = (self._rr + 1) % self.replicas
        return r

    def _assign(self, i: int) -> int:
        r = self._route(i)
        self.R[i, C.R_REPLICA] = r
        C.queue_push_back(self.Q, self.E, r, i)
        self.E[r, C.E_OUTSTANDING] += int(self.inp.prompt[i])
        return r

    def _report(self) -> None:
        if self.progress is not None:
            self.progress(int(self.E[:, C.E_FINISHED].sum()), self.n)

    def _replica(self, r: int):
        """Replica r's SimPy process.  An exception in any process (Ctrl-C included) stops every
        process at once and :meth:`run` re-raises it: SimPy alone would let the other replicas
        run to their end before the failure surfaced."""
        try:
            yield from self._replica_loop(r)
        except GeneratorExit:
            raise
        except BaseException as exc:  # noqa: BLE001 - re-raised by run()
            if self._failed is None:
                self._failed = exc

    def _replica_loop(self, r: int):
        env = self.env
        while self._failed is None:
            horizon = self.next_arrival if self.state_dependent else _INF
            status = self._advance(r, horizon)
            if status == C.ADV_FULL:
                self.buf.flush()
                self._report()
            elif status == C.ADV_YIELD:
                self._report()
            elif status == C.ADV_TIMING:
                self._time_live(r)
                self._report()  # live steps take milliseconds each: report as they go
            elif status == C.ADV_PENDING:
                yield env.timeout(self.EF[r, C.EF_PEND_END] - env.now)
            elif status == C.ADV_HORIZON:
                yield env.timeout(max(self.EF[r, C.EF_CLOCK] - env.now, 0.0))
            elif status == C.ADV_DONE:
                yield env.timeout(max(self.EF[r, C.EF_CLOCK] - env.now, 0.0))
                if not self.state_dependent or self.arrivals_done:
                    return
                self.wake[r] = env.event()
                yield self.wake[r]
                self.wake[r] = None
                self.EF[r, C.EF_CLOCK] = max(self.EF[r, C.EF_CLOCK], env.now)
            elif status == C.ADV_STUCK:
                raise SpecschedError("a waiting request can never be admitted (KV budget too "
                                     "small for it)")
            else:  # pragma: no cover - a core bug
                raise RuntimeError(f"unexpected core status {status}")

    def _arrivals(self):
        env = self.env
        arrival = self.inp.arrival
        for i in range(self.n):
            if self._failed is not None:
                return
            t = float(arrival[i])
            if t > env.now:
                yield env.timeout(t - env.now)
            r = self._assign(i)
            self.next_arrival = float(arrival[i + 1]) if i + 1 < self.n else _INF
            if self.wake[r] is not None and not self.wake[r].triggered:
                self.wake[r].succeed()
        self.arrivals_done = True
        for ev in self.wake:
            if ev is not None and not ev.triggered:
                ev.succeed()

    def run(self) -> None:
        if self.state_dependent:
            self.next_arrival = float(self.inp.arrival[0])
            self.env.process(self._arrivals())
        else:  # round-robin: routing does not depend on state, so hand everything out now
            reps = np.arange(self.n, dtype=np.int64) % self.replicas
            self.R[:, C.R_REPLICA] = reps
            for r in range(self.replicas):
                mine = np.flatnonzero(reps == r)
                self.Q[r, :len(mine)] = mine
                self.E[r, C.E_QHEAD] = 0
                self.E[r, C.E_QLEN] = len(mine)
                self.E[r, C.E_OUTSTANDING] = int(self.inp.prompt[mine].sum())
            self.arrivals_done = True
        for r in range(self.replicas):
            self.env.process(self._replica(r))
        self.env.run()
        if self._failed is not None:
            raise self._failed
        self.buf.flush()
        self._report()
        unfinished = int((self.R[:, C.R_STATUS] != C.ST_DONE).sum())
        if unfinished:  # pragma: no cover - a core bug
            raise RuntimeError(f"{unfinished} requests did not finish")

    # ------------------------------------------------------------------ live executors
    def _time_live(self, r: int) -> None:
        """Time the pending passes of replica r with a live executor (no latency table)."""
        PI, PF, MB = self.PI[r], self.PF[r], self.MB[r]
        for p in range(int(self.E[r, C.E_NPASS])):
            m0 = int(PI[p, C.P_MSTART])
            m1 = m0 + int(PI[p, C.P_MCOUNT])
            kind = int(PI[p, C.P_KIND])
            err = math.nan
            oog = False
            if kind == C.KIND_PREFILL:
                lat = self.executor.prefill(PrefillBatch(tokens=MB[m0:m1, C.M_TOK].copy(),
                                                         prefix=MB[m0:m1, C.M_KV].copy()))
            elif kind == C.KIND_DRAFT:
                lat = self.executor.draft(DraftBatch(
                    bs_real=int(PI[p, C.P_BS]), bs_padded=int(PI[p, C.P_BSPAD]),
                    kv_lens=MB[m0:m1, C.M_KV].copy(), passes=int(PI[p, C.P_PASSES]),
                    graph=bool(PI[p, C.P_GRAPH])))
            elif kind == C.KIND_EXTEND:
                lat = self.executor.draft_extend(DraftExtendBatch(
                    bs_real=int(PI[p, C.P_BS]), bs_padded=int(PI[p, C.P_BSPAD]),
                    width=int(PI[p, C.P_WIDTH]), kv_lens=MB[m0:m1, C.M_KV].copy(),
                    graph=bool(PI[p, C.P_GRAPH])))
            else:
                timing = self.executor.verify(VerifyBatch(
                    bs_real=int(PI[p, C.P_BS]), bs_padded=int(PI[p, C.P_BSPAD]),
                    widths=MB[m0:m1, C.M_V].copy(), kv_lens=MB[m0:m1, C.M_KV].copy(),
                    launch_width=int(PI[p, C.P_WIDTH]), mode=VERIFY_MODES[int(PI[p, C.P_MODE])],
                    graph=bool(PI[p, C.P_GRAPH])))
                lat = timing.latency_s
                oog = timing.out_of_grid
                if timing.max_abs_error is not None:
                    err = float(timing.max_abs_error)
            if not (lat > 0 and math.isfinite(lat)):
                raise RuntimeError(f"executor {self.executor.name} returned latency {lat!r}")
            PF[p, C.PF_LAT] = lat
            PF[p, C.PF_ERR] = err
            PI[p, C.P_OOG] = 1 if oog else 0
        self.E[r, C.E_TIMED] = 1
        self.EF[r, C.EF_PEND_END] = self.EF[r, C.EF_CLOCK] + C.iteration_time(
            r, self.E, self.EF, self.PF, self.CI, self.CF)

    # ------------------------------------------------------------------ results
    def prefix_summary(self) -> dict[str, Any]:
        """The prefix-cache keys of summary.json (docs/simulator.md)."""
        prompt = int(self.inp.prompt.sum())
        hit = int(self.R[:, C.R_HIT].sum())
        out: dict[str, Any] = {
            "radix_cache": bool(self.radix_on),
            "schedule_policy": "lpm" if self.CI[C.C_LPM] else "fcfs",
            "prefix_cached_tokens": hit,
            "prefix_cache_hit_rate": hit / prompt if prompt else 0.0,
            "prefix_cache_inserted_tokens": cache_ops.inserted_blocks(self.rx) * self.block,
            "prefix_cache_evicted_tokens": cache_ops.evicted_blocks(self.rx) * self.block,
            "prefix_ideal_hit_rate": None,
        }
        if self.has_prefix and prompt:
            from traces.prefix import ideal_hits

            ideal = ideal_hits(self.inp.prompt, self.poff, self.pids, self.block)
            out["prefix_ideal_hit_rate"] = int(ideal.sum()) * self.block / prompt
        return out

    def request_arrays(self) -> dict[str, Any]:
        R, RF = self.R, self.RF
        return {
            "replica": R[:, C.R_REPLICA].astype(np.int16),
            "arrival_s": self.inp.arrival,
            "admit_s": RF[:, C.F_ADMIT],
            "first_token_s": RF[:, C.F_FIRST],
            "finish_s": RF[:, C.F_FINISH],
            "prompt_tokens": self.inp.prompt.astype(np.int32),
            "output_tokens": self.inp.output.astype(np.int32),
            "steps": R[:, C.R_STEPS].astype(np.int32),
            "drafted_tokens": R[:, C.R_DRAFTED].astype(np.int32),
            "verified_drafts": R[:, C.R_VERIFIED].astype(np.int32),
            "accepted_tokens": R[:, C.R_ACCEPTED].astype(np.int32),
            "truncated_drafts": R[:, C.R_TRUNC].astype(np.int32),
            "padded_slots": R[:, C.R_PADDED].astype(np.int32),
            "retractions": R[:, C.R_RETRACT].astype(np.int32),
            "cached_tokens": R[:, C.R_HIT].astype(np.int32),
            "max_gap_s": RF[:, C.F_MAXGAP],
        }

    def controller_stats(self, duration_s: float) -> dict[str, Any]:
        """The controller's record over all replicas: rounds per draft count, step switches
        (rounds whose draft count differs from the replica's previous round) and their rate."""
        ks = self.KS
        e = self.config.engine
        rounds = int(ks[:, K.KS_ROUNDS].sum())
        switches = int(ks[:, K.KS_SWITCHES].sum())
        hist = ks[:, K.KS_HIST:K.KS_HIST + 65].sum(axis=0)
        return {
            "name": e.controller,
            "rounds": rounds,
            "rounds_by_draft_tokens": {str(w - 1): int(hist[w]) for w in range(1, 65) if hist[w]},
            "switches": switches,
            "switches_per_s": switches / duration_s if duration_s > 0 else None,
            "switch_cost_s": self.config.controller.switch_cost_s,
            "switch_time_s": switches * self.config.controller.switch_cost_s,
            "captured_widths": list(self.config.verify_widths_captured),
        }
