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
