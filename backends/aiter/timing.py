"""How the runner times a launch: event waits, the collector held off, queued (held) timing.

:class:`QueuedTiming` is the timing half of :class:`backends.aiter.runner.Runner` (a mixin): before
a timed launch the GPU is held by a spin kernel long enough for the host to queue the whole
launch, so CUDA events measure the GPU's time alone, not the host's launch rate; a hold that ran
out first is detected and the run repeated (docs/aiter.md, *Timing*).
"""

from __future__ import annotations

import gc
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from backends.aiter.segments import EagerSegments, SegmentedRun, segments_after_block

if TYPE_CHECKING:
    from backends.aiter.launch import Launch, _Static

__all__ = ["wait_event", "gc_paused", "lead_kind", "next_lead", "Timing", "QueuedTiming",
           "FIRST_LEAD_CAP_S", "MAX_LEAD_S"]


def _recorded_event():
    """A new timing CUDA event, recorded on the current stream."""
    import torch

    ev = torch.cuda.Event(enable_timing=True)
    ev.record()
    return ev


def wait_event(ev, spin: bool = True) -> None:
    """Wait until CUDA event ``ev`` has completed.  ``spin``: poll it from this thread (the host
    core stays busy, as an engine's scheduler thread does) instead of a blocking wait, after which
    the next launches would start on a core woken from idle."""
    if not spin:
        ev.synchronize()
        return
    q = ev.query
    while not q():
        pass


@contextmanager
def gc_paused(enabled: bool = True):
    """Hold Python's cyclic garbage collector off for a timed region.  A collection that falls
    inside an eager pass (hundreds of Python kernel launches) would count the simulator's own
    heap as GPU latency; the deferred collection runs at the next allocation after the region."""
    was = gc.isenabled()
    if enabled and was:
        gc.disable()
    try:
        yield
    finally:
        if enabled and was:
            gc.enable()


#: a first host-queueing estimate never exceeds this (its first run may include a compile)
FIRST_LEAD_CAP_S = 0.05
#: nor does any estimate (a hold of 1.5 x this is the longest the GPU is kept waiting).  An
#: eager pass of DeepSeek-V3's 61-layer FP8 MoE shard takes the host hundreds of milliseconds
#: to queue from Python; at the earlier 0.25 s cap such passes outran every hold
MAX_LEAD_S = 1.0


def lead_kind(key: tuple) -> tuple:
    """The kind a hold key belongs to: ``("*", "verify")`` for graphs, ``("*", "eager",
    "prefill")`` for eager launches; first-seen keys borrow their kind's estimate."""
    return ("*",) + tuple(key[:2] if key and key[0] == "eager" else key[:1])


def next_lead(old: float | None, host_s: float, starved: bool, trusted: bool = False) -> float:
    """One update of a host-queueing estimate (see :meth:`Runner._note_lead`).

    ``trusted``: ``host_s`` comes from a re-run, after the first attempt compiled what the launch
    needs, so it is what queueing the launch costs and the estimate may rise to it at once."""
    if old is None:
        return min(host_s, MAX_LEAD_S if trusted else FIRST_LEAD_CAP_S)
    if host_s > old:
        new = host_s if trusted else min(host_s, 2.0 * old)
    else:
        new = 0.95 * old + 0.05 * host_s
    if starved:
        new = max(new, 2.0 * old)
    return min(new, MAX_LEAD_S)


@dataclass
class Timing:
    """One measured launch: GPU time (events), host time, and the modelled communication."""

    gpu_s: float
    host_s: float
    comm_s: float
    graph: bool
    key: tuple
    held: bool = False      # queued behind a hold kernel: gpu_s is the GPU's time alone

    @property
    def latency_s(self) -> float:
        return self.gpu_s + self.comm_s


class QueuedTiming:
    """Held launches and timed runs, mixed into the runner (which owns the attributes read here:
    ``on_gpu``, ``hold_gpu``, ``min_hold_s``, ``_lead``, ``_cycles_per_s``, ``pause_gc``,
    ``spin_wait``, the counters, ``device`` and ``_stage``; :meth:`_init_wall` sets ``wall_s``,
    ``hold_s``, ``capture_s`` and ``capture_phase_s``)."""

    def _init_wall(self) -> None:
        """Zero the host wall-clock accounts (``describe()["timing"]``): host seconds by what
        they were spent on, the GPU seconds of hold kernels asked for, and each capture."""
        self.wall_s = {"capture": 0.0, "warmup": 0.0, "timed": 0.0, "rerun": 0.0}
        self.hold_s = 0.0
        #: timed runs whose hold still ran out on the last attempt: their GPU time includes
        #: gaps where the GPU waited for the host (counted, reported, never hidden)
        self.starved_runs = 0
        self.starved_by_kind: dict[str, int] = {}
        self._attempt = 0  # the attempt of the run in progress (0 first, 1-2 re-runs)
        self._segments_learned = False
        #: eager passes too long for the GPU's launch queue are timed in segments (segments.py)
        self.eager_segments = EagerSegments()
        self.capture_s: dict[tuple, float] = {}
        self.capture_phase_s = {"warm": 0.0, "record": 0.0, "upload": 0.0}

    def _note_capture(self, key: tuple, t0: float, t_warm: float, t_record: float) -> None:
        """Book the capture of ``key`` begun at ``t0`` (``perf_counter``): its eager warm-up runs
        (Triton compiles, cuBLAS heuristics) ended at ``t_warm``, its recording and
        instantiation at ``t_record``, its first replays (graph upload) now."""
        end = time.perf_counter()
        self.capture_s[key] = end - t0
        self.wall_s["capture"] += end - t0
        ph = self.capture_phase_s
        ph["warm"] += t_warm - t0
        ph["record"] += t_record - t_warm
        ph["upload"] += end - t_record

    def captures_by_kind(self) -> dict[str, dict]:
        """Graphs captured so far by kind (``verify``, ``ragged``, ``draft``, ``extend``): count
        and host seconds."""
        out: dict[str, dict] = {}
        for key, s in self.capture_s.items():
            d = out.setdefault(str(key[0]), {"count": 0, "s": 0.0})
            d["count"] += 1
            d["s"] += s
        return {k: out[k] for k in sorted(out)}

    def timing_describe(self) -> dict:
        """``describe()["timing"]``: how launches were timed and where the host's time went."""
        return {"queued": self.hold_gpu, "spin_wait": self.spin_wait, "gc_paused": self.pause_gc,
                "held_runs": self.held_runs, "reruns_after_a_short_hold": self.rerun_starved,
                "timed_runs_still_starved": self.starved_runs,
                "still_starved_by_kind": dict(sorted(self.starved_by_kind.items())),
                "eager_timed_runs": self.eager_timed_runs,
                "eager_segments": self.eager_segments.describe(),
                "eager_runs_with_driver_allocs": self.eager_alloc_events,
                "wall_s": {k: round(v, 3) for k, v in self.wall_s.items()},
                "hold_s": round(self.hold_s, 3),
                "capture_phase_s": {k: round(v, 3) for k, v in self.capture_phase_s.items()}}

    def _hold(self, key: tuple) -> bool:
        """Queue a spin kernel covering the host's time to queue ``key``'s launch (see
        :meth:`_hold_seconds`); False when not holding."""
        return self._hold_seconds(key) > 0

    def _hold_seconds(self, key: tuple, share: float = 1.0) -> float:
        """Queue a spin kernel covering the host's time to queue ``key``'s launch, or ``share``
        of it for one segment of an eager pass (1.5 x the estimate kept by :meth:`_note_lead`,
        at least ``min_hold_s``); its seconds, 0.0 when not holding (CPU, ``hold_gpu`` off, or
        no estimate yet)."""
        if not (self.on_gpu and self.hold_gpu):
            return 0.0
        lead = self.lead_estimate(key)
        if lead is None:
            return 0.0
        import torch

        if self._cycles_per_s is None:
            self._cycles_per_s = self._calibrate_spin()
        hold = max(self.min_hold_s, 1.5 * lead * share)
        torch.cuda._sleep(max(1, int(hold * self._cycles_per_s)))
        self.hold_s += hold
        return hold

    @contextmanager
    def _after_each_layer(self, hook):
        """Set ``hook(i, layers)`` as the models' per-layer callback (``after_layer``) for the
        duration of a timed eager body."""
        models = [m for m in (getattr(self, "target", None), getattr(self, "draft", None))
                  if m is not None]
        for m in models:
            m.after_layer = hook
        try:
            yield
        finally:
            for m in models:
                m.after_layer = None

    def lead_estimate(self, key: tuple) -> float | None:
        """The host-queueing estimate a hold for ``key`` uses: its own, else its kind's."""
        lead = self._lead.get(key)
        return self._lead.get(lead_kind(key)) if lead is None else lead

    def auto_warmup(self, key: tuple) -> int:
        """Untimed runs a live launch of ``key`` (a hold key) needs first: none when it can be
        held (a compile stall then starves the hold and the run is repeated), else one."""
        if self.on_gpu and self.hold_gpu and self.lead_estimate(key) is not None:
            return 0
        return 1

    def _calibrate_spin(self) -> float:
        """Cycles per second of ``torch.cuda._sleep`` on this GPU (the fastest of three)."""
        import torch

        best = None
        for _ in range(3):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            torch.cuda._sleep(1_000_000)
            b.record()
            b.synchronize()
            s = a.elapsed_time(b) / 1e3
            best = s if best is None else min(best, s)
        return 1_000_000 / max(best, 1e-9)

    def _note_lead(self, key: tuple, host_s: float, starved: bool) -> None:
        """Update the host-queueing estimates of ``key`` and of its kind (:func:`lead_kind`).

        Each rises at once but at most to twice what it was (a Triton compile or cuBLAS's first
        heuristic query for a shape is a one-off stall, not what the launch costs), falls by 5%
        of the gap, and is at least doubled after a starved hold so that the re-run is covered.
        A key seen for the first time starts from its kind's estimate, or, with none, from what
        was seen (at most ``FIRST_LEAD_CAP_S``).  The kind learns from runs that were not
        starved, so a run of compile stalls cannot inflate the holds of every later shape, and
        from re-runs (``self._attempt > 0``): the first attempt compiled what the launch needs,
        so a re-run's host time is what queueing it costs, and both estimates rise to it at once
        (else a pass slower to queue than the kind's estimate would outrun every attempt)."""
        kind = lead_kind(key)
        old = self._lead.get(key)
        trusted = getattr(self, "_attempt", 0) > 0
        self._lead[key] = next_lead(old if old is not None else self._lead.get(kind), host_s,
                                    starved, trusted)
        if not starved or trusted:
            self._lead[kind] = next_lead(self._lead.get(kind), host_s, False, trusted)

    def _timed_runs(self, once, *, key: tuple, comm: float, graph: bool, reps: int,
                    warmup: int) -> list[Timing]:
        """``warmup + reps`` runs of ``once() -> (gpu_s, host_s, held, starved)``, the garbage
        collector held off in each; the timings of the last ``reps``.  A run whose hold ran out
        before the launch was queued is run again (at most twice; ``once`` has lengthened the
        hold through :meth:`_note_lead`), once more after a run that found the GPU's launch queue
        full and learned to time the pass in segments (segments.py).  Eager runs also count
        driver allocations."""
        out: list[Timing] = []
        for i in range(warmup + reps):
            timed = i >= warmup
            before = self._driver_allocs() if timed and not graph else 0
            last = 2        # two re-runs; one more after a run that learned segments
            attempt = 0
            while True:
                w0 = time.perf_counter()
                self._attempt = attempt
                self._segments_learned = False
                try:
                    with gc_paused(self.pause_gc):
                        gpu, host, held, starved = once()
                finally:
                    self._attempt = 0
                part = "rerun" if attempt else ("timed" if timed else "warmup")
                self.wall_s[part] += time.perf_counter() - w0
                if self._segments_learned:
                    last = min(max(last, attempt + 1), 4)
                if not starved or attempt >= last:
                    break
                self.rerun_starved += 1
                attempt += 1
            if not timed:
                continue
            clean = held and not starved
            self.held_runs += int(clean)
            if held and starved:
                self.starved_runs += 1
                k = f"{'graph' if graph else 'eager'} {key[0] if key else '?'}"
                self.starved_by_kind[k] = self.starved_by_kind.get(k, 0) + 1
            if not graph:
                self.eager_timed_runs += 1
                if self._driver_allocs() != before:
                    self.eager_alloc_events += 1
            out.append(Timing(gpu_s=gpu, host_s=host, comm_s=comm, graph=graph, key=key, held=clean))
        return out

    def _time_eager(self, st: _Static, launch: Launch, body, *, key: tuple, comm: float,
                    reps: int, warmup: int | None) -> list[Timing]:
        """Stage ``launch`` and run ``body()`` eagerly ``warmup + reps`` times (``None``:
        :meth:`auto_warmup`); CUDA events time the GPU part of each timed run (the host clock on
        a CPU)."""
        import torch

        lead_key = ("eager",) + tuple(key)
        if warmup is None:
            warmup = self.auto_warmup(lead_key)

        def once():
            self._stage(st, launch)
            kind = lead_kind(lead_key)
            segs = self.eager_segments.segments(lead_key, kind)
            hold_s = self._hold_seconds(lead_key, 1.0 / segs)
            held = hold_s > 0
            h0 = time.perf_counter()
            if not self.on_gpu:
                with torch.no_grad():
                    st.out = body()
                host = time.perf_counter() - h0
                self._note_lead(lead_key, host, False)
                return host, host, held, False
            e0 = _recorded_event()
            run = SegmentedRun(segs, clock=time.perf_counter, event=_recorded_event,
                               hold=lambda: self._hold_seconds(lead_key, 1.0 / segs), start=e0,
                               hold_s=hold_s, t0=h0)
            with self._after_each_layer(run.after_layer), torch.no_grad():
                st.out = body()
            run.finish()
            starved = held and run.starved
            host = time.perf_counter() - h0
            wait_event(run.pairs[-1][1], self.spin_wait)
            gpu = run.gpu_s()
            # a segmented pass's host time includes waits behind the previous segment (its
            # launches fill the queue behind that segment's hold): learn what queueing costs
            self._note_lead(lead_key, host if segs == 1 or starved else run.queueing_s(), starved)
            if starved and run.blocked is not None and self._attempt > 0:
                # the launch queue was full (segments.py): time in shorter segments from now on,
                # behind holds for what queueing the pass takes when the host is not blocked
                layers = run.layers
                self._segments_learned = True
                self.eager_segments.learn(lead_key, kind,
                                          segments_after_block(layers, run.blocked[0]))
                unblocked = min(run.blocked[1] * layers, MAX_LEAD_S)
                self._lead[lead_key] = self._lead[kind] = unblocked
            return gpu, host, held, starved

        return self._timed_runs(once, key=key, comm=comm, graph=False, reps=reps, warmup=warmup)

    def _driver_allocs(self) -> int:
        """Calls the caching allocator made to the driver so far (allocations plus retries)."""
        if not self.on_gpu:
            return 0
        import torch

        s = torch.cuda.memory_stats(self.device)
        return int(s.get("num_device_alloc", 0)) + int(s.get("num_alloc_retries", 0))
