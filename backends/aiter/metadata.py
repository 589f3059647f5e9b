"""Target-verify attention metadata exactly as SGLang's AITER backend builds it (pure torch, CPU).

Sources (SGLang, ``python/sglang/srt/layers/attention/aiter_backend.py`` and
``python/sglang/srt/model_executor/cuda_graph_runner.py``, main branch as of 2025/2026):

* ``AiterAttnBackend.init_forward_metadata_out_graph`` derives the verify width of the non-MLA
  path per batch as ``forward_batch.input_ids.shape[0] // forward_batch.batch_size`` and passes it
  to ``_apply_cuda_graph_metadata`` as ``verify_tokens_per_req``.
* ``_apply_cuda_graph_metadata`` (target-verify branch): ``tokens_per_req`` is
  ``num_draft_tokens`` on the MLA path and ``verify_tokens_per_req`` otherwise;
  ``qo_indptr = arange(0, (1+bs)*tokens_per_req, tokens_per_req)``; ``kv_lens`` is
  ``seq_lens + num_draft_tokens`` (MLA) or ``seq_lens`` (non-MLA); ``kv_indptr = [0,
  cumsum(kv_lens)]``; on replay (``seq_lens_sum`` given) it calls ``assert_buffer_fits(seq_lens_sum
  (+ num_draft_tokens*bs for MLA), cuda_graph_kv_indices.numel(), "aiter target_verify
  kv_indices")``; ``kv_last_page_len`` is the all-ones ``cuda_graph_kv_last_page_len``; the MLA
  path sets ``max_q_len = num_draft_tokens`` and ``max_kv_len = max(seq_lens_cpu)``; the unified
  (non-MLA) path sets ``max_q_len = verify_tokens_per_req`` and a *constant* ``max_kv_len =
  max_num_blocks_per_seq * page_size`` with ``max_num_blocks_per_seq = ceil(context_len /
  page_size)``, and fills a ``[bs, max_num_blocks_per_seq]`` page table
  (``_build_verify_unified_metadata``).
* ``forward_extend`` (target verify, unified path) calls ``unified_attention`` with
  ``cu_seqlens_q = qo_indptr``, ``max_seqlen_q = max_q_len``, ``max_seqlen_k = page_table.shape[1]
  * page_size`` and ``seqused_k = seq_lens + <width>`` (the 3D-MTP branch adds ``max_q_len``, the
  generic branch ``num_draft_tokens``; the two agree whenever the batch has the start-up width;
  we use the width the metadata uses, as ``docs/aiter.md`` explains).
* ``init_cuda_graph_state`` sizes ``cuda_graph_kv_indices`` as ``max_bs * (max_num_blocks_per_seq *
  page_size + (num_draft_tokens or 0))``.
* ``get_cuda_graph_seq_len_fill_value`` returns ``num_draft_tokens`` (1 without speculation);
  ``CudaGraphRunner.replay_prepare`` pads a batch to ``capture_bs[bisect_left(capture_bs, raw_bs)]``,
  fills the padded rows' ``seq_lens`` with that value, zeroes ``out_cache_loc`` (so padded rows
  write KV slot 0) and passes ``seq_lens_sum + (bs - raw_bs) * fill_value``.  A batch larger than
  the largest captured size runs eagerly (``can_run``).
* MLA decode kernels (``mla_decode_fwd``) exist for 1, 2 and 4 query rows per request (3 runs
  padded to 4); head counts 4 and 8 are repeated to 16, 12 is zero-padded to 16, and multiples of
  16 up to 128 run as they are (``AiterAttnBackend.__init__``: ``_mla_low_head_repeat``,
  ``_mla_low_head_zero_pad``, ``_valid_heads``).

The speculative CUDA-graph batch-size ladder is SGLang's default for speculative decoding:
1-8, 10-32 step 2, 40-64 step 4, 72-256 step 8.

Everything here is plain torch on the CPU: the executor copies the same tensors to the GPU.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from traces.errors import SpecschedError

__all__ = ["SPEC_CAPTURE_BS", "DEFAULT_CAPTURE_WIDTHS", "DEFAULT_MAX_CONTEXT", "MLA_KERNEL_Q_LEN",
           "VerifyMetadata", "Violation", "build_verify_metadata", "build_ragged_metadata",
           "padded_batch_size", "misattribution", "mla_heads", "kv_indices_capacity",
           "max_blocks_per_seq", "page_table"]

#: SGLang's default CUDA-graph batch sizes when speculative decoding is on.
SPEC_CAPTURE_BS: tuple[int, ...] = tuple(
    list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) + list(range(72, 257, 8)))

#: Widths for which specsched's executor captures graphs unless told otherwise.
DEFAULT_CAPTURE_WIDTHS: tuple[int, ...] = tuple(range(1, 9))

#: SGLang's ``context_len`` for the Llama-3.1 family (sizes the page table and ``max_seqlen_k``).
DEFAULT_MAX_CONTEXT = 131072

#: AITER MLA decode: query rows per request the kernel is launched with, by ``num_draft_tokens``.
MLA_KERNEL_Q_LEN = {1: 1, 2: 2, 3: 4, 4: 4}


def padded_batch_size(bs: int, capture_bs: Sequence[int]) -> int | None:
    """The captured batch size a batch of ``bs`` replays at (``bisect_left``), or ``None`` (eager)."""
    if not capture_bs or bs > capture_bs[-1]:
        return None
    return int(capture_bs[bisect.bisect_left(capture_bs, bs)])


def max_blocks_per_seq(max_context: int, page_size: int) -> int:
    """``ceil(context_len / page_size)``: the page table's width."""
    return -(-int(max_context) // int(page_size))


def kv_indices_capacity(capture_bs: Sequence[int], max_context: int, page_size: int,
                        num_draft_tokens: int | None) -> int:
    """Entries of ``cuda_graph_kv_indices`` (``init_cuda_graph_state``)."""
    return int(max(capture_bs)) * (max_blocks_per_seq(max_context, page_size) * page_size
                                    + (num_draft_tokens or 0))


def mla_heads(num_heads: int) -> tuple[int | None, str]:
    """(heads the MLA kernel runs with, how) for ``num_heads`` query heads per GPU; ``None`` if refused."""
    if num_heads in (4, 8):
        return 16, f"repeated {16 // num_heads}x to 16"
    if num_heads == 12:
        return 16, "zero-padded to 16"
    if num_heads % 16 == 0 and 16 <= num_heads <= 128:
        return num_heads, "as is"
    return None, "AITER MLA supports 4, 8, 12 or multiples of 16 up to 128 query heads per GPU"


@dataclass(frozen=True)
class Violation:
    """How a mixed-width batch is misread under uniform metadata of width ``width``.

    ``misattributed_rows``: real query rows whose request under the derived ``qo_indptr``
    differs from their real request (rows at or past ``bs * width`` belong to no real request and
    count too).  ``misplaced_rows``: rows given to the right request but at another position, so
    they see a different causal key range.  ``rows_past_layout``: rows at or past ``bs * width``
    (never computed as their request's rows).  ``phantom_rows``: layout rows that hold no real
    query (when ``bs * width`` exceeds the real token count).  ``kv_mismatch_requests``: requests
    whose ``seqused_k`` differs from their real extent (``kv_len + width_i``).
    """

    misattributed_rows: int
    misplaced_rows: int
    rows_past_layout: int
    phantom_rows: int
    kv_mismatch_requests: int
    real_qo_indptr: list[int]
    real_seqused_k: list[int]
    row_request: list[int]
    derived_row_request: list[int]

    def to_dict(self) -> dict[str, Any]:
        return {
            "misattributed_rows": self.misattributed_rows,
            "misplaced_rows": self.misplaced_rows,
            "wrong_rows": self.misattributed_rows + self.misplaced_rows,
            "rows_past_layout": self.rows_past_layout,
            "phantom_rows": self.phantom_rows,
            "kv_mismatch_requests": self.kv_mismatch_requests,
            "real_qo_indptr": self.real_qo_indptr,
            "real_seqused_k": self.real_seqused_k,
            "row_request": self.row_request,
            "derived_row_request": self.derived_row_request,
        }


def misattribution(widths: Sequence[int] | np.ndarray, width: int,
                   kv_lens: Sequence[int] | np.ndarray | None = None) -> Violation | None:
    """Compare per-request widths with uniform metadata of ``width``; ``None`` when they agree.

    Real row ``r`` belongs to request ``searchsorted(cumsum(widths), r, 'right')`` at position
    ``r - start``; under the derived metadata it belongs to request ``r // width`` at position
    ``r % width`` (``-1``: no real request, when ``r >= bs * width``).
    """
    w = np.asarray(widths, dtype=np.int64)
    bs = len(w)
    width = int(width)
    if bs == 0 or np.all(w == width):
        return None
    ends = np.cumsum(w)
    starts = ends - w
    total = int(ends[-1])
    rows = np.arange(total, dtype=np.int64)
    real_req = np.searchsorted(ends, rows, side="right")
    real_pos = rows - starts[real_req]
    derived_req = rows // width
    derived_req = np.where(derived_req < bs, derived_req, -1)
    derived_pos = rows % width
    wrong_req = derived_req != real_req
    misplaced = (~wrong_req) & (derived_pos != real_pos)
    kv = np.zeros(bs, dtype=np.int64) if kv_lens is None else np.asarray(kv_lens, dtype=np.int64)
    return Violation(
        misattributed_rows=int(np.count_nonzero(wrong_req)),
        misplaced_rows=int(np.count_nonzero(misplaced)),
        rows_past_layout=int(max(0, total - bs * width)),
        phantom_rows=int(max(0, bs * width - total)),
        kv_mismatch_requests=int(np.count_nonzero(w != width)),
        real_qo_indptr=[0] + ends.tolist(),
        real_seqused_k=(kv + w).tolist(),
        row_request=real_req.tolist(),
        derived_row_request=derived_req.tolist(),
    )


@dataclass(frozen=True)
class VerifyMetadata:
    """The metadata one verify launch gets (tensors are int32 on the CPU, rows = ``padded_bs``).

    ``width``: query rows per request the kernel is told (``tokens // bs`` on the non-MLA path,
    ``num_draft_tokens`` on the MLA path).  ``seq_lens``: tokens in the KV cache before the
    verify, padded rows at ``seq_len_fill_value``.  ``seqused_k``: keys each request attends to
    (non-MLA only).  ``kv_lens``: what ``kv_indptr`` counts (MLA: ``seq_lens + width``).
    ``page_table_blocks``: page-table entries each row needs.  ``error``: why SGLang would
    refuse the batch (``None`` when it runs).  ``violation``: set for mixed batches.
    """

    path: str  # "unified" (non-MLA) or "mla"
    bs: int
    padded_bs: int
    graph: bool
    eager_reason: str | None
    width: int
    tokens: int
    page_size: int
    num_draft_tokens: int
    seq_len_fill_value: int
    max_context: int
    seq_lens: "Any"
    qo_indptr: "Any"
    kv_indptr: "Any"
    kv_lens: "Any"
    seqused_k: "Any | None"
    kv_last_page_len: "Any | None"
    page_table_blocks: "Any | None"
    max_seqlen_q: int
    max_seqlen_k: int | None
    kv_indices_needed: int
    kv_indices_capacity: int | None
    error: str | None
    violation: Violation | None
    mla: dict[str, Any] | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def mixed(self) -> bool:
        return self.violation is not None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object ``specsched verify-metadata --json`` prints."""
        def lst(t):
            return None if t is None else [int(x) for x in t.tolist()]

        return {
            "path": self.path,
            "bs": self.bs,
            "padded_bs": self.padded_bs,
            "graph": self.graph,
            "eager_reason": self.eager_reason,
            "width": self.width,
            "tokens": self.tokens,
            "page_size": self.page_size,
            "num_draft_tokens": self.num_draft_tokens,
            "seq_len_fill_value": self.seq_len_fill_value,
            "seq_lens": lst(self.seq_lens),
            "qo_indptr": lst(self.qo_indptr),
            "kv_indptr": lst(self.kv_indptr),
            "seqused_k": lst(self.seqused_k),
            "kv_last_page_len": lst(self.kv_last_page_len),
            "page_table_blocks": lst(self.page_table_blocks),
            "max_seqlen_q": self.max_seqlen_q,
            "max_seqlen_k": self.max_seqlen_k,
            "kv_indices_needed": self.kv_indices_needed,
            "kv_indices_capacity": self.kv_indices_capacity,
            "mla": self.mla,
            "error": self.error,
            "violation": None if self.violation is None else self.violation.to_dict(),
            "notes": list(self.notes),
        }


def _int_list(name: str, values: Sequence[Any], minimum: int) -> list[int]:
    out = []
    for i, v in enumerate(values):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            try:
                fv = float(v)
            except (TypeError, ValueError):
                raise SpecschedError(f"{name}: item {i} is {v!r}, not an integer") from None
            if fv != int(fv):
                raise SpecschedError(f"{name}: item {i} is {v!r}, not an integer")
            v = int(fv)
        v = int(v)
        if v < minimum:
            raise SpecschedError(f"{name}: item {i} is {v}; it must be >= {minimum}")
        out.append(v)
    return out


def _check_batch(widths, kv_lens, page_size, capture_bs, max_context):
    w = _int_list("widths", list(widths), 1)
    kv = _int_list("kv_lens", list(kv_lens), 1)
    if not w:
        raise SpecschedError("widths: a batch needs at least one request")
    if len(w) != len(kv):
        raise SpecschedError(
            f"widths has {len(w)} requests but kv_lens has {len(kv)}; give one KV length per request")
    if int(page_size) < 1:
        raise SpecschedError(f"page_size must be >= 1, got {page_size}")
    if int(max_context) < 1:
        raise SpecschedError(f"max_context must be >= 1, got {max_context}")
    ladder = sorted(set(_int_list("capture_bs", list(capture_bs), 1)))
    return w, kv, ladder


def build_verify_metadata(widths: Sequence[int], kv_lens: Sequence[int], *, mla: bool = False,
                          num_draft_tokens: int | None = None, page_size: int = 16,
                          capture_bs: Sequence[int] = SPEC_CAPTURE_BS,
                          capture_widths: Sequence[int] | None = DEFAULT_CAPTURE_WIDTHS,
                          max_context: int = DEFAULT_MAX_CONTEXT, num_heads: int | None = None,
                          allow_graph: bool = True) -> VerifyMetadata:
    """The metadata SGLang's AITER backend gives a verify batch (see the module docstring).

    ``widths[i]``: query rows request i brings (last committed token + drafts); ``kv_lens[i]``:
    its ``seq_lens`` (tokens cached before the verify).  ``num_draft_tokens``: the server's
    ``speculative_num_draft_tokens`` (required with ``mla``; non-MLA default: the largest width).
    The batch replays a captured graph when it fits the ``capture_bs`` ladder and (non-MLA) its
    derived width is in ``capture_widths`` (``None``: every width); otherwise it runs eagerly.
    ``num_heads``: query heads per GPU, checked against the MLA kernels when given.
    Raises :class:`SpecschedError` only for arguments that do not describe a batch; a batch
    SGLang would refuse comes back with ``error`` set.
    """
    import torch

    w, kv, ladder = _check_batch(widths, kv_lens, page_size, capture_bs, max_context)
    bs = len(w)
    tokens = int(sum(w))
    page_size = int(page_size)
    max_context = int(max_context)
    notes: list[str] = []
    if mla:
        if num_draft_tokens is None:
            raise SpecschedError("the MLA path needs num_draft_tokens (SGLang fixes the width at start-up)")
    if num_draft_tokens is not None and int(num_draft_tokens) < 1:
        raise SpecschedError(f"num_draft_tokens must be >= 1, got {num_draft_tokens}")
    ndt = int(num_draft_tokens) if num_draft_tokens is not None else max(w)
    if num_draft_tokens is None:
        notes.append(f"num_draft_tokens not given: taken as the largest width ({ndt})")
    width = ndt if mla else tokens // bs
    fill = ndt  # get_cuda_graph_seq_len_fill_value

    padded = padded_batch_size(bs, ladder) if allow_graph else None
    eager_reason = None
    if not allow_graph:
        eager_reason = "graphs disabled"
    elif padded is None:
        eager_reason = f"batch size {bs} is larger than the largest captured size {ladder[-1] if ladder else 0}"
    elif not mla and capture_widths is not None and width not in set(int(x) for x in capture_widths):
        eager_reason = f"width {width} has no captured graph (captured widths {sorted(set(int(x) for x in capture_widths))})"
        padded = None
    graph = padded is not None
    pbs = padded if graph else bs

    seq_lens = torch.full((pbs,), fill, dtype=torch.int32)
    seq_lens[:bs] = torch.tensor(kv, dtype=torch.int32)
    qo_indptr = torch.arange(0, (pbs + 1) * width, width, dtype=torch.int32)
    kv_lens_t = seq_lens + ndt if mla else seq_lens.clone()
    kv_indptr = torch.zeros(pbs + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.cumsum(kv_lens_t, 0)
    seq_lens_sum = int(seq_lens.sum())
    kv_needed = seq_lens_sum + (ndt * pbs if mla else 0)
    capacity = kv_indices_capacity(ladder, max_context, page_size, ndt) if graph else None
    mblocks = max_blocks_per_seq(max_context, page_size)

    error = None
    mla_info = None
    if mla:
        seqused_k = None
        page_blocks = None
        kv_last = torch.ones(pbs, dtype=torch.int32)
        max_seqlen_k = int(seq_lens.max()) if graph else None
        q_len = MLA_KERNEL_Q_LEN.get(ndt)
        mla_info = {"kernel_q_len": q_len, "num_heads": num_heads, "kernel_heads": None,
                    "heads_mode": None}
        if q_len is None:
            error = (f"AITER MLA decode kernels take 1, 2 or 4 query rows per request (3 runs as 4); "
                     f"num_draft_tokens={ndt} runs only on gfx950 with an fp8 KV cache")
        elif q_len != ndt:
            notes.append(f"MLA kernel runs {ndt} query rows padded to {q_len}")
        if num_heads is not None:
            kh, how = mla_heads(int(num_heads))
            mla_info["kernel_heads"], mla_info["heads_mode"] = kh, how
            if kh is None and error is None:
                error = f"{num_heads} query heads per GPU: {how}"
        kv_extent = seq_lens + ndt
    else:
        seqused_k = seq_lens + width
        kv_last = None
        max_seqlen_k = mblocks * page_size
        page_blocks = (seqused_k + page_size - 1) // page_size
        kv_extent = seqused_k
    # The replay's assert_buffer_fits fires first; a request longer than the context would
    # overflow the page table / req_to_token row (SGLang's scheduler never admits one).
    if error is None and graph and kv_needed > capacity:
        error = (f"assert_buffer_fits: aiter target_verify kv_indices needs {kv_needed} entries, "
                 f"the buffer holds {capacity} (bs={pbs}, seq_lens_sum={seq_lens_sum})")
    limit = mblocks * page_size + (ndt if mla else 0)  # MLA: the draft slack of the buffer
    if error is None and int(kv_extent.max()) > limit:
        i = int(torch.argmax(kv_extent))
        error = (f"request {i} needs {int(kv_extent[i])} KV positions but a request holds at most "
                 f"{limit} (context_len {max_context}, page {page_size})")

    return VerifyMetadata(
        path="mla" if mla else "unified", bs=bs, padded_bs=pbs, graph=graph,
        eager_reason=eager_reason, width=width, tokens=tokens, page_size=page_size,
        num_draft_tokens=ndt, seq_len_fill_value=fill, max_context=max_context,
        seq_lens=seq_lens, qo_indptr=qo_indptr, kv_indptr=kv_indptr, kv_lens=kv_lens_t,
        seqused_k=seqused_k, kv_last_page_len=kv_last, page_table_blocks=page_blocks,
        max_seqlen_q=width, max_seqlen_k=max_seqlen_k, kv_indices_needed=kv_needed,
        kv_indices_capacity=capacity, error=error,
        violation=misattribution(w, width, kv), mla=mla_info, notes=tuple(notes))


def build_ragged_metadata(widths: Sequence[int], kv_lens: Sequence[int], *, page_size: int = 16,
                          max_context: int = DEFAULT_MAX_CONTEXT, padded_bs: int | None = None,
                          fill: int = 1) -> dict[str, Any]:
    """Exact per-request metadata for ``unified_attention`` (what a ragged-capable launch uses):
    ``qo_indptr = [0, cumsum(widths)]``, ``seqused_k = kv_lens + widths``,
    ``max_seqlen_q = max(widths)``.  Padded rows (up to ``padded_bs``) get no query rows and
    ``fill`` keys."""
    import torch

    w, kv, _ = _check_batch(widths, kv_lens, page_size, [1], max_context)
    bs = len(w)
    pbs = bs if padded_bs is None else int(padded_bs)
    if pbs < bs:
        raise SpecschedError(f"padded_bs {pbs} is smaller than the batch ({bs})")
    qo = torch.zeros(pbs + 1, dtype=torch.int32)
    qo[1:bs + 1] = torch.cumsum(torch.tensor(w, dtype=torch.int32), 0)
    qo[bs + 1:] = qo[bs]
    seq_lens = torch.full((pbs,), int(fill), dtype=torch.int32)
    seq_lens[:bs] = torch.tensor(kv, dtype=torch.int32)
    width_t = torch.zeros(pbs, dtype=torch.int32)
    width_t[:bs] = torch.tensor(w, dtype=torch.int32)
    seqused_k = seq_lens + width_t
    mblocks = max_blocks_per_seq(max_context, page_size)
    return {"qo_indptr": qo, "seq_lens": seq_lens, "seqused_k": seqused_k,
            "max_seqlen_q": max(w), "max_seqlen_k": mblocks * page_size, "tokens": sum(w)}


def page_table(starts: "Any", n_blocks: int, pool_pages: int) -> "Any":
    """A ``[rows, n_blocks]`` int32 page table whose row i maps logical block j to physical page
    ``(starts[i] + j) % pool_pages`` (how specsched's executor lays requests out in its pool)."""
    import torch

    s = torch.as_tensor(starts, dtype=torch.int64).view(-1, 1)
    j = torch.arange(int(n_blocks), dtype=torch.int64).view(1, -1)
    return ((s + j) % int(pool_pages)).to(torch.int32)
