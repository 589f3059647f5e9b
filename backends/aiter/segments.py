"""Split a timed eager pass into held segments when the GPU's launch queue cannot take it whole.

A timed eager pass waits behind a spin kernel (the hold) while the host queues it, so that CUDA
events measure the GPU's time alone (docs/aiter.md, *Timing*).  The GPU's launch queue holds a
bounded number of kernels.  A pass that launches more blocks the host's launch calls until the
hold ends, and then no hold is long enough: every run is starved, and its time includes gaps
where the GPU waited for the host.  DeepSeek-V3's 61-layer FP8 MoE shard launches 1,741 Triton
kernels per eager pass, besides PyTorch's; on the H200 its prefill was starved behind holds of
1.5 s and 3 s alike, with the host's time equal to the hold
(``benchmarks/bench_aiter_eager_sync.py``).

So the runner notes the host clock after every layer of a timed eager pass.  When a starved run
shows one layer that took the host at least half the hold while the layers before it took a
fraction of that, the host was blocked there (a slow host spreads its time over the layers).
The layers queued before that one are what the queue takes.  Later runs of that pass, and of
its kind, are then timed in segments of three quarters of that many layers.  Each segment waits
behind its own hold and is timed by its own pair of events, and the pass's GPU time is the sum.
The GPU is idle between segments, so each boundary also drains its pipeline, which one queue
would not: on the H200 a 1,315-token V3 prefill in 4 segments measured 1% more than unsegmented
runs that lost time only at their start (docs/aiter.md, *Timing*).
"""

from __future__ import annotations

import math
from statistics import median

__all__ = ["blocked_after", "segment_ends", "segments_after_block", "EagerSegments", "SegmentedRun"]

#: a layer that took at least this share of its segment's hold may have blocked the host
BLOCK_SHARE = 0.5
#: and at least this many times the median of the segment's other layers
BLOCK_RATIO = 4.0


def blocked_after(layer_s: list[float], hold_s: float) -> int | None:
    """The layers a segment queued before the host blocked, or ``None`` when it did not block.

    ``layer_s``: the host seconds each layer of the segment took to queue, in order.  The host
    blocked at layer ``j`` when that layer took at least ``BLOCK_SHARE`` of the hold and at
    least ``BLOCK_RATIO`` times the median of the others; then layers ``0 .. j-1`` fit the
    queue.  A segment of fewer than four layers is never said to block (one slow layer of a
    short pass is as likely the host's own pace)."""
    if len(layer_s) < 4 or hold_s <= 0:
        return None
    j = max(range(len(layer_s)), key=layer_s.__getitem__)
    rest = [d for i, d in enumerate(layer_s) if i != j]
    if layer_s[j] >= BLOCK_SHARE * hold_s and layer_s[j] >= BLOCK_RATIO * median(rest):
        return j
    return None


def segment_ends(layers: int, segments: int) -> list[int]:
    """The layers after which a pass of ``layers`` layers in ``segments`` segments is cut (the
    last layer excluded): every ``ceil(layers / segments)`` layers."""
    per = math.ceil(layers / max(1, min(segments, layers)))
    return [i for i in range(per - 1, layers - 1, per)]


def segments_after_block(layers: int, queued: int) -> int:
    """Segments for a pass of ``layers`` layers once the host blocked after ``queued`` layers
    of a segment: segments of ``max(1, 3 * queued // 4)`` layers."""
    per = max(1, 3 * int(queued) // 4)
    return math.ceil(layers / per)


class EagerSegments:
    """The segment counts learned per hold key and per kind (a key seen first borrows its
    kind's), and how many timed runs blocked the host."""

    def __init__(self) -> None:
        self.count: dict[tuple, int] = {}
        self.blocked_runs = 0

    def segments(self, key: tuple, kind: tuple) -> int:
        """Segments to time ``key`` in: its own count, else its kind's, else 1 (whole)."""
        return self.count.get(key) or self.count.get(kind) or 1

    def learn(self, key: tuple, kind: tuple, segments: int) -> None:
        """Raise ``key``'s and its kind's counts to ``segments`` (they never fall)."""
        self.blocked_runs += 1
        for k in (key, kind):
            self.count[k] = max(self.count.get(k, 1), int(segments))

    def describe(self) -> dict:
        """The kinds' learned counts (``"eager prefill": 4``) and the blocked runs."""
        kinds = {" ".join(str(p) for p in k[1:]): v for k, v in self.count.items() if k[0] == "*"}
        return {"segments_by_kind": dict(sorted(kinds.items())), "blocked_runs": self.blocked_runs}


class SegmentedRun:
    """One timed eager run, cut into segments: the host clock after each layer, an event pair
    and a hold per segment, and what the run showed (starved, where the host blocked).

    ``event()`` records and returns a new CUDA event; ``hold()`` queues the next segment's hold
    and returns its seconds.  The first segment's event and hold are queued by the caller before
    the body starts (``start``, ``hold_s``, host clock ``t0``)."""

    def __init__(self, segments: int, *, clock, event, hold, start, hold_s: float,
                 t0: float) -> None:
        self.segments = max(1, int(segments))
        self.clock, self.event, self.hold = clock, event, hold
        self.start, self.hold_s, self.t_last = start, float(hold_s), t0
        self.all_layer_s: list[float] = []  # every layer's host seconds, in order
        self._seg0 = 0                      # where the current segment's layers start in it
        self.pairs: list[tuple] = []        # (start, end) events per closed segment
        self.starved = False
        self.blocked: tuple[int, float] | None = None   # (layers queued, host s per layer)
        self._ends: tuple[int, set[int]] = (-1, set())

    @property
    def layer_s(self) -> list[float]:
        """The current segment's layers' host seconds."""
        return self.all_layer_s[self._seg0:]

    @property
    def layers(self) -> int:
        """The layers of the pass seen so far (-1 before the first)."""
        return self._ends[0]

    def after_layer(self, i: int, layers: int) -> None:
        """Called by the model after queueing layer ``i`` of ``layers``."""
        t = self.clock()
        self.all_layer_s.append(t - self.t_last)
        self.t_last = t
        if self._ends[0] != layers:
            self._ends = (layers, set(segment_ends(layers, self.segments)))
        if i in self._ends[1]:
            self._close()
            self.hold_s = float(self.hold())
            self.start = self.event()
            self._seg0 = len(self.all_layer_s)
            self.t_last = self.clock()

    def finish(self) -> None:
        """Close the last segment (after the body has queued everything)."""
        self._close()

    def _close(self) -> None:
        # as for a whole pass: the segment is starved when its start had completed before the
        # host had queued it all (checked before its end event is recorded)
        self.starved |= bool(self.hold_s > 0 and self.start.query())
        end = self.event()
        self.pairs.append((self.start, end))
        if self.blocked is None and self.hold_s > 0:
            seg = self.layer_s
            j = blocked_after(seg, self.hold_s)
            if j is not None:
                self.blocked = (j, median(d for k, d in enumerate(seg) if k != j))

    def queueing_s(self) -> float:
        """The host's time to queue the whole pass were it never blocked: the median layer's host
        seconds times the layers.  A layer that waited behind a full queue (one per segment at
        most, the last segment's wait for the one before) does not move the median."""
        return median(self.all_layer_s) * max(self.layers, 1) if self.all_layer_s else 0.0

    def gpu_s(self) -> float:
        """The segments' GPU seconds, summed (their events' elapsed times)."""
        return sum(s.elapsed_time(e) for s, e in self.pairs) / 1e3
