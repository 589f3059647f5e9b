"""Timing an eager pass in held segments when the GPU's launch queue cannot take it whole (no
GPU needed): where the host blocked, where a pass is cut, and one run's events and holds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backends.aiter.segments import (EagerSegments, SegmentedRun, blocked_after, segment_ends,
                                     segments_after_block)


def test_a_layer_that_took_most_of_the_hold_is_where_the_host_blocked():
    # 10 layers at 10 ms each, but layer 6 waited 1.2 s behind a 1.5 s hold: 6 layers fit
    layers = [0.01] * 10
    layers[6] = 1.2
    assert blocked_after(layers, 1.5) == 6
    # the same host time spread over the layers is a slow host, not a full queue
    assert blocked_after([0.2] * 10, 1.5) is None
    # a long layer that took less than half the hold (0.7 < 0.75) says nothing either
    layers[6] = 0.7
    assert blocked_after(layers, 1.5) is None
    # nor one only 3x the others' median (0.9 s against 0.3 s)
    assert blocked_after([0.3, 0.3, 0.9, 0.3, 0.3], 1.5) is None
    # too short a segment to tell, and no hold at all
    assert blocked_after([0.01, 1.2, 0.01], 1.5) is None
    assert blocked_after([0.01] * 3 + [1.2], 0.0) is None
    # blocked at the first layer: nothing fitted
    assert blocked_after([1.2, 0.01, 0.01, 0.01], 1.5) == 0


def test_a_pass_is_cut_every_ceil_layers_over_segments():
    assert segment_ends(61, 1) == []
    assert segment_ends(61, 4) == [15, 31, 47]          # 16 layers each, 13 in the last
    assert segment_ends(32, 3) == [10, 21]              # 11, 11, 10
    assert segment_ends(3, 8) == [0, 1]                 # never more segments than layers
    assert segment_ends(1, 4) == []


@given(layers=st.integers(1, 200), segments=st.integers(1, 300))
def test_cuts_cover_every_layer_once_in_segments_no_longer_than_asked(layers, segments):
    ends = segment_ends(layers, segments)
    bounds = [-1] + ends + [layers - 1]
    lengths = [b - a for a, b in zip(bounds, bounds[1:])]
    assert sum(lengths) == layers and all(n >= 1 for n in lengths)
    assert max(lengths) <= -(-layers // segments)         # ceil(layers / segments)
    assert len(lengths) <= min(layers, segments)


def test_segments_after_a_block_hold_three_quarters_of_what_fitted():
    assert segments_after_block(61, 27) == 4            # 20 layers a segment: 20+20+20+1
    assert segments_after_block(61, 16) == 6            # 12 a segment
    assert segments_after_block(61, 1) == 61            # 3 // 4 = 0: one layer each
    assert segments_after_block(61, 0) == 61


def test_counts_are_learned_per_key_and_kind_and_never_fall():
    s = EagerSegments()
    key, kind = ("eager", "prefill", 1, 203), ("*", "eager", "prefill")
    assert s.segments(key, kind) == 1
    s.learn(key, kind, 4)
    assert s.segments(key, kind) == 4
    assert s.segments(("eager", "prefill", 1, 64), kind) == 4   # a new shape borrows its kind's
    s.learn(("eager", "prefill", 1, 64), kind, 2)               # fewer: neither count falls
    assert s.count[kind] == 4 and s.count[("eager", "prefill", 1, 64)] == 2
    assert s.segments(("eager", "verify", 8, 4), ("*", "eager", "verify")) == 1
    assert s.describe() == {"segments_by_kind": {"eager prefill": 4}, "blocked_runs": 2}


class _Ev:
    """A fake CUDA event: complete when the fake GPU clock has passed its time."""

    def __init__(self, gpu, t: float) -> None:
        self.gpu, self.t = gpu, t

    def query(self) -> bool:
        return self.gpu["now"] >= self.t

    def elapsed_time(self, end: "_Ev") -> float:
        return (end.t - self.t) * 1e3


def test_a_run_in_two_segments_sums_their_events_and_holds_between_them():
    """An 8-layer pass in 2 segments: events at GPU times 1.0/1.3 and 2.0/2.4 give 0.3 + 0.4 s;
    one hold is queued between the segments; the first segment's start completed while it was
    being queued (starved), and its layer 2 took 0.9 s of a 1.5 s hold (blocked after 2)."""
    host = {"now": 0.0}
    gpu = {"now": 0.0}
    event_times = iter([1.3, 2.0, 2.4])
    holds = []

    def event():
        return _Ev(gpu, next(event_times))

    def hold():
        holds.append(host["now"])
        return 0.5

    run = SegmentedRun(2, clock=lambda: host["now"], event=event, hold=hold,
                       start=_Ev(gpu, 1.0), hold_s=1.5, t0=0.0)
    steps = [0.01, 0.01, 0.9, 0.01, 0.01, 0.01, 0.01, 0.01]
    for i, d in enumerate(steps):
        host["now"] += d
        if i == 3:
            gpu["now"] = 1.1        # the first segment's start has completed by its end
        run.after_layer(i, 8)
    assert run.layers == 8 and len(run.pairs) == 1 and holds == [pytest.approx(0.93)]
    run.finish()
    assert len(run.pairs) == 2
    assert run.gpu_s() == pytest.approx(0.3 + 0.4)
    assert run.starved
    assert run.blocked == (2, pytest.approx(0.01))      # 2 layers fitted; 10 ms a layer else


def test_a_held_run_in_one_segment_is_neither_starved_nor_blocked():
    gpu = {"now": 0.0}
    ts = iter([0.2])
    t = {"now": 0.0}
    run = SegmentedRun(1, clock=lambda: t["now"], event=lambda: _Ev(gpu, next(ts)),
                       hold=lambda: pytest.fail("one segment queues no second hold"),
                       start=_Ev(gpu, 0.1), hold_s=0.05, t0=0.0)
    for i in range(6):
        t["now"] += 0.005
        run.after_layer(i, 6)
    run.finish()
    assert not run.starved and run.blocked is None and run.gpu_s() == pytest.approx(0.1)


def _fake_runner(lead: dict, stage=lambda: None):
    """A queued-timing runner with a fake GPU (a spin calibrated at a cycle a nanosecond), one
    target model whose ``after_layer`` hook the runner sets, and ``lead`` as its first
    host-queueing estimates; ``stage()`` is what staging a launch costs the (fake) host clock."""
    from backends.aiter.timing import QueuedTiming

    class Model:
        after_layer = None

    class Fake(QueuedTiming):
        on_gpu = hold_gpu = pause_gc = spin_wait = True
        min_hold_s = 5e-5

        def __init__(self):
            self._init_wall()
            self._lead = dict(lead)
            self._cycles_per_s = 1e9
            self.rerun_starved = self.held_runs = self.eager_timed_runs = 0
            self.eager_alloc_events = 0
            self.target, self.draft = Model(), None

        def _stage(self, st, launch):
            stage()

        def _driver_allocs(self):
            return 0

    return Fake()


def test_a_pass_that_fills_the_launch_queue_learns_segments_and_ends_held(monkeypatch):
    """``_time_eager`` on a simulated GPU whose launch queue takes 20 layers: a 61-layer pass
    behind one hold blocks the host at layer 20 and starves.  Attempt 0 (it may compile) only
    lengthens the hold; attempt 1, a re-run, finds the block and learns ceil(61 / 15) = 5
    segments (3/4 of the 20 that fitted) and an estimate of 61 x 1 ms; attempt 2 runs in 5
    segments of 13 layers, each behind its own hold, and ends held.  Its GPU time is the
    segments' sum, 61 layers x 2 ms."""
    import torch

    import backends.aiter.timing as timing

    clock = {"t": 0.0}
    gpu = {"t": 0.0}
    seg = {"queued": 0, "blocked": False, "hold": 0.0}
    holds: list[float] = []

    class Ev:
        def __init__(self):
            self.t, self.seg = gpu["t"], seg["state"]

        def query(self):
            return self.seg["blocked"]

        def elapsed_time(self, end):
            return (end.t - self.t) * 1e3

    def sleep(cycles):                       # a hold: a new segment starts behind it
        holds.append(cycles / 1e9)           # a nanosecond a cycle (_cycles_per_s = 1e9)
        seg["state"] = {"blocked": False}
        seg["queued"] = 0
        seg["hold"] = cycles / 1e9

    def body():
        for i in range(61):
            clock["t"] += 1e-3                 # 1 ms of host time to queue a layer
            seg["queued"] += 1
            if seg["queued"] > 20 and not seg["state"]["blocked"]:
                clock["t"] += seg["hold"]      # the queue is full: wait out the hold
                seg["state"]["blocked"] = True
            gpu["t"] += 2e-3                   # the layer's GPU time
            r.target.after_layer(i, 61)

    monkeypatch.setattr(torch.cuda, "_sleep", sleep)
    monkeypatch.setattr(timing, "_recorded_event", Ev)
    monkeypatch.setattr(timing, "wait_event", lambda ev, spin=True: None)
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock["t"])
    r = _fake_runner({("*", "eager", "prefill"): 0.005})
    from types import SimpleNamespace

    out = r._time_eager(SimpleNamespace(), None, body, key=("prefill", 1, 203), comm=0.0,
                        reps=1, warmup=0)
    assert r.rerun_starved == 2 and r.starved_runs == 0 and r.held_runs == 1
    assert r.eager_segments.count[("*", "eager", "prefill")] == 5
    assert r.eager_segments.describe()["blocked_runs"] == 1
    assert len(out) == 1 and out[0].held
    assert out[0].gpu_s == pytest.approx(61 * 2e-3)
    # attempts 0 and 1: one hold each; attempt 2: five (one per segment), each 1.5 x 61 ms / 5
    assert len(holds) == 7
    assert holds[:2] == [pytest.approx(1.5 * 0.005), pytest.approx(1.5 * 0.010)]
    assert holds[-5:] == [pytest.approx(1.5 * 0.061 / 5)] * 5
    assert r.target.after_layer is None               # the hook is removed after the body


class _QueueGPU:
    """A GPU whose launch queue holds ``cap`` entries: entries run in order, each starting when
    the one before ends (or when queued); a launch blocks the host until the entry ``cap``
    places earlier has started.  Events are zero-length entries."""

    def __init__(self, cap: int, clock: dict) -> None:
        self.cap, self.clock, self.starts, self.ends = cap, clock, [], []

    def launch(self, dur: float) -> int:
        n = len(self.starts)
        if n >= self.cap and self.starts[n - self.cap] > self.clock["t"]:
            self.clock["t"] = self.starts[n - self.cap]      # the host waits for room
        start = max(self.clock["t"], self.ends[-1] if self.ends else 0.0)
        self.starts.append(start)
        self.ends.append(start + dur)
        return n


@pytest.mark.parametrize("kernel_s", [50e-6, 200e-6])
def test_segmented_passes_on_a_simulated_launch_queue_stay_held_and_cheap(monkeypatch, kernel_s):
    """61 layers x 28 kernels (1,708 launches; 30 us of host each, 51.2 ms a pass) on a GPU
    whose queue takes 1,000: behind one hold the host blocks, so the kind learns segments
    (about 35 layers fit: ceil(61 / 26) = 3).  Then over eight passes of new lengths every run
    ends held, each measures exactly its kernels' time (61 x 28 x ``kernel_s``), and the hold
    estimate stays near the 51.2 ms of queueing.  Learned from the whole pass's host time, it
    climbed by about a third a pass (the host waits out the holds of the segments before), to
    0.35 s after eight passes and to the 1 s cap on the slower GPU."""
    import torch

    import backends.aiter.timing as timing

    clock = {"t": 0.0}
    gpu = _QueueGPU(1000, clock)

    class Ev:
        def __init__(self):
            self.i = gpu.launch(0.0)

        def query(self):
            return gpu.ends[self.i] <= clock["t"]

        def elapsed_time(self, end):
            return (gpu.starts[end.i] - gpu.starts[self.i]) * 1e3

    def wait(ev, spin=True):
        clock["t"] = max(clock["t"], gpu.ends[ev.i])

    def body():
        for i in range(61):
            for _ in range(28):
                clock["t"] += 30e-6
                gpu.launch(kernel_s)
            r.target.after_layer(i, 61)

    from types import SimpleNamespace

    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: gpu.launch(cycles / 1e9))
    monkeypatch.setattr(timing, "_recorded_event", Ev)
    monkeypatch.setattr(timing, "wait_event", wait)
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock["t"])
    r = _fake_runner({}, stage=lambda: clock.__setitem__("t", clock["t"] + 1e-4))
    exact = 61 * 28 * kernel_s
    for n in range(8):
        out = r._time_eager(SimpleNamespace(), None, body, key=("prefill", 1, 100 + n),
                            comm=0.0, reps=1, warmup=None)
        assert out[0].held and out[0].gpu_s == pytest.approx(exact), n
    assert r.starved_runs == 0 and r.rerun_starved == 2          # both in the first pass
    assert r.eager_segments.count[("*", "eager", "prefill")] == 3
    assert r._lead[("*", "eager", "prefill")] < 2 * 61 * 28 * 30e-6
