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


def test_hold_estimate_rises_at_once_decays_slowly_and_doubles_when_starved():
    from types import SimpleNamespace

    from backends.aiter.runner import Runner

    r = SimpleNamespace(_lead={})
    k = ("verify", 8, 4)
    Runner._note_lead(r, k, 100e-6, False)
    assert r._lead[k] == pytest.approx(100e-6)
    Runner._note_lead(r, k, 300e-6, False)          # a slower launch: up at once
    assert r._lead[k] == pytest.approx(300e-6)
    Runner._note_lead(r, k, 100e-6, False)          # a faster one: down by 5% of the gap
    assert r._lead[k] == pytest.approx(0.95 * 300e-6 + 0.05 * 100e-6)
    before = r._lead[k]
    Runner._note_lead(r, k, 50e-6, True)            # the hold ran out first: at least doubled
    assert r._lead[k] == pytest.approx(2 * before)
    Runner._note_lead(r, ("prefill", 1, 64), 0.02, True)  # first sight, starved: what was seen
    assert r._lead[("prefill", 1, 64)] == pytest.approx(0.02)


def test_timed_runs_rerun_a_starved_hold_at_most_twice_and_keep_the_last_reps():
    from types import SimpleNamespace

    from backends.aiter.runner import Runner

    def fake(allocs):
        r = SimpleNamespace(pause_gc=True, rerun_starved=0, held_runs=0, eager_timed_runs=0,
                            eager_alloc_events=0)
        r._driver_allocs = lambda: next(allocs)
        return r

    # per call: (gpu_s, host_s, held, starved); the collector is off inside every call
    calls = []

    def scripted(results):
        it = iter(results)

        def once():
            calls.append(gc.isenabled())
            return next(it)
        return once

    r = fake(iter([]))
    runs = [(1.0, 0.1, False, False),                          # warm-up, not held
            (2.0, 0.1, True, True), (3.0, 0.1, True, False),   # rep 1: starved, then clean
            (4.0, 0.1, True, True), (5.0, 0.1, True, True), (6.0, 0.1, True, True)]  # rep 2
    out = Runner._timed_runs(r, scripted(runs), key=("verify", 8, 4), comm=0.5, graph=True,
                             reps=2, warmup=1)
    assert [t.gpu_s for t in out] == [3.0, 6.0]
    assert [t.held for t in out] == [True, False]  # still starved after two re-runs: not clean
    assert all(t.graph and t.comm_s == 0.5 and t.latency_s == t.gpu_s + 0.5 for t in out)
    assert r.rerun_starved == 3 and r.held_runs == 1
    assert r.eager_timed_runs == 0 and not any(calls) and gc.isenabled()

    r = fake(iter([10, 10, 10, 12]))  # the second timed eager run went to the driver
    out = Runner._timed_runs(r, scripted([(1.0, 0.2, True, False)] * 2), key=("prefill", 1, 64),
                             comm=0.0, graph=False, reps=2, warmup=0)
    assert len(out) == 2 and not any(t.graph for t in out)
    assert r.eager_timed_runs == 2 and r.eager_alloc_events == 1 and r.held_runs == 2
