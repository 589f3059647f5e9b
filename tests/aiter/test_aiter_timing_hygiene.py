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
