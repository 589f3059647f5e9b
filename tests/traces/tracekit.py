"""Helpers for the trace tests (imported as a plain module: tests/ is not a package)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pathlib import Path

SAMPLES = Path(__file__).resolve().parents[2] / "traces" / "samples"


def make_table(n: int = 5, *, lists: bool = True, seed: int = 0, **overrides) -> pa.Table:
    """A valid trace table of ``n`` requests: k=2 drafts, per-step lists that fit the outputs."""
    rng = np.random.default_rng(seed)
    arrival = np.sort(rng.uniform(0, 10, n))
    prompt = rng.integers(1, 100, n).astype(np.int32)
    drafts, accepts, outputs = [], [], []
    for _ in range(n):
        steps = int(rng.integers(0, 6))
        d = [2] * steps
        a = [int(x) for x in rng.integers(0, 3, steps)]
        committed = 1 + sum(x + 1 for x in a)
        # output somewhere in (committed - last step, committed]
        lo = committed - (a[-1] + 1) + 1 if steps else 1
        outputs.append(int(rng.integers(lo, committed + 1)))
        drafts.append(d)
        accepts.append(a)
    cols = {
        "request_id": pa.array([f"r{i}" for i in range(n)], pa.string()),
        "arrival_s": pa.array(arrival, pa.float64()),
        "prompt_tokens": pa.array(prompt, pa.int32()),
        "output_tokens": pa.array(outputs, pa.int32()),
    }
    if lists:
        cols["draft_tokens"] = pa.array(drafts, pa.list_(pa.int16()))
        cols["accepted_tokens"] = pa.array(accepts, pa.list_(pa.int16()))
    cols.update(overrides)
    return pa.table(cols)


def write_raw(table: pa.Table, path: Path, metadata: dict | None = None) -> Path:
    """Write a table as parquet with no specsched checks (to build bad files)."""
    if metadata:
        table = table.replace_schema_metadata({k.encode(): v.encode() for k, v in metadata.items()})
    pq.write_table(table, path)
    return path
