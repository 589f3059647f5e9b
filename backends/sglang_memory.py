"""SGLang's memory defaults: chunk size, graph batch limit and ``mem_fraction_static`` by GPU.

The rules of ``python/sglang/srt/arg_groups/memory_hook.py::handle_gpu_memory_settings`` (sglang
0.5.23), in the order SGLang's argument pipeline runs them (``arg_groups/pipeline.py``):

1. By the GPU's memory (MiB, SGLang's ``get_device_memory_capacity``): ``chunked_prefill_size``
   and the decode graphs' ``max_bs`` (:func:`gpu_memory_defaults`). An explicitly set
   ``--max-running-requests`` lowers that ``max_bs`` to it; the speculative hook's default of 48
   running requests does not, because it runs after this one.
2. ``reserved`` MiB: ``512 + 1.5 x max(chunked_prefill_size, 2048) + tp x pp / 8 x 1024``, plus
   the graph reserve (``reserve_for_graph_mb``): ``2 x max_bs`` for the decode graphs, and for the
   prefill graphs, which SGLang captures by default on NVIDIA GPUs only
   (``cuda_graph_config.py::default_prefill_backend``), 8 MiB per captured token count
   (:func:`prefill_graph_sizes`) or 1.5 GiB with an MLA model; at least 10 GiB on a GPU of more
   than 60 GiB.
3. ``mem_fraction_static = round((memory - reserved) / memory, 3)``.
4. With the AITER attention backend and a model context over 8,192 tokens it is multiplied by
   0.85 (``arg_groups/attention_hook.py``), to leave AITER its non-static workspace.

Not modelled: post-capture KV sizing (off unless ``SGLANG_ENABLE_POST_CAPTURE_KV_SIZING``),
data-parallel attention, DeepEP buffers, multimodal models. No torch; the engine imports it.
"""

from __future__ import annotations

__all__ = ["gpu_memory_defaults", "prefill_graph_sizes", "sglang_mem_fraction_static",
           "AITER_FACTOR", "AITER_CONTEXT"]

#: the AITER backend's factor on ``mem_fraction_static`` for a model context over
#: :data:`AITER_CONTEXT` tokens (``arg_groups/attention_hook.py``)
AITER_FACTOR = 0.85
AITER_CONTEXT = 8192


def gpu_memory_defaults(memory_bytes: int, tp: int = 1) -> tuple[int, int]:
    """``(chunked_prefill_size, cuda_graph_max_bs)`` for a GPU of this memory
    (``arg_groups/memory_hook.py::handle_gpu_memory_settings``, thresholds in GiB)."""
    gib = memory_bytes / (1 << 30)
    big_tp = tp >= 4
    if gib < 20:
        return 2048, 8
    if gib < 35:
        return 4096, 160 if big_tp else 48
    if gib < 60:
        return 4096, 160 if big_tp else 32
    if gib < 160:
        return 8192, 512 if big_tp else 256
    return 16384, 512


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """The token counts SGLang captures prefill graphs at, up to ``max_bs``
    (``arg_groups/cuda_graph_hook.py::generate_prefill_cuda_graph_batch_sizes``): 4-32 step 4,
    48-256 step 16, 288-512 step 32, 576-1,024 step 64, 1,280-4,096 step 256, then step 512."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256))
             + list(range(4608, max_bs + 1, 512)))
    return [s for s in sizes if s <= max_bs]


def sglang_mem_fraction_static(gpu_memory_bytes: int, *, tp: int = 1, pp: int = 1,
                               chunked_prefill_size: int | None = None,
                               cuda_graph_max_bs: int | None = None,
                               max_running_requests: int | None = None,
                               mla: bool = False, nvidia: bool = True,
                               attention_backend: str = "aiter", context_len: int = 0) -> float:
    """SGLang's default ``--mem-fraction-static`` (module docstring). ``chunked_prefill_size``
    and ``cuda_graph_max_bs``: the values set explicitly (None: SGLang's for this memory);
    ``max_running_requests``: an explicitly set ``--max-running-requests`` (None when unset);
    ``nvidia``: the GPU is NVIDIA's (prefill graphs on by default); ``context_len``: the
    model's (0 = unknown: the AITER factor is not applied)."""
    mem = gpu_memory_bytes / (1 << 20)
    chunk, max_bs = gpu_memory_defaults(gpu_memory_bytes, tp)
    chunk = chunked_prefill_size or chunk
    if cuda_graph_max_bs:
        max_bs = cuda_graph_max_bs
    elif max_running_requests and max_running_requests < max_bs:
        max_bs = max_running_requests
    reserved = 512 + max(chunk, 2048) * 1.5 + tp * pp / 8 * 1024 + 2 * max_bs
    if nvidia:  # prefill graphs: up to the chunk's token count
        reserved += 1.5 * 1024 if mla else 8 * len(prefill_graph_sizes(chunk))
    if mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    frac = round((mem - reserved) / mem, 3)
    if attention_backend == "aiter" and context_len > AITER_CONTEXT:
        frac *= AITER_FACTOR
    return frac
