"""What one forward launch is on the host, and the device buffers a graph (or eager run) reads.

:class:`Launch` describes a forward (per-request query rows and cached lengths); :func:`fill_meta`
writes its compact per-request metadata into a pinned staging buffer; :func:`expand_metadata`
(one Triton kernel, captured in every graph) expands it on the GPU into the page table and each
row's rotary position and KV slot; :class:`_Static` holds one key's buffers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from backends.jit import JIT_ENABLED, njit

if TYPE_CHECKING:
    from backends.aiter.runner import Runner

__all__ = ["Launch", "expand_metadata", "fill_meta"]


@dataclass
class Launch:
    """Host-side description of one forward: per-request query rows and cached lengths.

    ``q_widths[i]``: rows request i contributes; ``attn_widths[i]``: rows the attention metadata
    gives it (differs from ``q_widths`` only for unsafe-derived launches); ``kv_lens[i]``: tokens
    cached before the pass.  ``rows``: query rows in the launch (static for graphs).
    """

    q_widths: np.ndarray
    attn_widths: np.ndarray
    kv_lens: np.ndarray
    rows: int
    nseq: int
    max_seqlen_q: int
    qo_sig: tuple | None = None      # equal signatures: same qo_indptr (skip rewriting it)
    layout_sig: tuple | None = None  # equal signatures: same row layout (skip copying it)


_expand_kernel = None


def _get_expand_kernel():
    """One Triton kernel that expands a launch's compact metadata on the GPU: the page table
    (``block_table[i, j] = start_i + j``) and each query row's rotary position and KV slot
    (``pos = seq_len[req] + off``, ``slot = (start[req] + pos // page) * page + pos % page``;
    rows whose ``req`` is ``nseq`` are padding: position 0, slot 0)."""
    global _expand_kernel
    if _expand_kernel is None:
        import triton
        import triton.language as tl

        @triton.jit
        def _expand(starts_ptr, seq_lens_ptr, row_req_ptr, row_off_ptr, bt_ptr, pos_ptr, slot_ptr,
                    nseq, rows, max_blocks, PAGE: tl.constexpr, BLOCK: tl.constexpr):
            pid = tl.program_id(0)
            if pid < nseq:
                s = tl.load(starts_ptr + pid)
                base = bt_ptr + pid.to(tl.int64) * max_blocks
                for c in range(0, max_blocks, BLOCK):
                    cols = c + tl.arange(0, BLOCK)
                    tl.store(base + cols, s + cols, mask=cols < max_blocks)
            else:
                r = (pid - nseq) * BLOCK + tl.arange(0, BLOCK)
                m = r < rows
                req = tl.load(row_req_ptr + r, mask=m, other=0)
                off = tl.load(row_off_ptr + r, mask=m, other=0)
                kv = tl.load(seq_lens_ptr + req, mask=m, other=0)
                st = tl.load(starts_ptr + req, mask=m, other=0)
                pos = kv + off
                slot = (st + pos // PAGE) * PAGE + pos % PAGE
                valid = req < nseq
                tl.store(pos_ptr + r, tl.where(valid, pos, 0), mask=m)
                tl.store(slot_ptr + r, tl.where(valid, slot, 0), mask=m)

        _expand_kernel = _expand
    return _expand_kernel


def expand_metadata(starts, seq_lens, row_req, row_off, block_table, positions, slots, *,
                    page_size: int) -> None:
    """Launch :func:`_get_expand_kernel` (``starts``/``seq_lens`` have ``nseq + 1`` entries, the last 0)."""
    nseq, max_blocks = block_table.shape
    rows = positions.shape[0]
    block = 1024
    grid = (nseq + -(-rows // block),)
    _get_expand_kernel()[grid](starts, seq_lens, row_req, row_off, block_table, positions, slots,
                               nseq, rows, max_blocks, PAGE=page_size, BLOCK=block)


@njit
def _fill_meta_jit(kv, aw, qw, ps, span, sk, starts, seq_lens):
    acc = 0
    for i in range(kv.shape[0]):
        kk = kv[i]
        a = aw[i]
        q = qw[i]
        sk[i] = kk + a
        seq_lens[i] = kk
        starts[i] = acc % span
        e = kk + (a if a > q else q)
        acc += (e + ps - 1) // ps


def _fill_meta_numpy(kv, aw, qw, ps, span, sk, starts, seq_lens):
    n = kv.shape[0]
    seq_lens[:n] = kv
    np.add(seq_lens[:n], aw, out=sk, casting="unsafe")
    extent = sk if qw is aw else kv + np.maximum(qw, aw)
    blocks = (extent + (ps - 1)) // ps
    starts[0] = 0
    np.cumsum(blocks[:-1], out=starts[1:n])
    np.remainder(starts[1:n], span, out=starts[1:n])


def fill_meta(kv, aw, qw, ps, span, sk, starts, seq_lens) -> None:
    """Per-request metadata: ``seqused_k = kv + aw``, ``seq_lens = kv`` and each request's first
    page ``starts[i] = (pages of requests < i) mod span`` (pages cover ``kv + max(qw, aw)``)."""
    if JIT_ENABLED:
        _fill_meta_jit(kv, aw, qw, ps, span, sk, starts, seq_lens)
    else:
        _fill_meta_numpy(kv, aw, qw, ps, span, sk, starts, seq_lens)


class _Static:
    """A captured (or eager) forward's device buffers and its host staging buffers.

    ``meta`` (copied every launch, int32): ``seqused_k[nseq] | starts[nseq+1] | seq_lens[nseq+1] |
    qo_indptr[nseq+1]``.  ``layout`` (copied only when it changes, int32): ``row_req[rows] |
    row_off[rows]`` -- which request each query row belongs to and its offset in it.
    """

    def __init__(self, runner: "Runner", nseq: int, rows: int, *, model: str,
                 logits: bool = True, logits_rows: int | None = None,
                 hidden_width: int | None = None) -> None:
        import torch

        self.nseq = nseq
        self.rows = rows
        self.model = model
        n = 4 * nseq + 3
        pin = runner.on_gpu

        def host(k):
            t = torch.zeros(k, dtype=torch.int32)
            return t.pin_memory() if pin else t

        self.host = [host(n), host(n)]
        self.host_np = [h.numpy() for h in self.host]
        self.views = []
        for hn in self.host_np:
            self.views.append((hn[0:nseq], hn[nseq:2 * nseq + 1], hn[2 * nseq + 1:3 * nseq + 2],
                               hn[3 * nseq + 2:4 * nseq + 3]))
        self.qo_sig = [None, None]
        self.copied = [None, None]
        self.turn = 0
        self.host_layout = host(2 * rows)
        self.host_layout_np = self.host_layout.numpy()
        self.layout_sig = None
        self.layout_copied = None
        dev = runner.device
        self.dev = torch.zeros(n, dtype=torch.int32, device=dev)
        self.seqused_k = self.dev[0:nseq]
        self.starts = self.dev[nseq:2 * nseq + 1]
        self.seq_lens = self.dev[2 * nseq + 1:3 * nseq + 2]
        self.qo = self.dev[3 * nseq + 2:4 * nseq + 3]
        self.layout = torch.zeros(2 * rows, dtype=torch.int32, device=dev)
        self.row_req = self.layout[:rows]
        self.row_off = self.layout[rows:]
        self.positions = torch.zeros(rows, dtype=torch.int32, device=dev)
        self.slots = torch.zeros(rows, dtype=torch.int32, device=dev)
        # graphs share one page table and one logits buffer (they never run at the same time
        # and both are rewritten by every replay), so memory does not grow with the graph count
        n_logits = (rows if logits_rows is None else logits_rows) if logits else 0
        self.block_table, self.logits = runner.shared_buffers(nseq, n_logits, model)
        g = torch.Generator(device="cpu").manual_seed(1234 + rows)
        vocab = runner.geometry["vocab"] if model == "target" else runner.draft_geometry["vocab"]
        self.ids = torch.randint(0, vocab, (rows,), generator=g).to(dev)
        self.hidden = None
        self.logits_index = None  # rows whose logits are computed (None: every row)
        if model == "draft":
            self.hidden = runner.shared_hidden(rows, hidden_width or runner.geometry["hidden"])
        self.graph = None
        self.out = None
        self.max_seqlen_q = 1
        self.e0 = self.e1 = self.done = None
