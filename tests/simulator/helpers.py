"""Small traces and executors for engine tests (no files, no GPU)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from backends.latency_table import Grid, LatencyTable, TableExecutor


@dataclass(frozen=True)
class ToyTrace:
    """Duck-types traces.TraceArrays for the engine."""

    request_id: pa.Array
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    step_offsets: np.ndarray
    draft_tokens: np.ndarray
    accepted_tokens: np.ndarray
    acceptance: dict = field(default_factory=lambda: {"kind": "test",
                                                      "position_accept_prob": [0.7] * 8})
    category: pa.Array | None = None
    tenant: pa.Array | None = None
    ttft_slo_s: np.ndarray | None = None
    tpot_slo_s: np.ndarray | None = None
    path: str = "<toy>"
    notes: tuple = ()
    prefix_offsets: np.ndarray | None = None
    prefix_ids: np.ndarray | None = None
    prefix_block_tokens: int | None = None


def with_prefix(trace: ToyTrace, ids: list[list[int]], block: int) -> ToyTrace:
    """``trace`` with prefix block ids (one list per request) of ``block``-token blocks."""
    off = np.zeros(len(ids) + 1, np.int64)
    off[1:] = np.cumsum([len(x) for x in ids])
    flat = np.array([v for x in ids for v in x], np.int64)
    return replace(trace, prefix_offsets=off, prefix_ids=flat, prefix_block_tokens=block)


def make_trace(arrival, prompt, output, steps):
    """steps[i] = list of (drafted, accepted) per verify step of request i.  The lists must
    commit at least output-1 tokens after the prefill token."""
    off = np.zeros(len(steps) + 1, np.int64)
    off[1:] = np.cumsum([len(s) for s in steps])
    d = np.array([x for s in steps for x, _ in s], np.int16)
    a = np.array([y for s in steps for _, y in s], np.int16)
    return ToyTrace(request_id=pa.array([f"r{i}" for i in range(len(steps))]),
                    arrival_s=np.asarray(arrival, float),
                    prompt_tokens=np.asarray(prompt, np.int32),
                    output_tokens=np.asarray(output, np.int32), step_offsets=off,
                    draft_tokens=d, accepted_tokens=a)


def random_trace(rng: np.random.Generator, n: int, *, max_draft=6, rate=50.0, prompt_max=400,
                 output_max=60, uniform_width: int | None = None):
    arrival = np.cumsum(rng.exponential(1 / rate, n))
    prompt = rng.integers(1, prompt_max + 1, n)
    output = rng.integers(1, output_max + 1, n)
    steps = []
    for i in range(n):
        s, got = [], 1
        while got < output[i]:
            d = uniform_width - 1 if uniform_width else int(rng.integers(0, max_draft + 1))
            a = int(rng.integers(0, d + 1))
            s.append((d, a))
            got += a + 1
        steps.append(s)
    return make_trace(arrival, prompt, output, steps)


def linear_table(*, base=2e-3, per_token=2e-5, per_kv=1e-8, draft_base=3e-4, eager=1e-4,
                 prefill_base=5e-3, prefill_tok=5e-5) -> LatencyTable:
    """A simple, strictly increasing table: enough to exercise the engine."""
    bs = np.array([1, 2, 4, 8, 16, 32, 64, 128, 256, 512], float)
    w = np.arange(1, 17, dtype=float)
    kv = np.array([1, 256, 1024, 4096, 16384, 65536], float)
    B, W, K = np.meshgrid(bs, w, kv, indexing="ij")
    vg = base + per_token * B * W + per_kv * B * K * W
    dg = draft_base + per_token * 0.1 * bs[:, None] + per_kv * 0.1 * bs[:, None] * kv[None, :]
    tok = np.array([1, 64, 512, 2048, 8192, 16384, 65536], float)
    pre = np.array([0, 1024, 8192, 65536], float)
    pf = prefill_base + prefill_tok * tok[:, None] + 1e-9 * tok[:, None] * pre[None, :]
    return LatencyTable(
        verify_graph=Grid.build((bs, w, kv), vg), verify_eager=Grid.build((bs, w, kv), vg + eager),
        draft_graph=Grid.build((bs, kv), dg), draft_eager=Grid.build((bs, kv), dg + eager),
        prefill=Grid.build((tok, pre), pf), source={"kind": "test"})


def table_executor(**kw) -> TableExecutor:
    return TableExecutor("test-table", linear_table(**kw), {"caveats": []})


class LiveLike:
    """A live-style executor (no latency table) computing the same numbers per batch."""

    name = "live-like"

    def __init__(self, inner: TableExecutor):
        self.inner = inner
        self.calls = 0

    def latency_table(self):
        return None

    def set_kv_lookup(self, kv_lookup):
        self.inner.set_kv_lookup(kv_lookup)

    def set_bs_interp(self, bs_interp):
        self.inner.set_bs_interp(bs_interp)

    def prefill(self, batch):
        self.calls += 1
        return self.inner.prefill(batch)

    def draft(self, batch):
        self.calls += 1
        return self.inner.draft(batch)

    def verify(self, batch):
        self.calls += 1
        return self.inner.verify(batch)

    def draft_extend(self, batch):
        self.calls += 1
        return self.inner.draft_extend(batch)

    def describe(self):
        return {"backend": self.name}


def engine_prefills(model: str, trace_path: str, requests: int):
    """The prefill steps of an engine run of a shipped profile over the first ``requests`` of a
    sample trace, with the table's own lookup of each: (table, tokens, lookup prefix, the
    engine's latencies, the table's)."""
    from backends.profile import ProfileExecutor
    from backends.shipped import default_profile
    from simulator import SimConfig, run
    from traces.io import read_trace_arrays

    ex = ProfileExecutor(default_profile(model, "H200"))
    table = ex.latency_table()
    trace = read_trace_arrays(trace_path).head(requests)
    s = run(trace, SimConfig.load(None, {}), ex, kv_capacity_tokens=2_000_000).steps.to_pandas()
    pf = s[s.kind == "prefill"]
    tok, pre = pf.tokens.to_numpy(np.float64), pf.lookup_kv.to_numpy(np.float64)
    want = np.array([table.prefill_s(t, k)[0] for t, k in zip(tok, pre)])
    return table, tok, pre, pf.latency_s.to_numpy(), want
