"""The paged KV cache the executor's attention reads: logical pages mapped onto a physical pool.

A simulated batch can hold more KV than a GPU (256 requests x 32k tokens of Llama-3.1-8B is
1.1 TB), but attention time depends on the bytes it reads, not on their values.  So every layer
reads real bytes from real HBM pages, and the pages are laid out so that no layer can find
another layer's (or another request's) data in the 60 MB L2:

* One physical pool of ``pages`` pages per K and V (``[pages, page_size, kv_heads, head_dim]``,
  random values, never zeros) is shared by all layers.  Layer ``l`` sees the pool through a view
  that starts ``l * shift`` pages in; its page table entries index ``[0, view_pages)``.  So
  two layers read disjoint physical pages unless a batch uses more than ``shift`` pages per layer,
  and then the overlap was last read at least ``shift`` pages (hundreds of MB, far more than L2)
  earlier.
* Request ``i`` of a batch owns the consecutive logical pages ``[start_i, start_i + blocks_i)``,
  requests one after another, wrapping around inside the view; ``start_i + max_blocks <=
  view_pages`` so every page-table entry, needed or not, indexes real memory.

The pool is sized from a byte budget (default: what fits next to the weights).  Contexts whose
pages exceed one view wrap, so batches larger than the pool still read the right number of
bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["KVPool", "plan_pool"]


@dataclass(frozen=True)
class PoolPlan:
    pages: int          # physical pages per K and per V tensor
    view_pages: int     # pages each layer's view spans
    shift: int          # pages between consecutive layers' views
    views: int          # layers (+ draft layers) sharing the pool
    page_bytes: int     # bytes of one K page (same for V)

    @property
    def bytes(self) -> int:
        return 2 * self.pages * self.page_bytes


def plan_pool(budget_bytes: int, *, views: int, page_size: int, kv_heads: int, head_dim: int,
              dtype_bytes: int, max_blocks: int, want_view_pages: int) -> PoolPlan:
    """Choose pool and view sizes for a byte budget (K and V together)."""
    page_bytes = page_size * kv_heads * head_dim * dtype_bytes
    pages = max(int(budget_bytes // (2 * page_bytes)), 2 * max_blocks)
    view_pages = min(max(int(want_view_pages), 2 * max_blocks), pages)
    views = max(1, int(views))
    shift = (pages - view_pages) // (views - 1) if views > 1 else 0
    return PoolPlan(pages=pages, view_pages=view_pages, shift=shift, views=views,
                    page_bytes=page_bytes)


class KVPool:
    """Physical K and V pages plus per-layer views (see the module docstring)."""

    def __init__(self, plan: PoolPlan, *, page_size: int, kv_heads: int, head_dim: int,
                 max_blocks: int, device: Any, dtype: Any, generator: Any = None) -> None:
        import torch

        self.plan = plan
        self.page_size = int(page_size)
        self.max_blocks = int(max_blocks)
        shape = (plan.pages, page_size, kv_heads, head_dim)
        self.k = torch.empty(shape, device=device, dtype=dtype)
        self.v = torch.empty(shape, device=device, dtype=dtype)
        for t in (self.k, self.v):  # random values: never time zeros
            t.normal_(0.0, 1.0, generator=generator)
        self._views = [(self.k[o:o + plan.view_pages], self.v[o:o + plan.view_pages])
                       for o in (i * plan.shift for i in range(plan.views))]

    def view(self, layer: int):
        """(K, V) caches of layer ``layer``: ``[view_pages, page_size, kv_heads, head_dim]``."""
        return self._views[layer % len(self._views)]

    @property
    def span(self) -> int:
        """Largest first page a request may start at (``start + max_blocks <= view_pages``)."""
        return self.plan.view_pages - self.max_blocks + 1

    def starts(self, blocks: np.ndarray) -> np.ndarray:
        """First logical page of each request: requests one after another, wrapping in the view."""
        return layout_starts(blocks, self.span)


def layout_starts(blocks: np.ndarray, span: int) -> np.ndarray:
    """``start_i = (sum of blocks before i) mod span`` as int64."""
    b = np.asarray(blocks, dtype=np.int64)
    out = np.empty(len(b), dtype=np.int64)
    if len(b):
        out[0] = 0
        np.cumsum(b[:-1], out=out[1:])
    return out % int(span)
