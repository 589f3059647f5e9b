"""Graph pool, static buffers, replay and timing for the model-shaped forward passes.

A graph is captured per key -- ``("verify", padded_bs, width)`` for uniform verify launches,
``("ragged", padded_bs, width)`` for exact per-request widths (``padded_bs * width`` query rows
at most), ``("draft", padded_bs)`` for one draft-model step, ``("extend", padded_bs, width)``
for the draft model's draft-extend pass (``width`` rows per request) -- on first use or up front
(:meth:`Runner.capture`, ``backends/aiter/graph_capture.py``).  Each graph reads one static int32 metadata buffer; a replay builds the
batch's metadata on the host (numpy), copies it into that buffer with one host-to-device copy and
replays.  Inside the graph the page table is expanded from the per-request first pages
(``block_table[i, j] = start_i + j``, SGLang fills its page table with a kernel before replay
too), so the host copies O(batch) numbers, never a page table.

Shapes that are not captured run eagerly (every kernel launched from Python, as SGLang does
outside its graphs).  GPU time is taken with CUDA events around the replay (or the eager
launches); host time with ``time.perf_counter`` (``backends/aiter/timing.py``).  Launch
descriptions and their buffers live in ``backends/aiter/launch.py``.

Padded rows follow SGLang's CUDA-graph runner: ``seq_len`` = the fill value, KV written to slot 0,
position 0.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from backends.aiter import metadata as md
from backends.aiter.kvpool import KVPool, layout_starts, plan_pool
from backends.aiter.launch import (Launch, _fill_meta_jit, _fill_meta_numpy, _Static,  # noqa: F401
                                   expand_metadata, fill_meta)
from backends.aiter.graph_capture import GraphCapture
from backends.aiter.model import AttnInputs, CommModel, Rope, Transformer, comm_time_s, dense_shape
from backends.aiter.timing import (FIRST_LEAD_CAP_S, MAX_LEAD_S, QueuedTiming, Timing,  # noqa: F401
                                   gc_paused, lead_kind, next_lead, wait_event)

#: which rows of a draft-extend pass get logits (``Runner.extend_logits``)
EXTEND_LOGITS = ("last", "all")

__all__ = ["Runner", "Launch", "Timing", "wait_event", "gc_paused", "lead_kind", "next_lead",
           "FIRST_LEAD_CAP_S", "MAX_LEAD_S", "EXTEND_LOGITS"]


class Runner(GraphCapture, QueuedTiming):
    """Owns the weights, the KV pool, the graphs and the timing of one model shard."""

    def __init__(self, shape: Any, *, page_size: int = 16, max_context: int = md.DEFAULT_MAX_CONTEXT,
                 capture_bs: Sequence[int] = md.SPEC_CAPTURE_BS,
                 capture_widths: Sequence[int] = md.DEFAULT_CAPTURE_WIDTHS,
                 num_draft_tokens: int | None = None, dtype: str = "bfloat16",
                 kv_pool_bytes: int | None = None, seed: int = 0, comm: CommModel | None = None,
                 device: Any = None, kernels: Any = None, draft: bool = True,
                 extend_logits: str = "last") -> None:
        import torch

        from backends.aiter import bridge

        if extend_logits not in EXTEND_LOGITS:
            from traces.errors import SpecschedError

            raise SpecschedError(f"extend_logits must be one of {', '.join(EXTEND_LOGITS)}, "
                                 f"got {extend_logits!r}")
        #: which rows of a draft-extend pass get logits: each request's last ("last", SGLang's
        #: EAGLE worker) or every row ("all", its overlap worker's DRAFT_EXTEND_V2)
        self.extend_logits = extend_logits

        self.kernels = kernels or bridge.load_kernels()
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = torch.device(device)
        self.on_gpu = self.device.type == "cuda"
        self.dtype = getattr(torch, dtype)
        self.shape = shape
        self.geometry, self.draft_geometry = self._geometries(shape, draft)
        self.page_size = int(page_size)
        self.max_context = int(max_context)
        self.max_blocks = md.max_blocks_per_seq(self.max_context, self.page_size)
        self.max_seqlen_k = self.max_blocks * self.page_size
        self.capture_bs = tuple(sorted(set(int(b) for b in capture_bs)))
        self.capture_widths = tuple(sorted(set(int(w) for w in capture_widths)))
        self.num_draft_tokens = int(num_draft_tokens or max(self.capture_widths))
        self.fill = self.num_draft_tokens
        self.comm = comm or CommModel()
        self.graphs: dict[tuple, _Static] = {}
        self._companions: dict[tuple, _Static] = {}  # GraphCapture.capture_for_timing's
        self._shared = None
        self._shared_hidden = None
        self._width_cache: dict[tuple, np.ndarray] = {}
        #: timing hygiene (docs/aiter.md): spin on events rather than block, keep the garbage
        #: collector out of timed regions, and count the timed eager runs during which the
        #: caching allocator had to go to the driver (cudaMalloc, or a free-and-retry)
        self.spin_wait = True
        self.pause_gc = True
        self.eager_alloc_events = 0
        self.eager_timed_runs = 0
        #: queued timing: before a timed launch the GPU is held by a spin kernel long enough for
        #: the host to queue the whole launch, so the events measure the GPU's time alone, not
        #: the host's launch rate (which varies between machines and with their load)
        self.hold_gpu = True
        self.min_hold_s = 50e-6
        self._lead: dict[tuple, float] = {}   # host seconds to queue each key's launch
        self._cycles_per_s: float | None = None
        self.held_runs = 0
        self.rerun_starved = 0
        #: captured graphs' memset nodes become kernel nodes before instantiation (graphfix.py)
        self.replace_memsets = True
        self.graph_fix: dict[str, Any] = {"memsets_replaced": 0, "memsets_kept": 0, "error": None}
        self._init_wall()  # host seconds by what they went to, captures (backends/aiter/timing.py)
        self.seed = int(seed)
        gen = torch.Generator(device=self.device).manual_seed(self.seed)
        self._build_model(gen, kv_pool_bytes)
        self.mempool = torch.cuda.graph_pool_handle() if self.on_gpu else None
        self._stream = torch.cuda.Stream(device=self.device) if self.on_gpu else None
        if self.on_gpu:
            torch.cuda.synchronize(self.device)

    # ---- the model (hooks: backends/aiter/mla_runner.py overrides both) ------------------------
    def _geometries(self, shape: Any, draft: bool) -> tuple[dict, dict | None]:
        """(target, draft) geometry of one rank's dense MHA/GQA shard; MLA/MoE shapes are refused
        here (:class:`backends.aiter.mla_runner.MLARunner` runs them)."""
        if getattr(shape, "attention", "mha") != "mha" or getattr(shape, "experts", 0):
            from traces.errors import SpecschedError

            raise SpecschedError(
                f"model {shape.name!r}: this runner times dense MHA/GQA models; MLA and MoE "
                f"models run in backends.aiter.mla_runner.MLARunner")
        d_shape = getattr(shape, "draft", None) if draft else None
        return dense_shape(shape), (dense_shape(d_shape) if d_shape is not None else None)

    def _build_model(self, gen: Any, kv_pool_bytes: int | None) -> None:
        """The KV pool, the rotary tables and the target (and draft) models' weights."""
        g = self.geometry
        views = g["layers"] + (1 if self.draft_geometry is not None else 0)
        if kv_pool_bytes is None:
            kv_pool_bytes = self._default_pool_bytes()
        want = self._want_view_pages()
        plan = plan_pool(kv_pool_bytes, views=views, page_size=self.page_size,
                         kv_heads=g["kv_heads"], head_dim=g["head_dim"],
                         dtype_bytes=self.dtype.itemsize, max_blocks=self.max_blocks,
                         want_view_pages=want)
        self.pool = KVPool(plan, page_size=self.page_size, kv_heads=g["kv_heads"],
                           head_dim=g["head_dim"], max_blocks=self.max_blocks, device=self.device,
                           dtype=self.dtype, generator=gen)
        self.rope = Rope(g["head_dim"], self.max_context + 64, device=self.device, dtype=self.dtype)
        self.target = Transformer(g, kernels=self.kernels,
                                  views=[self.pool.view(i) for i in range(g["layers"])],
                                  rope=self.rope, device=self.device, dtype=self.dtype, generator=gen)
        self.draft = None
        if self.draft_geometry is not None:
            dg = self.draft_geometry
            if (dg["kv_heads"], dg["head_dim"]) != (g["kv_heads"], g["head_dim"]):
                raise ValueError("draft KV geometry differs from the target's")
            self.draft = Transformer(dg, kernels=self.kernels, views=[self.pool.view(g["layers"])],
                                     rope=self.rope, device=self.device, dtype=self.dtype,
                                     generator=gen)

    # ---- sizing ---------------------------------------------------------------------------------
    def _default_pool_bytes(self) -> int:
        import torch

        if not self.on_gpu:
            return 64 << 20
        free, _total = torch.cuda.mem_get_info(self.device)
        weights = self._weight_bytes()
        reserve = 14 << 30  # activations of the largest graphs, cuBLAS workspaces, graph pool
        return int(max(2 << 30, min(64 << 30, free - weights - reserve)))

    def _weight_bytes(self) -> int:
        def one(g):
            if g is None:
                return 0
            h, hq, hkv, d, i = g["hidden"], g["heads"], g["kv_heads"], g["head_dim"], g["intermediate"]
            per = (hq + 2 * hkv) * d * g["attn_in"] + h * hq * d + 3 * h * i
            return (g["layers"] * per + 2 * g["vocab"] * h + g["fusion_in"] * h) * 2

        return one(self.geometry) + one(self.draft_geometry)

    def _want_view_pages(self) -> int:
        try:
            cap = int(self.shape.kv_capacity_tokens("H200"))
        except Exception:  # noqa: BLE001 - no sheet: size for the largest captured batch
            cap = self.capture_bs[-1] * 4096
        return -(-cap // self.page_size) + self.max_blocks

    def kv_capacity_tokens(self) -> int | None:
        try:
            return int(self.shape.kv_capacity_tokens("H200"))
        except Exception:  # noqa: BLE001
            return None

    # ---- metadata (host) ------------------------------------------------------------------------
    def verify_launch(self, widths: np.ndarray, kv_lens: np.ndarray, *, mode: str,
                      padded_bs: int, launch_width: int) -> tuple[Launch, tuple]:
        """The launch and graph key for a verify batch (``mode`` as in ``backends.protocol``).

        ``uniform``: every request (padded ones too) at ``launch_width``.  ``unsafe-derived``:
        attention metadata at ``launch_width`` for every row of the layout, the real rows where
        the real requests put them.  ``ragged``: exact per-request widths.
        """
        kv = np.asarray(kv_lens, dtype=np.int64)
        bs = len(kv)
        pbs = int(padded_bs)
        if pbs == bs:
            kvp = kv
        else:
            kvp = np.full(pbs, self.fill, dtype=np.int64)
            kvp[:bs] = kv
        if mode == "uniform":
            width = int(launch_width)
            aw = self._uniform_widths(pbs, width)
            return (Launch(aw, aw, kvp, pbs * width, pbs, width, ("u", width), ("u", width)),
                    ("verify", pbs, width))
        w = np.asarray(widths, dtype=np.int64)
        qw = np.zeros(pbs, dtype=np.int64)
        qw[:bs] = w
        if mode == "ragged":
            # pbs * width rows; the rows no request owns go to one extra sequence (cached length
            # = the fill value) so every row computes finite values, like SGLang's padded rows.
            width = max(1, -(-int(w.sum()) // pbs))
            rows = pbs * width
            qw = np.append(qw, rows - int(w.sum()))
            kvp = np.append(kvp, self.fill)
            return (Launch(qw, qw, kvp, rows, pbs + 1, max(self.capture_widths[-1], width)),
                    ("ragged", pbs, width))
        width = int(launch_width)
        aw = self._uniform_widths(pbs, width)
        return (Launch(qw, aw, kvp, pbs * width, pbs, width, ("u", width), None),
                ("verify", pbs, width))

    def draft_launch(self, kv_lens: np.ndarray, padded_bs: int) -> tuple[Launch, tuple]:
        """One draft-model step over the batch (one query row per request)."""
        kv = np.asarray(kv_lens, dtype=np.int64)
        pbs = int(padded_bs)
        if pbs != len(kv):
            kvp = np.full(pbs, self.fill, dtype=np.int64)
            kvp[:len(kv)] = kv
            kv = kvp
        ones = self._uniform_widths(pbs, 1)
        return Launch(ones, ones, kv, pbs, pbs, 1, ("u", 1), ("u", 1)), ("draft", pbs)

    def extend_launch(self, kv_lens: np.ndarray, padded_bs: int, width: int) -> tuple[Launch, tuple]:
        """The draft-extend pass over the batch: ``width`` query rows per request (padded rows
        too, at the fill length), positions ``kv .. kv + width - 1``, ``seqused_k = kv + width``
        -- the metadata SGLang's draft-extend graph gives every request at its padded width."""
        kv = np.asarray(kv_lens, dtype=np.int64)
        pbs = int(padded_bs)
        width = int(width)
        if width < 1:
            raise ValueError(f"draft-extend width must be >= 1, got {width}")
        if pbs != len(kv):
            kvp = np.full(pbs, self.fill, dtype=np.int64)
            kvp[:len(kv)] = kv
            kv = kvp
        aw = self._uniform_widths(pbs, width)
        return (Launch(aw, aw, kv, pbs * width, pbs, width, ("u", width), ("u", width)),
                ("extend", pbs, width))

    def extend_hidden_width(self) -> int:
        """Columns of the hidden states a draft-extend pass reads: the target's three captured
        layers for EAGLE-3 (``fusion_in``), the target's last hidden state for EAGLE."""
        dg = self.draft_geometry
        return dg["fusion_in"] if dg["role"] == "eagle3" else dg["hidden"]

    def _uniform_widths(self, n: int, width: int) -> np.ndarray:
        key = (n, width)
        a = self._width_cache.get(key)
        if a is None:
            a = np.full(n, width, dtype=np.int64)
            a.setflags(write=False)
            self._width_cache[key] = a
        return a

    def _fill_host(self, st: _Static, launch: Launch, k: int) -> None:
        """Write ``launch``'s per-launch metadata into staging buffer ``k``."""
        sk, starts, seq_lens, qo = st.views[k]
        fill_meta(launch.kv_lens, launch.attn_widths, launch.q_widths, self.page_size,
                  self.pool.span, sk, starts, seq_lens)
        sig = launch.qo_sig
        if sig is None or st.qo_sig[k] != sig:
            qo[0] = 0
            np.cumsum(launch.attn_widths, out=qo[1:])
            st.qo_sig[k] = sig

    def _fill_layout(self, st: _Static, launch: Launch) -> bool:
        """Write the row layout when it differs from the one on the device; True if copied."""
        sig = launch.layout_sig
        if sig is not None and sig == st.layout_sig:
            return False
        if st.layout_copied is not None:
            wait_event(st.layout_copied, self.spin_wait)
        rows = st.rows
        buf = st.host_layout_np
        qw = launch.q_widths
        total = int(qw.sum())
        n = min(total, rows)
        req = np.repeat(np.arange(st.nseq, dtype=np.int32), qw)[:n]
        first = np.cumsum(qw) - qw
        buf[:n] = req
        buf[rows:rows + n] = np.arange(n, dtype=np.int64) - first[req]
        buf[n:rows] = st.nseq  # padding rows
        buf[rows + n:] = 0
        st.layout.copy_(st.host_layout, non_blocking=self.on_gpu)
        if self.on_gpu:
            import torch

            e = torch.cuda.Event()
            e.record()
            st.layout_copied = e
        st.layout_sig = sig
        return True

    def _stage(self, st: _Static, launch: Launch) -> None:
        """Copy a launch's metadata into the static buffers (one H2D copy; two if the layout changed)."""
        k = st.turn
        st.turn ^= 1
        ev = st.copied[k]
        if ev is not None:
            wait_event(ev, self.spin_wait)
        self._fill_host(st, launch, k)
        st.dev.copy_(st.host[k], non_blocking=self.on_gpu)
        if self.on_gpu:
            import torch

            e = torch.cuda.Event()
            e.record()
            st.copied[k] = e
        self._fill_layout(st, launch)

    # ---- forward bodies -------------------------------------------------------------------------
    def _attn_inputs(self, st: _Static) -> AttnInputs:
        return AttnInputs(cu_seqlens_q=st.qo, seqused_k=st.seqused_k, block_table=st.block_table,
                          max_seqlen_q=st.max_seqlen_q, max_seqlen_k=self.max_seqlen_k,
                          positions=st.positions, slots=st.slots)

    def _body(self, st: _Static):
        expand_metadata(st.starts, st.seq_lens, st.row_req, st.row_off, st.block_table,
                        st.positions, st.slots, page_size=self.page_size)
        a = self._attn_inputs(st)
        if st.model == "draft":
            return self.draft.forward(st.ids, a, hidden_in=st.hidden, logits_index=st.logits_index,
                                      logits_out=st.logits)
        return self.target.forward(st.ids, a, logits_out=st.logits)

    def shared_hidden(self, rows: int, width: int):
        """A ``[rows, width]`` view of one buffer of random hidden states shared by every draft
        graph (the draft only reads it), grown when a launch needs more."""
        import torch

        n = int(rows) * int(width)
        if self._shared_hidden is None or self._shared_hidden.numel() < n:
            cap = self.capture_bs[-1] * max(self.capture_widths[-1], 8)
            wmax = max(self.geometry["hidden"], self.draft_geometry.get("fusion_in", 0)
                       if self.draft_geometry else 0)
            gen = torch.Generator(device=self.device).manual_seed(self.seed + 1)
            self._shared_hidden = torch.empty(max(n, cap * wmax), dtype=self.dtype,
                                              device=self.device).normal_(0.0, 1.0, generator=gen)
        return self._shared_hidden[:n].view(int(rows), int(width))

    def shared_buffers(self, nseq: int, rows: int, model: str):
        """(page table ``[nseq, max_blocks]``, logits ``[rows, vocab]``): views of buffers shared
        by every graph that fits them; larger (eager) launches get their own."""
        import torch

        vocab = self.geometry["vocab"] if model == "target" else self.draft_geometry["vocab"]
        if self._shared is None:
            max_nseq = self.capture_bs[-1] + 1
            max_rows = self.capture_bs[-1] * max(self.capture_widths[-1], 8)
            elems = max_rows * max(self.geometry["vocab"],
                                   self.draft_geometry["vocab"] if self.draft_geometry else 0)
            self._shared = (torch.zeros((max_nseq, self.max_blocks), dtype=torch.int32, device=self.device),
                            torch.empty(elems, dtype=self.dtype, device=self.device))
        bt_all, logits_all = self._shared
        bt = bt_all[:nseq] if nseq <= bt_all.shape[0] else torch.zeros(
            (nseq, self.max_blocks), dtype=torch.int32, device=self.device)
        n = rows * vocab
        logits = (logits_all[:n] if n <= logits_all.numel()
                  else torch.empty(n, dtype=self.dtype, device=self.device)).view(rows, vocab)
        return bt, logits

    def _new_static(self, key: tuple) -> _Static:
        kind = key[0]
        if kind == "draft":
            pbs = key[1]
            st = _Static(self, pbs, pbs, model="draft")
            st.max_seqlen_q = 1
        elif kind == "extend":
            import torch

            pbs, width = key[1], key[2]
            last = self.extend_logits == "last"
            st = _Static(self, pbs, pbs * width, model="draft", logits_rows=pbs if last else None,
                         hidden_width=self.extend_hidden_width())
            st.max_seqlen_q = width
            if last:  # each request's last row (SGLang: the last accepted token's)
                st.logits_index = (torch.arange(pbs, dtype=torch.int64) * width + width - 1).to(self.device)
        elif kind == "ragged":
            pbs, width = key[1], key[2]
            st = _Static(self, pbs + 1, pbs * width, model="target")
            st.max_seqlen_q = max(self.capture_widths[-1], width)
        else:
            pbs, width = key[1], key[2]
            st = _Static(self, pbs, pbs * width, model="target")
            st.max_seqlen_q = width
        return st

    # ---- running --------------------------------------------------------------------------------
    def replay_step(self, st: _Static, launch: Launch, key: tuple | None = None) -> tuple[bool, bool]:
        """The hot path of a replayed step: fill the staging buffer and launch the graph (whose
        first node copies it to the GPU).  Events ``st.e0``/``st.e1`` bracket the replay.

        With ``key`` and queued timing on, the GPU is held while the host launches the graph
        (:meth:`_hold`).  Returns ``(held, starved)``: starved when the hold ended before the
        launch was queued (``e0`` had completed), so the GPU may have waited for the host
        inside the events."""
        if st.done is not None:
            wait_event(st.done, self.spin_wait)  # the previous replay has read the staging buffer
        self._fill_host(st, launch, 0)
        if launch.layout_sig is None or launch.layout_sig != st.layout_sig:
            self._fill_layout(st, launch)
        held = key is not None and self._hold(key)
        h0 = time.perf_counter()
        st.e0.record()
        st.graph.replay()
        starved = held and st.e0.query()
        st.e1.record()
        if key is not None:
            self._note_lead(key, time.perf_counter() - h0, starved)
        st.done = st.e1
        return held, starved

    def run(self, key: tuple, launch: Launch, *, graph: bool, reps: int = 1,
            warmup: int | None = 0, comm_rows: int | None = None,
            logits_rows: int | None = None) -> list[Timing]:
        """Run ``launch`` (``reps`` timed runs after ``warmup``; ``None``: :meth:`auto_warmup`)
        and return their timings."""
        if graph:
            st = self.capture(key)
            comm = self._comm(key, launch, comm_rows, logits_rows)

            def once():
                h0 = time.perf_counter()
                held, starved = self.replay_step(st, launch, key)
                host = time.perf_counter() - h0
                wait_event(st.e1, self.spin_wait)
                return st.e0.elapsed_time(st.e1) / 1e3, host, held, starved

            return self._timed_runs(once, key=key, comm=comm, graph=True, reps=reps,
                                    warmup=self.auto_warmup(key) if warmup is None else warmup)
        st = self._eager_static(key, launch)
        comm = self._comm(key, launch, comm_rows, logits_rows)
        return self._time_eager(st, launch, lambda: self._body(st), key=key, comm=comm,
                                reps=reps, warmup=warmup)

    def _eager_static(self, key: tuple, launch: Launch) -> _Static:
        ekey = ("eager",) + key
        st = self.graphs.get(ekey)
        if st is None:
            st = self._new_static(key)
            self.graphs[ekey] = st
            if len([k for k in self.graphs if k[0] == "eager"]) > 64:  # bound eager buffers
                for k in [k for k in self.graphs if k[0] == "eager"][:32]:
                    del self.graphs[k]
        return st

    def _comm(self, key: tuple, launch: Launch, rows: int | None, logits_rows: int | None) -> float:
        g = self.draft_geometry if key[0] in ("draft", "extend") else self.geometry
        r = launch.rows if rows is None else rows
        if logits_rows is None and key[0] == "extend" and self.extend_logits == "last":
            logits_rows = launch.nseq
        lr = r if logits_rows is None else logits_rows
        return comm_time_s(g["tp"], g["layers"], r, g["hidden"], lr, g["vocab"], self.comm)

    # ---- prefill (always eager, ragged) ---------------------------------------------------------
    def prefill(self, tokens: np.ndarray, prefix: np.ndarray, *, reps: int = 1,
                warmup: int | None = 0) -> list[Timing]:
        """Time a prefill pass: request i computes ``tokens[i]`` new tokens after ``prefix[i]``
        cached (``warmup=None``: :meth:`auto_warmup`)."""
        import torch

        t = np.asarray(tokens, dtype=np.int64)
        p = np.asarray(prefix, dtype=np.int64)
        bs = len(t)
        rows = int(t.sum())
        launch = Launch(t, t, p, rows, bs, int(t.max()))
        key = ("prefill", bs, rows)
        st = _Static(self, bs, rows, model="target", logits=False)
        st.max_seqlen_q = int(t.max())
        last = torch.as_tensor(np.cumsum(t) - 1, dtype=torch.int64).to(self.device)

        def body():
            expand_metadata(st.starts, st.seq_lens, st.row_req, st.row_off, st.block_table,
                            st.positions, st.slots, page_size=self.page_size)
            return self.target.forward(st.ids, self._attn_inputs(st), logits_index=last)

        return self._time_eager(st, launch, body, key=key, comm=self._comm(key, launch, rows, bs),
                                reps=reps, warmup=warmup)

    # ---- diagnostics ----------------------------------------------------------------------------
    def describe(self) -> dict[str, Any]:
        g = self.geometry
        p = self.pool.plan
        return {
            "geometry": g, "draft_geometry": self.draft_geometry,
            "page_size": self.page_size, "max_context": self.max_context,
            "max_seqlen_k": self.max_seqlen_k, "capture_bs": list(self.capture_bs),
            "capture_widths": list(self.capture_widths), "num_draft_tokens": self.num_draft_tokens,
            "draft_role": self.draft_geometry["role"] if self.draft_geometry else None,
            "extend_logits": self.extend_logits,
            "seq_len_fill_value": self.fill,
            "kv_pool": {"pages": p.pages, "view_pages": p.view_pages, "layer_shift_pages": p.shift,
                        "views": p.views, "bytes": p.bytes, "page_bytes_k": p.page_bytes},
            "comm_model": {"latency_s": self.comm.latency_s, "bus_bw": self.comm.bus_bw,
                           "tp": g["tp"], "measured": False},
            "timing": self.timing_describe(),
            "graphs_captured": len([k for k in self.graphs if k[0] != "eager" and self.graphs[k].graph is not None]),
            "graph_memsets": {"replaced_by_kernels": self.replace_memsets, **self.graph_fix},
        }
