"""The real AITER graph-replay executor (GPU) and SGLang's verify metadata.

Submodules (each imports torch only when used):

- :mod:`backends.aiter.metadata`: target-verify metadata exactly as SGLang's AITER backend builds
  it (pure torch, runs on the CPU); what ``specsched verify-metadata`` prints.
- :mod:`backends.aiter.bridge`: AITER's kernels on ROCm (``import aiter``) or, elsewhere, its
  Triton kernels without the package's ROCm-only start-up.
- :mod:`backends.aiter.runner` / :mod:`backends.aiter.model` / :mod:`backends.aiter.kvpool`: the
  model-shaped forward pass, the paged KV pool, the CUDA-graph pool and timing.
- :mod:`backends.aiter.executor`: :func:`make_executor`, the live executor of
  ``backends/protocol.py``.
- :mod:`backends.aiter.uniformity`: :func:`uniformity_check`.
- :mod:`backends.aiter.profiling`: the ``specsched profile`` sweep.
"""

from __future__ import annotations

from typing import Any

__all__ = ["make_executor", "uniformity_check"]


def make_executor(model: Any, **kwargs: Any):
    """The live AITER executor (see :func:`backends.aiter.executor.make_executor`)."""
    from backends.aiter.executor import make_executor as _make

    return _make(model, **kwargs)


def uniformity_check(model: Any = "llama-3.1-8b", **kwargs: Any) -> dict:
    """Unsafe-derived vs exact metadata on the GPU (see :func:`backends.aiter.uniformity.uniformity_check`)."""
    from backends.aiter.uniformity import uniformity_check as _check

    return _check(model, **kwargs)
