"""Capturing a runner's CUDA graphs: one per key, warmed up, memset nodes replaced, replayed
twice before use; and the capture a timing sweep needs (:meth:`GraphCapture.capture_for_timing`).

A mixin of :class:`backends.aiter.runner.Runner`, which owns the buffers and bodies it captures
(``_new_static``, ``_stage``, ``_body``, ``_fill_host``), the graph pool and stream, and the
dicts ``graphs`` (key -> captured static) and ``_companions`` (graphs kept only to set the state
a timed graph replays in).
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

from backends.aiter.launch import Launch, _Static
from backends.aiter.timing import wait_event

__all__ = ["GraphCapture", "capture_order", "CAPTURE_MODES", "STARTUP_NUM_DRAFT_TOKENS"]

#: how a live executor captures its graphs: ``all`` at start-up in SGLang's order (the default
#: of a live run), ``lazy`` on first use (benchmarks that replay a few graphs); torch-free, so
#: the configuration checks against it too
CAPTURE_MODES = ("all", "lazy")

#: the draft count a default live run starts at (``simulate``'s ``engine.num_draft_tokens``,
#: SGLang's ``speculative_num_draft_tokens`` of its EAGLE examples): the width of the
#: draft-extend graph it captures last, which a timing sweep replays its graphs after
STARTUP_NUM_DRAFT_TOKENS = 4


def capture_order(capture_bs: Sequence[int], widths: Sequence[int], *, draft: bool,
                  num_draft_tokens: int) -> list[tuple]:
    """The graphs SGLang captures at start-up, in its order: keys for :meth:`Runner.capture`.

    The target model's runner captures first, then the EAGLE worker's draft runner, then its
    draft-extend runner (``EagleDraftWorker.init_cuda_graphs``); each goes from the largest batch size
    to the smallest (``CudaGraphRunner.capture``: ``reversed(self.capture_bs)``, to share the
    memory pool). Verify graphs are captured at every captured width; draft-extend graphs at
    every captured width of at least 2 rows (a draft-extend follows a verify of one draft or
    more), ``num_draft_tokens`` last, so a run starts as SGLang's does: the draft-extend graph of
    the smallest batch size at the start-up width captured last. That matters to timing: the
    graph captured last sets how fast every graph replays (docs/aiter.md, Timing)."""
    down = sorted({int(b) for b in capture_bs}, reverse=True)
    keys = [("verify", b, int(w)) for b in down for w in sorted({int(w) for w in widths})]
    if draft:
        keys += [("draft", b) for b in down]
        ext = sorted({max(2, int(w)) for w in widths} | {int(num_draft_tokens)},
                     key=lambda w: (w == int(num_draft_tokens), w))
        keys += [("extend", b, w) for w in ext for b in down]
    return keys


class GraphCapture:
    """Graph capture for a :class:`~backends.aiter.runner.Runner`."""

    def _warm_launch(self, st: _Static) -> Launch:
        nseq = st.nseq
        widths = np.full(nseq, st.rows // nseq, dtype=np.int64)
        widths[-1] += st.rows - int(widths.sum())
        kv = np.full(nseq, self.fill, dtype=np.int64)
        return Launch(widths, widths, kv, st.rows, nseq, st.max_seqlen_q)  # layout: always copied

    def capture(self, key: tuple) -> _Static:
        """Capture the graph for ``key`` (no-op if captured)."""
        import torch

        if key in self.graphs:
            return self.graphs[key]
        if not self.on_gpu:
            raise RuntimeError("CUDA graphs need a GPU")
        t0 = time.perf_counter()
        st = self._new_static(key)
        self._stage(st, self._warm_launch(st))
        torch.cuda.synchronize(self.device)
        s = self._stream
        s.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(s), torch.no_grad():
            for _ in range(2):  # compile Triton kernels and settle cuBLAS heuristics first
                self._body(st)
        torch.cuda.current_stream(self.device).wait_stream(s)
        torch.cuda.synchronize(self.device)
        t_warm = time.perf_counter()
        # the graph starts with the copy of the pinned staging buffer into the static metadata,
        # so a replay is one host call: fill the staging buffer, launch the graph
        self._fill_host(st, self._warm_launch(st), 0)
        g, keep = self._new_graph()
        with torch.no_grad(), torch.cuda.graph(g, pool=self.mempool, stream=s):
            st.dev.copy_(st.host[0], non_blocking=True)
            st.out = self._body(st)
        if keep:
            self._fix_graph(g)
            g.instantiate()
        torch.cuda.synchronize(self.device)
        t_record = time.perf_counter()
        st.graph = g
        st.e0 = torch.cuda.Event(enable_timing=True)
        st.e1 = torch.cuda.Event(enable_timing=True)
        st.done = None
        warm = self._warm_launch(st)
        for _ in range(2):  # first launches (graph upload), and the host's launch time for holds
            self.replay_step(st, warm, key)
            wait_event(st.e1, self.spin_wait)
        self.graphs[key] = st
        self._note_capture(key, t0, t_warm, t_record)
        return st

    def kernel_key(self, key: tuple) -> tuple:
        """The key a graph for ``key`` is kept under (the MLA runner maps widths to the few its
        kernels run)."""
        return key

    def timing_state_key(self) -> tuple:
        """The graph a default live run captures last at start-up: :func:`capture_order`'s last
        key at :data:`STARTUP_NUM_DRAFT_TOKENS` (the draft-extend graph of the smallest batch
        size; without a draft model the verify graph of one request and one row)."""
        widths = self.capture_widths if self.draft is not None else (1,)
        return self.kernel_key(capture_order(self.capture_bs, widths, draft=self.draft is not None,
                                             num_draft_tokens=STARTUP_NUM_DRAFT_TOKENS)[-1])

    def capture_for_timing(self, key: tuple) -> _Static:
        """Capture the graph for ``key`` and leave the GPU in the state a default live run replays
        every graph in.

        The graph captured last sets how fast every graph replays (docs/aiter.md, Timing): on
        the Llama-3.1-70B tp-8 shard a verify graph of 1-7 requests replays about 5% faster
        after its own capture than after a draft-extend capture; on DeepSeek-V2-Lite every graph
        replays slower after a capture of 22 requests or more. A live run captures every graph at
        start-up in SGLang's order (``backend.capture = all``), so it replays in the state its
        last capture, :meth:`timing_state_key`, leaves. So after ``key`` that graph is captured
        afresh and kept aside until :meth:`release` frees both; the timed graph then replays in
        that state. A graph kept before under that key is restored untouched."""
        st = self.capture(key)
        state = self.timing_state_key()
        if self.kernel_key(key) == state or key in self._companions:
            return st
        kept = self.graphs.pop(state, None)  # already captured: capture it again all the same
        self._companions[key] = self.capture(state)
        self.graphs.pop(state, None)
        if kept is not None:
            self.graphs[state] = kept
        return st

    def release(self, key: tuple) -> None:
        """Free the graph for ``key`` and any graph captured beside it for timing; the pool's
        memory is reused by the next capture."""
        self.graphs.pop(self.kernel_key(key), None)
        self._companions.pop(key, None)

    def _new_graph(self):
        """A graph to capture into, and whether it is kept uninstantiated for :meth:`_fix_graph`."""
        import torch

        if self.replace_memsets and not torch.version.hip:
            try:
                return torch.cuda.CUDAGraph(keep_graph=True), True
            except TypeError:  # a torch without keep_graph
                self.graph_fix["error"] = "torch.cuda.CUDAGraph has no keep_graph"
                self.replace_memsets = False
        return torch.cuda.CUDAGraph(), False

    def _fix_graph(self, g) -> None:
        """Turn the captured graph's 4-byte memset nodes into kernel nodes (cheaper to launch;
        ``backends/aiter/graphfix.py``).  A failure leaves the graph as captured."""
        import torch

        from backends.aiter.graphfix import memsets_to_kernels

        try:
            major, minor = torch.cuda.get_device_capability(self.device)
            res = memsets_to_kernels(g.raw_cuda_graph(), f"sm_{major}{minor}")
        except Exception as exc:  # noqa: BLE001 - reported in describe(), graph still valid
            self.graph_fix["error"] = str(exc)
            return
        for k, v in res.items():
            self.graph_fix[k] += v
