"""The runner's timing hygiene helpers (no GPU needed): the garbage collector is held off inside
timed regions and restored after, and the spin-wait returns exactly when the event completes."""

from __future__ import annotations

import gc

import pytest

from backends.aiter.runner import gc_paused, wait_event


def test_gc_paused_holds_the_collector_off_and_restores_it():
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with gc_paused():
            raise RuntimeError("timed body failed")
    assert gc.isenabled(), "restored after an exception too"
    with gc_paused(enabled=False):
        assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled(), "a collector the caller disabled stays disabled"
    finally:
        gc.enable()


class _Event:
    def __init__(self, ready_after: int) -> None:
        self.queries = 0
        self.ready_after = ready_after
        self.synced = False

    def query(self) -> bool:
        self.queries += 1
        return self.queries > self.ready_after

    def synchronize(self) -> None:
        self.synced = True


def test_wait_event_spins_until_complete_or_blocks_when_asked():
    ev = _Event(ready_after=1000)
    wait_event(ev)
    assert ev.queries == 1001 and not ev.synced
    ev = _Event(ready_after=5)
    wait_event(ev, spin=False)
    assert ev.synced and ev.queries == 0


def test_hold_estimate_rises_at_most_twofold_decays_slowly_and_doubles_when_starved():
    from types import SimpleNamespace

    from backends.aiter.runner import FIRST_LEAD_CAP_S, MAX_LEAD_S, Runner, lead_kind

    r = SimpleNamespace(_lead={})
    k = ("verify", 8, 4)
    Runner._note_lead(r, k, 100e-6, False)
    assert r._lead[k] == pytest.approx(100e-6)
    Runner._note_lead(r, k, 150e-6, False)          # a slower launch: up at once
    assert r._lead[k] == pytest.approx(150e-6)
    Runner._note_lead(r, k, 900e-6, False)          # but at most twofold (a stall is a one-off)
    assert r._lead[k] == pytest.approx(300e-6)
    Runner._note_lead(r, k, 100e-6, False)          # a faster one: down by 5% of the gap
    assert r._lead[k] == pytest.approx(0.95 * 300e-6 + 0.05 * 100e-6)
    before = r._lead[k]
    kind_before = r._lead[lead_kind(k)]
    Runner._note_lead(r, k, 50e-6, True)            # the hold ran out first: at least doubled
    assert r._lead[k] == pytest.approx(2 * before)
    assert r._lead[lead_kind(k)] == kind_before     # the kind learns from clean runs only
    # a key seen for the first time starts from its kind's estimate
    k2 = ("verify", 16, 4)
    assert Runner.lead_estimate(r, k2) == kind_before
    Runner._note_lead(r, k2, 5.0, True)             # a compile stall: twice the kind's
    assert r._lead[k2] == pytest.approx(2 * kind_before)
    # with nothing known of the kind: what was seen, at most the first-sight cap
    Runner._note_lead(r, ("eager", "prefill", 1, 64), 0.02, False)
    assert r._lead[("eager", "prefill", 1, 64)] == pytest.approx(0.02)
    Runner._note_lead(r, ("eager", "verify", 3, 9), 4.0, False)  # first run compiled kernels
    assert r._lead[("eager", "verify", 3, 9)] == FIRST_LEAD_CAP_S
    assert lead_kind(("eager", "prefill", 1, 64)) == ("*", "eager", "prefill")
    for _ in range(20):                             # never beyond the ceiling
        Runner._note_lead(r, k, 10.0, True)
    assert r._lead[k] == MAX_LEAD_S


def test_a_starved_rerun_teaches_the_key_and_its_kind_what_queueing_costs():
    """A pass that takes the host 0.6 s to queue, in a kind whose estimate is 20 ms: the first
    attempt (which may include a compile) only doubles the key's estimate, but a re-run's host
    time is genuine, so the key and the kind both rise to it and the next hold (1.5 x 0.6 s)
    covers the pass.  Under the earlier rule the kind never learned from a starved run and
    every new shape of that kind outran all three attempts."""
    from types import SimpleNamespace

    from backends.aiter.runner import MAX_LEAD_S, Runner, lead_kind

    assert 1.5 * MAX_LEAD_S > 0.6, "the longest hold must cover such a pass"
    r = SimpleNamespace(_lead={}, _attempt=0)
    kind = lead_kind(("eager", "prefill", 1, 91))
    Runner._note_lead(r, ("eager", "prefill", 1, 64), 0.02, False)   # the kind: 20 ms
    key = ("eager", "prefill", 1, 91)
    Runner._note_lead(r, key, 4.6, True)                              # attempt 0: a compile
    assert r._lead[key] == 0.04 and r._lead[kind] == 0.02             # doubled; kind untouched
    r._attempt = 1
    Runner._note_lead(r, key, 0.6, True)                              # re-run: 0.6 s to queue
    assert r._lead[key] == 0.6 and r._lead[kind] == 0.6
    r._attempt = 0
    Runner._note_lead(r, key, 0.58, False)                            # held: decays slowly
    assert r._lead[key] == 0.95 * 0.6 + 0.05 * 0.58
    Runner._note_lead(r, ("eager", "prefill", 1, 120), 9.0, True)     # a new shape's compile
    assert r._lead[("eager", "prefill", 1, 120)] == MAX_LEAD_S       # 2 x 0.6, at the cap


def test_live_launches_warm_up_only_when_they_cannot_be_held():
    from types import SimpleNamespace

    from backends.aiter.runner import Runner

    r = SimpleNamespace(_lead={}, on_gpu=True, hold_gpu=True)
    r.lead_estimate = lambda key: Runner.lead_estimate(r, key)
    key = ("eager", "prefill", 1, 300)
    assert Runner.auto_warmup(r, key) == 1           # first of its kind: warm up untimed
    Runner._note_lead(r, ("eager", "prefill", 2, 900), 4e-3, False)
    assert Runner.auto_warmup(r, key) == 0           # its kind's estimate covers it
    r.hold_gpu = False
    assert Runner.auto_warmup(r, key) == 1           # unheld: a compile would be timed


def test_timed_runs_rerun_a_starved_hold_at_most_twice_and_keep_the_last_reps():
    from types import SimpleNamespace

    from backends.aiter.runner import Runner

    def fake(allocs):
        r = SimpleNamespace(pause_gc=True, rerun_starved=0, held_runs=0, eager_timed_runs=0,
                            eager_alloc_events=0, starved_runs=0, starved_by_kind={}, _attempt=0,
                            wall_s={"capture": 0.0, "warmup": 0.0, "timed": 0.0, "rerun": 0.0})
        r._driver_allocs = lambda: next(allocs)
        return r

    # per call: (gpu_s, host_s, held, starved); the collector is off inside every call
    calls = []
    attempts = []

    def scripted(results):
        it = iter(results)

        def once():
            calls.append(gc.isenabled())
            attempts.append(r._attempt)   # what _note_lead reads: 0 first, 1-2 re-runs
            return next(it)
        return once

    r = fake(iter([]))
    runs = [(1.0, 0.1, False, False),                          # warm-up, not held
            (2.0, 0.1, True, True), (3.0, 0.1, True, False),   # rep 1: starved, then clean
            (4.0, 0.1, True, True), (5.0, 0.1, True, True), (6.0, 0.1, True, True)]  # rep 2
    out = Runner._timed_runs(r, scripted(runs), key=("verify", 8, 4), comm=0.5, graph=True,
                             reps=2, warmup=1)
    assert [t.gpu_s for t in out] == [3.0, 6.0]
    assert attempts == [0, 0, 1, 0, 1, 2] and r._attempt == 0
    assert [t.held for t in out] == [True, False]  # still starved after two re-runs: not clean
    assert all(t.graph and t.comm_s == 0.5 and t.latency_s == t.gpu_s + 0.5 for t in out)
    assert r.rerun_starved == 3 and r.held_runs == 1
    assert r.starved_runs == 1 and r.starved_by_kind == {"graph verify": 1}  # counted, not hidden
    assert all(r.wall_s[k] > 0 for k in ("warmup", "timed", "rerun")) and r.wall_s["capture"] == 0
    assert r.eager_timed_runs == 0 and not any(calls) and gc.isenabled()

    r = fake(iter([10, 10, 10, 12]))  # the second timed eager run went to the driver
    out = Runner._timed_runs(r, scripted([(1.0, 0.2, True, False)] * 2), key=("prefill", 1, 64),
                             comm=0.0, graph=False, reps=2, warmup=0)
    assert len(out) == 2 and not any(t.graph for t in out)
    assert r.eager_timed_runs == 2 and r.eager_alloc_events == 1 and r.held_runs == 2


def test_memsets_are_replaced_only_when_they_are_whole_aligned_words():
    from backends.aiter.graphfix import _MemsetParams, _as_words

    def p(dst=0x1000, value=0, es=1, width=4, height=1, pitch=0):
        return _MemsetParams(dst=dst, pitch=pitch, value=value, elementSize=es, width=width,
                             height=height)

    assert _as_words(p()) == (1, 0)                               # cuBLASLt's: 4 zero bytes
    assert _as_words(p(value=0xAB, width=8)) == (2, 0xABABABAB)    # a byte repeated in a word
    assert _as_words(p(value=0x1234, es=2, width=2)) == (1, 0x12341234)
    assert _as_words(p(value=0x1FF, es=1)) == (1, 0xFFFFFFFF)      # only the element's bytes
    assert _as_words(p(value=7, es=4, width=300)) == (300, 7)
    assert _as_words(p(es=4, width=2, height=3, pitch=8)) == (6, 0)  # contiguous rows
    assert _as_words(p(es=4, width=2, height=3, pitch=16)) is None   # strided rows
    assert _as_words(p(dst=0x1001)) is None                        # unaligned
    assert _as_words(p(width=3)) is None                           # not whole words
    assert _as_words(p(es=8)) is None


def test_attention_grid_follows_aiters_rules():
    from backends.aiter.occupancy import attention_grid

    g = attention_grid(32, 8, 16, 132)  # Llama-3.1-8B on an H200
    assert g == {"sms": 132, "kv_heads": 8, "block_q": 4, "target_programs": 528,
                 "min_segments": 16, "max_segments": 128}
    assert attention_grid(8, 1, 16, 132)["block_q"] == 2     # 70B at tp 8: 8 query heads per KV head
    assert attention_grid(64, 2, 16, 132)["block_q"] == 1    # 32 per KV head: BLOCK_M 32
    assert attention_grid(40, 2, 16, 132)["block_q"] == 1    # 20 -> BLOCK_M 32, one row per block
    assert attention_grid(32, 8, 32, 132)["min_segments"] == 8  # tiles wider than 16 tokens


def test_a_live_run_warns_when_timed_runs_outran_every_hold():
    from types import SimpleNamespace

    from backends.aiter.executor import AiterExecutor

    # one graph captured at start-up, none since
    ex = SimpleNamespace(runner=SimpleNamespace(starved_runs=0, starved_by_kind={},
                                                capture_s={("verify", 1, 4): 0.5}),
                         _setup_captures=(1, 0.5))
    assert AiterExecutor.timing_caveats(ex) == []
    ex.runner.starved_runs = 5
    ex.runner.starved_by_kind = {"eager prefill": 4, "eager verify": 1}
    (w,) = AiterExecutor.timing_caveats(ex)
    assert w.startswith("5 timed launches (eager prefill 4, eager verify 1) outran their hold")
    assert "GPU waited for the host" in w


def test_a_live_run_warns_when_it_captured_graphs_during_the_run():
    """Graphs captured after start-up (a lazy run, or a key the start-up captures lacked) put
    later replays in another state than SGLang's: said, with their count."""
    from types import SimpleNamespace

    from backends.aiter.executor import AiterExecutor

    ex = SimpleNamespace(runner=SimpleNamespace(starved_runs=0, starved_by_kind={}, capture_s={
        ("verify", 1, 4): 0.5, ("draft", 1): 0.4, ("extend", 1, 4): 0.1}),
        _setup_captures=(1, 0.5))
    (w,) = AiterExecutor.timing_caveats(ex)
    assert w.startswith("2 graphs were captured during the run, on first use")
    assert "backend.capture = all" in w
