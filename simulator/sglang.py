"""SGLang's scheduling rules and defaults, each as SGLang states it, in one place.

Every number here is SGLang's (read from the ``sglang`` 0.5.23 release, files dated 2026-10-30;
``docs/sglang.md`` cites the file and function of each and names the test that checks it).  The
engine (:mod:`simulator.core`) applies them; the configuration resolves its "as SGLang does"
defaults (``0`` or an empty list) through :func:`resolve_engine`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from backends.sglang_memory import gpu_memory_defaults

if TYPE_CHECKING:
    from simulator.config import EngineConfig

__all__ = ["SPEC_MAX_RUNNING", "LPM_QUEUE_LIMIT", "CLIP_MAX_NEW_TOKENS", "RETRACT_DECODE_STEPS", "INIT_NEW_TOKEN_RATIO",
           "MIN_NEW_TOKEN_RATIO_FACTOR", "NEW_TOKEN_RATIO_DECAY_STEPS", "spec_ladder",
           "capture_ladder", "gpu_memory_defaults", "new_token_ratio_params",
           "decode_reserve_tokens", "default_max_new_tokens", "resolve_engine",
           "nospec_max_running",
           "FALLBACK_GPU_MEMORY_BYTES"]

#: ``max_running_requests`` when speculative decoding is on and the user set none
#: (``arg_groups/speculative_hook.py::_handle_eagle_family``)
SPEC_MAX_RUNNING = 48
#: ``SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION``: the most new tokens a request reserves at admission
CLIP_MAX_NEW_TOKENS = 4096
#: ``SGLANG_RETRACT_DECODE_STEPS``: used in the new_token_ratio estimate after a retraction
RETRACT_DECODE_STEPS = 20
#: ``SGLANG_INIT_NEW_TOKEN_RATIO``, ``SGLANG_MIN_NEW_TOKEN_RATIO_FACTOR``,
#: ``SGLANG_NEW_TOKEN_RATIO_DECAY_STEPS`` (``scheduler_components/new_token_ratio_tracker.py``)
INIT_NEW_TOKEN_RATIO = 0.7
MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
NEW_TOKEN_RATIO_DECAY_STEPS = 600
#: ``SchedulePolicy._determine_active_policy`` (``managers/schedule_policy.py``): with more
#: waiting requests than this, ``lpm`` skips its prefix matching and sorting (FCFS)
LPM_QUEUE_LIMIT = 128
#: the memory the defaults assume when no GPU is named (an H200's, the shipped profiles' GPU)
FALLBACK_GPU_MEMORY_BYTES = 143771 << 20


def spec_ladder(max_bs: int) -> tuple[int, ...]:
    """SGLang's CUDA-graph batch sizes with speculative decoding, up to ``max_bs``.

    1-8, 10-32 step 2, 40-64 step 4, 72-256 step 8, then step 16; sizes above ``max_bs`` are
    dropped and ``max_bs`` itself is added (``cuda_graph_hook.py::
    generate_decode_cuda_graph_batch_sizes``).
    """
    sizes = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4))
    sizes += list(range(72, 257, 8)) + list(range(272, max(max_bs, 256) + 1, 16))
    out = sorted({b for b in sizes if b <= max_bs} | {max_bs})
    return tuple(b for b in out if b >= 1)


def capture_ladder(max_bs: int, pool_size: int) -> tuple[int, ...]:
    """The sizes actually captured: the ladder cut at the request pool's size, which is added when
    the ladder went past it (``runner/base_cuda_graph_runner.py::get_batch_sizes_to_capture``)."""
    ladder = spec_ladder(max_bs)
    kept = [b for b in ladder if b <= pool_size]
    if ladder and ladder[-1] > pool_size:
        kept.append(pool_size)
    return tuple(sorted(set(kept)))


def nospec_max_running(capacity_tokens: int, context_len: int) -> int | None:
    """``max_running_requests`` SGLang derives when none is set and speculative decoding is off:
    ``min(clamp(int(capacity / context_len * 512), 2048, 4096), capacity // 2)``
    (``mem_cache/kv_cache_configurator.py::resolve_max_num_reqs``); None when the model's
    context length is unknown (0)."""
    if context_len <= 0:
        return None
    estimated = max(min(int(capacity_tokens / context_len * 512), 4096), 2048)
    return max(1, min(estimated, capacity_tokens // 2))


def new_token_ratio_params(conservativeness: float = 1.0) -> tuple[float, float, float]:
    """``(initial, minimum, decay per decode step)`` of SGLang's new_token_ratio."""
    init = min(INIT_NEW_TOKEN_RATIO * conservativeness, 1.0)
    low = min(init * MIN_NEW_TOKEN_RATIO_FACTOR, 1.0)
    return init, low, (init - low) / NEW_TOKEN_RATIO_DECAY_STEPS


def decode_reserve_tokens(num_draft_tokens: int, num_steps: int | None = None,
                          topk: int = 1) -> int:
    """Tokens per running request that ``check_decode_mem`` wants free before a decode:
    ``2 * max(num_steps * topk, num_draft_tokens)`` with speculative decoding
    (``mem_cache/allocation_sizing.py::get_alloc_reserve_per_decode``), one token without."""
    if num_draft_tokens <= 1:
        return 1
    steps = num_draft_tokens - 1 if num_steps is None else num_steps
    return 2 * max(steps * topk, num_draft_tokens)


def default_max_new_tokens(prompt_tokens, context_len: int, capacity_tokens: int, page: int):
    """``max_new_tokens`` of a request whose client set none (the OpenAI chat API's default):
    ``min(max_req_len - prompt - 1, capacity - ceil_page(prompt) - page - 1)``, at least 0, with
    ``max_req_len = min(context_len - 1, capacity - 1)`` (``scheduler.py::
    init_req_max_new_tokens``, ``tp_worker.py``).  ``context_len`` 0: unknown (no bound)."""
    import numpy as np

    p = np.asarray(prompt_tokens, dtype=np.int64)
    max_req = capacity_tokens - 1 if context_len <= 0 else min(context_len - 1, capacity_tokens - 1)
    ceil_p = (p + page - 1) // page * page
    return np.maximum(0, np.minimum(max_req - p - 1, capacity_tokens - ceil_p - page - 1))


def resolve_engine(e: "EngineConfig", *, gpu_memory_bytes: int | None = None,
                   tp: int = 1) -> "EngineConfig":
    """The engine configuration with every "as SGLang does" default (0) made concrete."""
    chunk, max_bs = gpu_memory_defaults(gpu_memory_bytes or FALLBACK_GPU_MEMORY_BYTES, tp)
    changes: dict = {}
    if not e.chunked_prefill_size:
        changes["chunked_prefill_size"] = chunk
    if not e.cuda_graph_max_bs:
        changes["cuda_graph_max_bs"] = max_bs
    if not e.max_running and e.speculative:
        changes["max_running"] = e.running_cap
    return replace(e, **changes) if changes else e
