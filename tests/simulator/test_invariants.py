"""Engine invariants, checked on random traces and configurations (hypothesis).

- request conservation: every request is admitted, gets its first token and finishes once,
  with exactly its output tokens, in causal order;
- token conservation: per-step commits follow the acceptance rule; tokens delivered add up;
- KV pages never exceed capacity, and all are free at the end (the radix cache's pages aside);
- with the radix prefix cache: running + cached + free pages = the pool after every decision
  and every applied iteration, no request finds more than the ideal cache would give it, and
  no lock is left at the end;
- the clock never goes back;
- a scheduling decision never reads the acceptance of the step it decides;
- the same trace, config and seed give byte-identical result files.
"""

from __future__ import annotations

import filecmp
import json

import numpy as np
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator import core as C
from simulator import run, write_results
from simulator.config import POLICIES, SimConfig
from simulator.engine import Simulation
from simulator import radix
from tests.simulator.helpers import (LiveLike, ToyTrace, random_trace, table_executor,
                                     with_prefix)
from traces.prefix import ideal_hits

SETTINGS = settings(max_examples=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@st.composite
def scenarios(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    n = draw(st.integers(1, 40))
    rng = np.random.default_rng(seed)
    trace = random_trace(rng, n, max_draft=draw(st.integers(0, 9)),
                         rate=draw(st.sampled_from([5.0, 50.0, 500.0])),
                         prompt_max=draw(st.sampled_from([8, 200, 1500])),
                         output_max=draw(st.sampled_from([1, 20, 80])))
    policy = draw(st.sampled_from(POLICIES))
    page = draw(st.sampled_from([1, 16, 64]))
    if draw(st.booleans()):  # prefix block ids: a few shared prefixes, then ids of its own
        block = page * draw(st.sampled_from([1, 2, 4]))
        trace = _random_prefixes(rng, trace, block, families=draw(st.integers(1, 4)))
    overrides = {
        "engine.policy": policy,
        "engine.page_size": page,
        "engine.max_running": draw(st.integers(1, 12)),
        "engine.chunked_prefill_size": max(page, draw(st.sampled_from([16, 256, 8192]))),
        "engine.max_prefill_tokens": 16384,
        "engine.cuda_graph_max_bs": draw(st.sampled_from([0, 4, 256])),
        "engine.num_draft_tokens": draw(st.integers(1, 6)),
        "engine.widen": draw(st.sampled_from(["auto", "draft", "pad"])),
        "engine.max_draft": draw(st.sampled_from([0, 0, 3])),
        "engine.schedule_conservativeness": draw(st.sampled_from([0.3, 1.0, 2.0])),
        "engine.overlap": draw(st.booleans()),
        "engine.scheduler_overhead_s": draw(st.sampled_from([0.0, 1e-4])),
        "cluster.replicas": draw(st.integers(1, 3)),
        "cluster.router": draw(st.sampled_from(["round-robin", "least-outstanding-tokens",
                                                "cache-aware"])),
        "engine.radix_cache": draw(st.sampled_from(["auto", "auto", "off"])),
        "engine.schedule_policy": draw(st.sampled_from(["fcfs", "lpm"])),
        "seed": draw(st.integers(0, 1000)),
    }
    config = SimConfig.load(None, overrides)
    # from just enough KV for the largest request up to plenty
    need = int((trace.prompt_tokens + trace.output_tokens).max()) + 66
    capacity = draw(st.sampled_from([need + page, 2 * need + page, 50 * need]))
    return trace, config, capacity


@st.composite
def cache_scenarios(draw):
    """Scenarios that press the radix cache: shared prefixes always, many requests at once, a
    pool of one to four of the largest requests, and admission that reserves only each
    request's own output at a low new_token_ratio (so eviction and retraction both happen)."""
    trace, config, _ = draw(scenarios())
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    trace = random_trace(rng, draw(st.integers(10, 40)), rate=500.0,
                         prompt_max=draw(st.sampled_from([200, 1500])),
                         output_max=draw(st.sampled_from([20, 80])))
    page = config.engine.page_size
    trace = _random_prefixes(rng, trace, page * draw(st.sampled_from([1, 2, 4])),
                             families=draw(st.integers(1, 3)))
    config = config.replace({"engine.radix_cache": "auto", "engine.max_new_tokens": 1,
                             "engine.schedule_conservativeness": 0.3})
    need = int((trace.prompt_tokens + trace.output_tokens).max()) + 66
    return trace, config, draw(st.sampled_from([need + page, 2 * need + page, 4 * need]))


def _random_prefixes(rng, trace, block, families):
    """Each request shares the first blocks of one of ``families`` id sequences (a random
    number of them), then has ids of its own, at most ``ceil(prompt / block)`` in all."""
    base = [list(range(1000 * (f + 1), 1000 * (f + 1) + 64)) for f in range(families)]
    ids, fresh = [], 10**6
    for p in trace.prompt_tokens:
        most = -(-int(p) // block)
        shared = min(int(rng.integers(0, most + 1)), 64)
        own = int(rng.integers(0, most - shared + 1))
        ids.append(base[int(rng.integers(families))][:shared] + list(range(fresh, fresh + own)))
        fresh += own
    return with_prefix(trace, ids, block)


def _simulate(trace, config, capacity, executor=None):
    sim = Simulation(trace, config, executor or table_executor(), kv_capacity_tokens=capacity)
    sim.run()
    return sim


@SETTINGS
@given(scenarios())
def test_requests_and_tokens_are_conserved(sc):
    trace, config, capacity = sc
    res = run(trace, config, table_executor(), kv_capacity_tokens=capacity)
    req = res.requests
    n = len(trace.arrival_s)
    assert req.num_rows == n
    arrival = req["arrival_s"].to_numpy()
    admit, first, finish = (req[c].to_numpy() for c in ("admit_s", "first_token_s", "finish_s"))
    assert np.all(np.isfinite(admit)) and np.all(np.isfinite(first)) and np.all(np.isfinite(finish))
    assert np.all(admit >= arrival) and np.all(first > admit) and np.all(finish >= first)
    # tokens delivered add up to each request's output, and the last delivery is the finish
    rs = res.request_steps
    per_req = np.bincount(rs["request"].to_numpy(), weights=rs["tokens"].to_numpy(),
                          minlength=n)
    assert np.array_equal(per_req.astype(np.int64), trace.output_tokens.astype(np.int64))
    last = np.full(n, -np.inf)
    np.maximum.at(last, rs["request"].to_numpy(), rs["time_s"].to_numpy())
    assert np.allclose(last, finish)
    # the steps table agrees with the requests table
    steps = res.steps
    kind = steps["kind"].to_numpy(zero_copy_only=False).astype(str)
    committed = steps["committed_tokens"].to_numpy()
    assert committed.sum() == trace.output_tokens.sum()
    verify = kind == "verify"
    assert steps["bs"].to_numpy()[verify].sum() == req["steps"].to_numpy().sum()
    assert steps["padded_slots"].to_numpy()[verify].sum() == req["padded_slots"].to_numpy().sum()
    # each pass's members (member_kv): one per request in it, their longest and mean the step's,
    # and within a decode iteration the draft pass, the verify launches together and the
    # draft-extend pass hold the same requests (as KV before the pass)
    members = steps["member_kv"].to_pylist()
    bs, it = steps["bs"].to_numpy(), steps["iteration"].to_numpy()
    kv_max, kv_mean = steps["kv_max"].to_numpy(), steps["kv_mean"].to_numpy()
    rounds: dict[tuple, dict[str, list]] = {}
    for i, m in enumerate(members):
        assert len(m) == bs[i]
        if kind[i] != "prefill":
            assert max(m) == kv_max[i] and np.isclose(np.mean(m), kv_mean[i])
            rounds.setdefault((steps["replica"][i].as_py(), it[i]), {}).setdefault(
                kind[i], []).extend(m)
    for r in rounds.values():
        got = [sorted(v) for v in r.values()]
        assert all(g == got[0] for g in got)


@SETTINGS
@given(scenarios())
def test_kv_never_over_capacity_and_all_free_at_the_end(sc):
    trace, config, capacity = sc
    sim = _simulate(trace, config, capacity)
    pages = capacity // config.engine.page_size
    cached = sim.rx[4][:, radix.S_CACHED] * sim.rx[4][:, radix.S_PPB]
    assert np.all(sim.E[:, C.E_FREE] + cached == pages)  # what is not free is cached prefixes
    assert np.all(sim.R[:, C.R_PAGES] == 0)
    steps, _ = sim.sink.close()
    used = steps["kv_pages_used"].to_numpy()
    assert used.max() <= pages and used.min() >= 0
    in_cache = steps["kv_pages_cached"].to_numpy()
    assert np.all(in_cache >= 0) and np.all(in_cache <= used)


@SETTINGS
@given(scenarios())
def test_clock_never_goes_back(sc):
    trace, config, capacity = sc
    res = run(trace, config, table_executor(), kv_capacity_tokens=capacity)
    s = res.steps
    rep = s["replica"].to_numpy()
    start = s["start_s"].to_numpy()
    end = start + s["latency_s"].to_numpy()
    assert np.all(s["latency_s"].to_numpy() > 0)
    for r in np.unique(rep):
        st_, en = start[rep == r], end[rep == r]
        assert np.all(np.diff(st_) >= 0)
        assert np.all(st_[1:] >= en[:-1] - 1e-12)  # a pass starts after the previous one ended
    rs = res.request_steps
    for i in range(len(trace.arrival_s)):
        t = rs["time_s"].to_numpy()[rs["request"].to_numpy() == i]
        assert np.all(np.diff(t) > 0)


@SETTINGS
@given(scenarios())
def test_live_path_matches_the_table_fast_path(sc):
    """A live-style executor (called per batch from Python) gives the same run as the compiled
    table lookups: the two timing paths share every scheduling decision."""
    trace, config, capacity = sc
    a = run(trace, config, table_executor(), kv_capacity_tokens=capacity)
    live = LiveLike(table_executor())
    b = run(trace, config, live, kv_capacity_tokens=capacity)
    assert live.calls > 0
    assert a.requests.equals(b.requests)
    assert a.steps.drop(["max_abs_error"]).equals(b.steps.drop(["max_abs_error"]))


def _verify_commits(res, i):
    """Tokens request i committed at each verify step (the prefill's token excluded)."""
    rs = res.request_steps
    mine = rs["request"].to_numpy() == i
    return rs["tokens"].to_numpy()[mine][1:]


@SETTINGS
@given(scenarios(), st.sampled_from(["split", "ragged", "unsafe-derived"]))
def test_width_preserving_policies_commit_exactly_the_recorded_steps(sc, policy):
    """Without width changes, step k commits a_k + 1 tokens (the last one clipped at the output)."""
    trace, config, capacity = sc
    config = config.replace({"engine.policy": policy, "engine.max_draft": 0})
    capacity = capacity * 100  # no retractions: a re-prefill would add a token
    res = run(trace, config, table_executor(), kv_capacity_tokens=capacity)
    for i in range(len(trace.arrival_s)):
        acc = trace.accepted_tokens[trace.step_offsets[i]:trace.step_offsets[i + 1]]
        got = _verify_commits(res, i)
        want = (acc[:len(got)].astype(int) + 1)
        want[-1:] = np.minimum(want[-1:], trace.output_tokens[i] - 1 - want[:-1].sum())
        assert np.array_equal(got, want)


@SETTINGS
@given(scenarios())
def test_truncation_follows_the_acceptance_rule(sc):
    """Under truncate, a step verified with r < d real drafts commits min(a, r) + 1."""
    trace, config, capacity = sc
    config = config.replace({"engine.policy": "truncate", "engine.max_draft": 0,
                             "cluster.replicas": 1})
    sim = _simulate(trace, config, capacity * 100)
    res = run(trace, config, table_executor(), kv_capacity_tokens=capacity * 100)
    req = res.requests
    # truncation only loses tokens: never more than recorded per step, and never more steps
    # than needed at one token per step
    for i in range(len(trace.arrival_s)):
        got = _verify_commits(res, i)
        lo, hi = trace.step_offsets[i], trace.step_offsets[i + 1]
        ns = hi - lo
        if ns == 0:
            assert len(got) == 0
            continue
        k = np.arange(len(got)) % ns
        rec = trace.accepted_tokens[lo:hi].astype(int)[k] + 1
        assert np.all(got >= 1) and np.all(got <= rec)
    assert (req["truncated_drafts"].to_numpy() >= 0).all()
    assert sim.R[:, C.R_ACCEPTED].sum() <= sim.R[:, C.R_VERIFIED].sum()


def _changed_acceptance(trace: ToyTrace, i: int, k: int) -> ToyTrace:
    acc = trace.accepted_tokens.copy()
    idx = trace.step_offsets[i] + k
    d = int(trace.draft_tokens[idx])
    acc[idx] = 0 if acc[idx] > 0 else d
    # keep the lists long enough for the output: the engine cycles through them anyway
    return ToyTrace(**{**trace.__dict__, "accepted_tokens": acc})


@SETTINGS
@given(scenarios(), st.data())
def test_decisions_never_read_the_acceptance_of_the_step_being_decided(sc, data):
    """Changing the recorded acceptance of request i's step k changes nothing the engine did
    up to and including the launch that verifies that step (same batches, widths, latencies)."""
    _check_blind_to_current_acceptance(*sc, data)


#: controllers a real scheduler can run (the oracle reads the round's acceptance by design)
REAL_CONTROLLERS = ("static", "schedule", "threshold", "sglang-adaptive", "goodput")


@st.composite
def controller_scenarios(draw):
    """A scenario with a speculation controller on (policy fixed, as the controllers need),
    switching often: short SGLang warm-up and update interval, a schedule over small batches."""
    trace, config, capacity = draw(scenarios())
    name = draw(st.sampled_from(REAL_CONTROLLERS))
    adaptive = ('{"ema_alpha": 0.5, "update_interval": 1, "warmup_batches": 0, '
                '"1": {"candidate_steps": [0, 1, 3]}, "3": {"candidate_steps": [1, 2, 5], '
                '"up_hysteresis": 0.0, "down_hysteresis": 0.0}}')
    config = config.replace({"engine.policy": "fixed", "engine.controller": name,
                             "engine.widen": "auto",
                             "controller.schedule": "1-1:4,2-3:1,5-8:0",
                             "controller.max_bs": draw(st.integers(0, 4)),
                             "controller.adaptive_config": adaptive,
                             "controller.switch_cost_s": draw(st.sampled_from([0.0, 1e-3]))})
    return trace, config, capacity


@SETTINGS
@given(controller_scenarios(), st.data())
def test_controllers_never_read_the_acceptance_of_the_round_being_decided(sc, data):
    """The same with a speculation controller choosing each round's draft count: it learns a
    round's acceptance only after the round."""
    _check_blind_to_current_acceptance(*sc, data)


@SETTINGS
@given(controller_scenarios())
def test_controllers_keep_requests_kv_and_widths_consistent(sc):
    """With a controller on, requests finish with their output, the pool is whole at the end,
    every verify is at a width the controller can choose, and its record adds up."""
    trace, config, capacity = sc
    sim = _simulate(trace, config, capacity)
    assert np.all(sim.R[:, C.R_GEN] == trace.output_tokens)
    cached = sim.rx[4][:, radix.S_CACHED] * sim.rx[4][:, radix.S_PPB]  # prefixes stay cached
    assert np.all(sim.E[:, C.E_FREE] + cached == capacity // config.engine.page_size)
    steps, _ = sim.sink.close()
    verify = np.asarray(steps["kind"].to_pylist()) == "verify"
    widths = set(steps["width"].to_numpy()[verify].tolist())
    assert widths <= set(config.verify_widths_captured)
    stats = sim.controller_stats(1.0)
    assert stats["rounds"] == int(verify.sum())
    assert sum(stats["rounds_by_draft_tokens"].values()) == stats["rounds"]


def _check_blind_to_current_acceptance(trace, config, capacity, data):
    capacity *= 100  # no retractions, so step k is request i's (k+1)-th delivery after prefill
    with_steps = [i for i in range(len(trace.arrival_s))
                  if trace.step_offsets[i + 1] > trace.step_offsets[i]]
    if not with_steps:
        return
    i = data.draw(st.sampled_from(with_steps))
    a = run(trace, config, table_executor(), kv_capacity_tokens=capacity)
    commits = _verify_commits(a, i)
    if len(commits) == 0:
        return
    k = data.draw(st.integers(0, min(len(commits), trace.step_offsets[i + 1]
                                     - trace.step_offsets[i]) - 1))
    b = run(_changed_acceptance(trace, i, k), config, table_executor(),
            kv_capacity_tokens=capacity)
    rs = a.request_steps
    t_decided = rs["time_s"].to_numpy()[rs["request"].to_numpy() == i][k + 1]
    sa, sb = a.steps, b.steps
    end_a = sa["start_s"].to_numpy() + sa["latency_s"].to_numpy()
    upto = int(np.searchsorted(np.sort(end_a), t_decided, side="right"))
    keep = end_a <= t_decided
    assert keep.sum() == upto
    cols = [c for c in sa.column_names if c not in ("committed_tokens", "max_abs_error")]
    rows_a = sa.filter(pa.array(keep)).select(cols)
    end_b = sb["start_s"].to_numpy() + sb["latency_s"].to_numpy()
    rows_b = sb.filter(pa.array(end_b <= t_decided)).select(cols)
    assert rows_a.equals(rows_b)


def test_same_inputs_give_byte_identical_files(tmp_path):
    rng = np.random.default_rng(7)
    trace = random_trace(rng, 120, rate=80)
    config = SimConfig.load(None, {"engine.policy": "bucket", "cluster.replicas": 2,
                                   "cluster.router": "least-outstanding-tokens", "seed": 3})
    for name in ("a", "b"):
        write_results(run(trace, config, table_executor(), kv_capacity_tokens=30000),
                      tmp_path / name)
    for f in ("requests.parquet", "steps.parquet", "request_steps.parquet"):
        assert filecmp.cmp(tmp_path / "a" / f, tmp_path / "b" / f, shallow=False), f
    sa = json.loads((tmp_path / "a" / "summary.json").read_text())
    sb = json.loads((tmp_path / "b" / "summary.json").read_text())
    sa.pop("wall_s"), sb.pop("wall_s")
    assert sa == sb


class _Checked(Simulation):
    """A simulation that checks the page pool after every return of the compiled loop (one
    applied iteration, or one decided iteration, at a time)."""

    def _advance(self, r, horizon):
        self.CI[C.C_YIELD] = 1
        status = super()._advance(r, horizon)
        R, E = self.R, self.E
        mine = R[:, C.R_REPLICA] == r
        own = R[mine, C.R_PAGES] - R[mine, C.R_SHARED]
        assert np.all(own >= 0) and np.all(R[mine, C.R_SHARED] <= R[mine, C.R_PAGES])
        cached = int(radix.cached_pages(self.rx[4][r]))
        assert int(own.sum()) + cached + int(E[r, C.E_FREE]) == int(E[r, C.E_CAP])
        assert int(E[r, C.E_CACHED]) == int(radix.evictable_pages(self.rx[4][r]))
        self.checks += 1
        return status


@SETTINGS
@given(st.one_of(scenarios(), cache_scenarios()))
def test_pool_is_running_plus_cached_plus_free_and_hits_stay_within_the_ideal(sc):
    trace, config, capacity = sc
    sim = _Checked(trace, config, table_executor(), kv_capacity_tokens=capacity)
    sim.checks = 0
    sim.run()
    assert sim.checks > 0
    assert np.all(sim.R[:, C.R_STATUS] == C.ST_DONE)
    assert np.all(sim.R[:, C.R_NODE] == 0)
    for r in range(sim.replicas):
        state = tuple(a[r] for a in sim.rx)
        assert radix.check_state(state) == []
        # every request is done: no lock is left, so the whole cache is evictable
        assert radix.evictable_pages(state[4]) == radix.cached_pages(state[4])
        assert sim.E[r, C.E_FREE] + radix.cached_pages(state[4]) == sim.E[r, C.E_CAP]
    if trace.prefix_offsets is not None:
        ideal = ideal_hits(trace.prompt_tokens, trace.prefix_offsets, trace.prefix_ids,
                           trace.prefix_block_tokens) * trace.prefix_block_tokens
        got = sim.R[:, C.R_HIT]
        if config.engine.schedule_policy == "fcfs":  # lpm may admit a later arrival first
            assert np.all(got <= ideal)
        if not sim.radix_on:
            assert got.sum() == 0
