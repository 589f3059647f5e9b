"""Capturing a runner's CUDA graphs: one per key, warmed up, memset nodes replaced, replayed
twice before use; and the capture a timing sweep needs (:meth:`GraphCapture.capture_for_timing`).

A mixin of :class:`backends.aiter.runner.Runner`, which owns the buffers and bodies it captures
(``_new_static``, ``_stage``, ``_body``, ``_fill_host``), the graph pool and stream, and the
dicts ``graphs`` (key -> captured static) and ``_companions`` (graphs kept only to set the state
a timed graph replays in).
"""

from __future__ import annotations

import time

import numpy as np

from backends.aiter.launch import Launch, _Static
from backends.aiter.timing import wait_event

__all__ = ["GraphCapture"]


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

    def capture_for_timing(self, key: tuple) -> _Static:
        """Capture the graph for ``key`` the way a timing sweep needs it: replayed in the state a
        live run replays it in.

        A live run captures a batch size's draft-extend graph right after its verify graph, so
        from its second step on every verify replay follows a draft-extend capture. On the
        Llama-3.1-70B tp-8 shard that sets the replay time: a verify graph of 1-7 requests
        replays about 5% faster right after its own capture than after a draft-extend capture
        (``benchmarks/bench_aiter_first_pass.py --stages``; docs/aiter.md, Timing). So a verify
        key is followed by a fresh capture of the draft-extend graph at the same batch size and
        width (at least 2 rows: a draft-extend pass follows a verify of one draft or more), kept
        until :meth:`release` frees both. Other keys are captured as :meth:`capture` does."""
        st = self.capture(key)
        if key[0] != "verify" or self.draft is None or key in self._companions:
            return st
        xkey = ("extend", key[1], max(2, int(key[2])))
        kept = self.graphs.pop(xkey, None)  # already captured: capture it again all the same
        self._companions[key] = self.capture(xkey)
        self.graphs.pop(xkey, None)
        if kept is not None:
            self.graphs[xkey] = kept
        return st

    def release(self, key: tuple) -> None:
        """Free the graph for ``key`` and any graph captured beside it for timing; the pool's
        memory is reused by the next capture."""
        self.graphs.pop(key, None)
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
