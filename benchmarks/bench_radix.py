"""Benchmark: the radix prefix cache replaying a trace's prefix blocks at arrival.

Each request, in arrival order: ``match`` its matchable blocks, ``lock``/``unlock`` the node,
``evict`` what the cache needs beyond its capacity, ``insert`` its cacheable blocks (no
engine: every request is inserted the moment it arrives, so this is the hit rate of a cache of
that size with no concurrency).  Prints, per capacity, the compiled replay's requests per
wall-second (target: far above the engine's 10,000) and the hit rate against the ideal.

    python benchmarks/bench_radix.py [--trace PARQUET] [--capacity BLOCKS ...]

Default trace: traces/samples/mooncake_conv_1k.parquet.  The full Mooncake conversation trace
converted with ``specsched trace convert --from mooncake`` works the same way.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(ROOT / "traces" / "samples" / "mooncake_conv_1k.parquet"))
    ap.add_argument("--capacity", type=int, nargs="*", default=[0, 1500, 300],
                    help="cache sizes in blocks (0: larger than the trace)")
    args = ap.parse_args()

    from backends.jit import jit_status, njit
    from simulator import radix as X
    from traces import read_trace_arrays
    from traces.prefix import cacheable_blocks, ideal_hits, matchable_blocks

    @njit
    def replay(N, T, K, H, S, Q, off, flat, m, k, t, cap, hits):
        for i in range(m.size):
            a = flat[off[i]:off[i + 1]]
            h, node = X.match(N, T, K, H, S, Q, a, m[i], t[i])
            hits[i] = h
            X.lock(N, T, K, H, S, Q, node)
            X.unlock(N, T, K, H, S, Q, node)
            room = cap - X.cached_pages(S)
            need = k[i] - h
            if need > room:
                X.evict(N, T, K, H, S, Q, need - room)
            X.insert(N, T, K, H, S, Q, a, k[i], t[i])

    ta = read_trace_arrays(args.trace, acceptance="geometric:k=1,alpha=0.5")
    if ta.prefix_ids is None:
        print(f"{args.trace} has no prefix_hashes", file=sys.stderr)
        return 2
    B = ta.prefix_block_tokens
    n_ids = np.diff(ta.prefix_offsets)
    m = matchable_blocks(ta.prompt_tokens, n_ids, B)
    k = cacheable_blocks(ta.prompt_tokens, n_ids, B)
    prompt = int(ta.prompt_tokens.sum())
    ideal = int(ideal_hits(ta.prompt_tokens, ta.prefix_offsets, ta.prefix_ids, B).sum()) * B
    print(f"{args.trace}: {len(ta):,} requests, {ta.prefix_ids.size:,} block ids of {B} tokens; "
          f"{jit_status()}")
    warm = X.new_cache(4)
    replay(*warm, ta.prefix_offsets, ta.prefix_ids, m[:1] * 0, k[:1] * 0, ta.arrival_s, 4,
           np.zeros(1, np.int64))
    for cap in args.capacity:
        cap = int(k.sum()) if cap <= 0 else cap
        c = X.new_cache(cap)
        hits = np.zeros(len(ta), np.int64)
        t0 = time.perf_counter()
        replay(*c, ta.prefix_offsets, ta.prefix_ids, m, k, ta.arrival_s, cap, hits)
        dt = time.perf_counter() - t0
        problems = X.check_state(c)
        print(f"capacity {cap:,} blocks ({cap * B:,} tokens): {dt * 1e3:.1f} ms, "
              f"{len(ta) / dt:,.0f} requests/s; hit rate {hits.sum() * B / prompt:.4f} "
              f"(ideal {ideal / prompt:.4f}); evicted {int(c[4][X.S_EVICTED]):,} blocks"
              + (f"; BROKEN: {problems[:3]}" if problems else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
