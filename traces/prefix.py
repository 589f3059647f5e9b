"""Prefix-block ids of prompts: the rules of the ``prefix_hashes`` column and the ideal hit rate.

A trace may say which leading parts of its prompts are shared: ``prefix_hashes`` holds, per
request, one integer per block of ``B`` prompt tokens (``B`` is the file metadata key
``specsched.prefix_block_tokens``).  Block ``j`` covers prompt tokens ``[j*B, min((j+1)*B, P))``
of a prompt of ``P`` tokens.  Two requests with the same ids at positions ``0..j`` have the same
content up to the end of block ``j`` (Mooncake's ``hash_ids`` are chained this way: an id names
its block *and* everything before it).  A list holds ``ceil(P / B)`` ids, or fewer when only the
leading blocks are known (an empty list: nothing is known, the prompt shares nothing).

The prefix cache works page-granular at ``B`` tokens, the way SGLang's radix cache works at its
page size (``RadixCache.match_prefix`` drops the unaligned tail of a key):

* a request can *reuse* its first ``matchable_blocks = min(n, (P - 1) // B)`` blocks: the match
  stops one token short of the prompt because the last prompt token must be computed to produce
  the first output token (SGLang ``Req.adjust_max_prefix_ids``: at most ``input_len - 1``);
* a request *leaves in the cache* its first ``cacheable_blocks = min(n, P // B)`` blocks: the
  full blocks of its prompt (SGLang caches the page-aligned part of a sequence).  Output tokens
  have no ids in a trace, so they are never cached (SGLang caches them too: a next turn whose
  prompt repeats a previous answer reuses it there, not here).

The *ideal hit rate* of a trace is what an infinite cache that inserts every request as it
arrives would serve: request ``i`` (in arrival order) hits its longest run of leading blocks
``ids[0..h)``, ``h <= matchable_blocks``, that is also a leading run of the cacheable blocks of an
earlier request; its hit tokens are ``h * B``.  The rate is the sum of hit tokens over the sum of
``prompt_tokens`` (all requests, with or without ids).  Because the comparison is along the
whole path of ids, ids that are per-block content hashes (not chained) work the same way.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from traces.schema import META_PREFIX_BLOCK

__all__ = ["max_blocks", "matchable_blocks", "cacheable_blocks", "check_block_tokens",
           "check_prefix_column", "ideal_hits", "prefix_stats", "PREFIX_TYPE"]

PREFIX_TYPE = pa.list_(pa.int64())
_INT64_MAX = np.iinfo(np.int64).max


def max_blocks(prompt_tokens, block: int):
    """``ceil(prompt / block)``: the most ids a prompt of that length can have."""
    return (np.asarray(prompt_tokens, np.int64) + block - 1) // block


def matchable_blocks(prompt_tokens, n_ids, block: int):
    """Blocks a request may reuse from the cache: ``min(n_ids, (prompt - 1) // block)``."""
    return np.minimum(np.asarray(n_ids, np.int64),
                      (np.asarray(prompt_tokens, np.int64) - 1) // block)


def cacheable_blocks(prompt_tokens, n_ids, block: int):
    """Blocks a request leaves in the cache: ``min(n_ids, prompt // block)`` (its full blocks)."""
    return np.minimum(np.asarray(n_ids, np.int64), np.asarray(prompt_tokens, np.int64) // block)


def check_block_tokens(metadata: dict, has_column: bool) -> str | None:
    """The problem with ``specsched.prefix_block_tokens`` in ``metadata``, or None."""
    value = metadata.get(META_PREFIX_BLOCK)
    if value is None:
        if has_column:
            return (f"the file has prefix_hashes but no metadata {META_PREFIX_BLOCK} "
                    "(tokens per block, e.g. 512 for Mooncake traces)")
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"metadata {META_PREFIX_BLOCK} must be a whole number >= 1, found {value!r}"
    return None


def _nullmask(arr) -> np.ndarray:
    if arr.null_count == 0:
        return np.zeros(len(arr), bool)
    return np.asarray(arr.is_null().to_numpy(zero_copy_only=False))


def check_prefix_column(col: pa.Array, prompt: pa.Array | None, block: int | None,
                        add_rows: Callable[[np.ndarray, str, Callable[[int], str]], None]) -> pa.Array:
    """Check one batch of ``prefix_hashes``; return it as ``list<int64>``.

    ``add_rows(mask, column, message)`` records one problem per True row of ``mask``.  Refused:
    a null list (an empty list says "no block known"), a null id, an id beyond int64, and more
    ids than ``ceil(prompt_tokens / block)`` (when ``prompt`` and ``block`` are known).
    """
    n = len(col)
    if pa.types.is_null(col.type):
        add_rows(np.ones(n, bool), "prefix_hashes",
                 lambda i: "null list: the column holds no lists at all")
        return pa.array([[]] * n, PREFIX_TYPE)
    if pa.types.is_large_list(col.type):
        col = col.cast(pa.list_(col.type.value_type))
    null = _nullmask(col)
    add_rows(null, "prefix_hashes",
             lambda i: "null list: every row needs a list when the column is present (an empty "
                       "list means no block of the prompt is known)")
    off = np.asarray(col.offsets.to_numpy(zero_copy_only=False), np.int64)
    base = int(off[0])
    off = off - base
    values = col.values.slice(base, int(off[-1]))
    lens = np.diff(off)

    def rows_of(bad_elem: np.ndarray) -> np.ndarray:
        mask = np.zeros(n, bool)
        pos = np.flatnonzero(bad_elem)
        if pos.size:
            mask[np.unique(np.searchsorted(off, pos, side="right") - 1)] = True
        return mask

    if values.null_count:
        add_rows(rows_of(_nullmask(values)), "prefix_hashes", lambda i: "null id inside the list")
    if pa.types.is_uint64(values.type) and len(values):
        big = np.asarray(pc.fill_null(pc.greater(values, pa.scalar(_INT64_MAX, pa.uint64())),
                                      False).to_numpy(zero_copy_only=False), bool)
        add_rows(rows_of(big), "prefix_hashes", lambda i: "an id does not fit int64")
        values = pc.if_else(pa.array(big), pa.scalar(0, pa.uint64()), values)
    if prompt is not None and block is not None:
        p = np.asarray(prompt.to_numpy(zero_copy_only=False), np.float64)
        p = np.where(np.isfinite(p), p, 1).astype(np.int64)
        most = max_blocks(np.maximum(p, 1), block)
        over = ~null & (lens > most)
        add_rows(over, "prefix_hashes",
                 lambda i: f"{lens[i]} block ids for prompt_tokens {p[i]}: at most "
                           f"ceil({p[i]} / {block}) = {most[i]} with {block}-token blocks")
    vals = values.cast(pa.int64(), safe=False)
    mask = pa.array(null) if null.any() else None
    return pa.ListArray.from_arrays(pa.array(off.astype(np.int32)), vals, mask=mask)


def ideal_hits(prompt_tokens: np.ndarray, offsets: np.ndarray, ids: np.ndarray,
               block: int) -> np.ndarray:
    """Hit blocks per request (int64 [n]) with an infinite cache, requests in the given order.

    Request ``i`` hits the longest run ``ids_i[0..h)`` with ``h <= matchable_blocks`` that is a
    leading run of an earlier request's cacheable blocks; then its own cacheable blocks are
    added.  The trie is keyed by (parent node, id), so a hit needs the whole path to match.
    """
    prompt = np.asarray(prompt_tokens, np.int64)
    offsets = np.asarray(offsets, np.int64)
    n_ids = np.diff(offsets)
    match = matchable_blocks(prompt, n_ids, block)
    cache = cacheable_blocks(prompt, n_ids, block)
    children: dict[tuple[int, int], int] = {}
    hits = np.zeros(prompt.size, np.int64)
    idl = np.asarray(ids, np.int64).tolist()
    for i in range(prompt.size):
        start = int(offsets[i])
        node, h, m = 0, 0, int(match[i])
        while h < m:
            nxt = children.get((node, idl[start + h]))
            if nxt is None:
                break
            node, h = nxt, h + 1
        hits[i] = h
        node = 0
        for j in range(int(cache[i])):
            key = (node, idl[start + j])
            nxt = children.get(key)
            if nxt is None:
                nxt = len(children) + 1
                children[key] = nxt
            node = nxt
    return hits


def prefix_stats(prompt_tokens: np.ndarray, offsets: np.ndarray, ids: np.ndarray,
                 block: int) -> dict[str, Any]:
    """What ``trace inspect`` reports about a trace's prefix ids (arrival order assumed)."""
    prompt = np.asarray(prompt_tokens, np.int64)
    hits = ideal_hits(prompt, offsets, ids, block)
    n_ids = np.diff(np.asarray(offsets, np.int64))
    total = int(prompt.sum())
    hit_tokens = int(hits.sum()) * block
    return {
        "prefix_block_tokens": int(block),
        "prefix_ids": int(n_ids.sum()),
        "prefix_distinct_ids": int(np.unique(np.asarray(ids, np.int64)).size),
        "prefix_requests_without_ids": int(np.count_nonzero(n_ids == 0)),
        "prefix_ideal_hit_tokens": hit_tokens,
        "prefix_ideal_hit_rate": round(hit_tokens / total, 6) if total else None,
        "prefix_requests_with_hit": (round(float(np.count_nonzero(hits) / prompt.size), 6)
                                     if prompt.size else None),
    }
