"""Helpers for the analysis tests that run the real CLI: the shipped sample trace and its head."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "traces" / "samples" / "azure_conv_eagle_2k.parquet"


def sample_head(path: Path, n: int) -> Path:
    """Write the sample's first ``n`` requests, with its specsched metadata, to ``path``."""
    from traces import write_trace

    pf = pq.ParquetFile(SAMPLE)
    meta = {k.decode(): json.loads(v) for k, v in pf.metadata.metadata.items()
            if k.decode().startswith("specsched.") and k != b"specsched.format_version"}
    write_trace(pf.read().slice(0, n), path, metadata=meta)
    return path
