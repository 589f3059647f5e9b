"""The trace format: one parquet row per request (see ``docs/traces.md``).

``TRACE_SCHEMA`` is the canonical pyarrow schema.  A trace file holds the four required columns
and any of the optional ones, in this order; it never holds columns the schema does not name.
File-level metadata keys are ``specsched.*`` and each value is a JSON string.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import pyarrow as pa

__all__ = [
    "FORMAT_VERSION",
    "TRACE_SCHEMA",
    "REQUIRED_COLUMNS",
    "OPTIONAL_COLUMNS",
    "LIST_COLUMNS",
    "META_FORMAT_VERSION",
    "META_SOURCE",
    "META_ACCEPTANCE",
    "META_NOTES",
    "META_PREFIX_BLOCK",
    "POSITION_PROB_MIN_LEN",
    "encode_metadata",
    "decode_metadata",
    "schema_for",
]

FORMAT_VERSION = "1"

META_FORMAT_VERSION = "specsched.format_version"
META_SOURCE = "specsched.source"
META_ACCEPTANCE = "specsched.acceptance"
META_NOTES = "specsched.notes"
#: tokens per ``prefix_hashes`` block (an int >= 1); required when the file has the column
META_PREFIX_BLOCK = "specsched.prefix_block_tokens"

#: ``position_accept_prob`` always has at least this many entries (positions 1..8).
POSITION_PROB_MIN_LEN = 8

TRACE_SCHEMA = pa.schema([
    pa.field("request_id", pa.string(), nullable=False),
    pa.field("arrival_s", pa.float64(), nullable=False),
    pa.field("prompt_tokens", pa.int32(), nullable=False),
    pa.field("output_tokens", pa.int32(), nullable=False),
    pa.field("draft_tokens", pa.list_(pa.int16()), nullable=True),
    pa.field("accepted_tokens", pa.list_(pa.int16()), nullable=True),
    pa.field("category", pa.string(), nullable=True),
    pa.field("tenant", pa.string(), nullable=True),
    pa.field("ttft_slo_s", pa.float64(), nullable=True),
    pa.field("tpot_slo_s", pa.float64(), nullable=True),
    pa.field("prefix_hashes", pa.list_(pa.int64()), nullable=True),
])

REQUIRED_COLUMNS = ("request_id", "arrival_s", "prompt_tokens", "output_tokens")
OPTIONAL_COLUMNS = tuple(n for n in TRACE_SCHEMA.names if n not in REQUIRED_COLUMNS)
LIST_COLUMNS = ("draft_tokens", "accepted_tokens")


def schema_for(columns: list[str] | tuple[str, ...]) -> pa.Schema:
    """The canonical schema restricted to ``columns`` (kept in canonical order)."""
    wanted = set(columns)
    return pa.schema([f for f in TRACE_SCHEMA if f.name in wanted])


def encode_metadata(metadata: Mapping[str, Any]) -> dict[bytes, bytes]:
    """JSON-encode metadata values under ``specsched.`` keys, deterministically (sorted keys).

    Keys without the ``specsched.`` prefix get it.  The format version is always set.
    """
    out: dict[str, str] = {}
    for key, value in metadata.items():
        full = key if key.startswith("specsched.") else f"specsched.{key}"
        out[full] = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    out[META_FORMAT_VERSION] = json.dumps(FORMAT_VERSION)
    return {k.encode(): out[k].encode() for k in sorted(out)}


def decode_metadata(raw: Mapping[bytes, bytes] | None) -> dict[str, Any]:
    """The ``specsched.*`` keys of a parquet key-value metadata map, JSON-decoded.

    A value that is not valid JSON is kept as the raw string (files written by other tools).
    """
    out: dict[str, Any] = {}
    for key, value in (raw or {}).items():
        k = key.decode("utf-8", "replace")
        if not k.startswith("specsched."):
            continue
        text = value.decode("utf-8", "replace")
        try:
            out[k] = json.loads(text)
        except ValueError:
            out[k] = text
    return out
