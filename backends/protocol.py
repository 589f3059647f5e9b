"""The executor protocol: how the engine asks how long a forward pass takes.

Batches carry shapes only (batch sizes, per-request widths and KV lengths, graph or eager);
executors are deterministic functions of those shapes (a live GPU executor up to measurement
noise).  All times are in seconds.  Executors know nothing of SimPy or of the engine.

An executor whose latencies come from a :class:`backends.latency_table.LatencyTable` returns it
from :meth:`Executor.latency_table`; the engine then evaluates that table in compiled code
(the fast path) instead of calling the methods once per batch.  The two give identical numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from backends.latency_table import LatencyTable

__all__ = ["PrefillBatch", "DraftBatch", "VerifyBatch", "DraftExtendBatch", "VerifyTiming",
           "Executor", "VERIFY_MODES"]

#: How the verify kernel sees a launch: every request at ``launch_width`` ("uniform"), each
#: request at its own width with exact metadata ("ragged", a what-if), or each request at its
#: own width with metadata derived as ``tokens // bs`` ("unsafe-derived", wrong when mixed).
VERIFY_MODES = ("uniform", "ragged", "unsafe-derived")


@dataclass(frozen=True, slots=True)
class PrefillBatch:
    """One prefill (extend) forward pass, always eager.

    ``tokens[i]``: prompt tokens of request i computed in this pass (a chunk);
    ``prefix[i]``: tokens of request i already in the KV cache before this pass.
    """

    tokens: np.ndarray
    prefix: np.ndarray

    @property
    def bs(self) -> int:
        return int(len(self.tokens))


@dataclass(frozen=True, slots=True)
class DraftBatch:
    """The draft phase of one decode iteration: ``passes`` draft-model steps over the batch.

    Each pass proposes one token per request (chain drafting, top-k 1).  ``kv_lens[i]`` is request
    i's context length before the phase.  ``bs_padded`` is the captured batch size the graph
    replays at (``== bs_real`` when eager).
    """

    bs_real: int
    bs_padded: int
    kv_lens: np.ndarray
    passes: int
    graph: bool


@dataclass(frozen=True, slots=True)
class VerifyBatch:
    """One verify launch of the target model.

    ``widths[i]``: tokens request i is verified with (its last committed token + drafts), after
    the verify policy; ``kv_lens[i]``: its tokens in the KV cache before the verify (SGLang's
    ``seq_lens``).  ``launch_width``: the uniform width the kernel's metadata uses (for
    ``mode == "uniform"`` every ``widths[i]`` equals it; for the other modes it is
    ``sum(widths) // bs_real``).  ``bs_padded``: the captured batch size replayed (``== bs_real``
    when eager); padded rows carry no tokens of any request.
    """

    bs_real: int
    bs_padded: int
    widths: np.ndarray
    kv_lens: np.ndarray
    launch_width: int
    mode: str
    graph: bool

    @property
    def tokens(self) -> int:
        """Query rows of real requests."""
        return int(np.sum(self.widths))

    @property
    def mixed(self) -> bool:
        return bool(len(self.widths) and np.any(self.widths != self.widths[0]))


@dataclass(frozen=True, slots=True)
class DraftExtendBatch:
    """The draft-extend pass after a verify: the draft model over each request's accepted tokens.

    SGLang's EAGLE worker runs it after every verify (``forward_draft_extend_after_decode``): the
    draft model reads the tokens the verify accepted plus the bonus token, writes their KV into
    the draft's cache and proposes the next round's first draft token.  ``width``: query rows per
    request the launch holds -- a graph replay pads every request to SGLang's
    ``num_tokens_per_bs`` (``speculative_num_steps + 1``, the round's verify width at top-k 1);
    the engine gives eager launches the round's verify width too (an approximation: SGLang's
    eager pass has each request's accepted count + 1 rows).  ``kv_lens[i]``: request i's tokens
    in the KV cache before the extended tokens (its KV before the verify).  ``bs_padded``: the
    captured batch size replayed (``== bs_real`` when eager); padded rows carry no request.
    """

    bs_real: int
    bs_padded: int
    width: int
    kv_lens: np.ndarray
    graph: bool

    @property
    def tokens(self) -> int:
        """Query rows of real requests (``bs_real * width``)."""
        return int(self.bs_real) * int(self.width)


@dataclass(frozen=True, slots=True)
class VerifyTiming:
    """What a verify launch cost, and (for a real executor) what went wrong numerically.

    ``max_abs_error`` and ``misattributed_rows`` are filled only by executors that actually run
    the kernel (the live AITER executor) for ``unsafe-derived`` launches; ``None`` otherwise.
    ``out_of_grid`` is true when a table executor extrapolated beyond its measured grid.
    """

    latency_s: float
    out_of_grid: bool = False
    max_abs_error: float | None = None
    misattributed_rows: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Executor(Protocol):
    """How long a batch takes.  Every method returns seconds (> 0) and never mutates the batch."""

    name: str

    def prefill(self, batch: PrefillBatch) -> float: ...

    def draft(self, batch: DraftBatch) -> float: ...

    def verify(self, batch: VerifyBatch) -> VerifyTiming: ...

    def draft_extend(self, batch: DraftExtendBatch) -> float: ...

    def latency_table(self) -> "LatencyTable | None":
        """The table this executor's latencies come from (fast path), or ``None`` (live executors)."""
        ...

    def describe(self) -> dict[str, Any]:
        """Provenance for summaries: backend name, model, GPU, profile file, versions, caveats."""
        ...
