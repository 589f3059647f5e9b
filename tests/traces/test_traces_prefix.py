"""Prefix block ids (``prefix_hashes``): validation, reading, Mooncake's hash_ids, sessions, and
the ideal hit rate, on cases worked out by hand."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from traces import TraceValidationError, iter_trace_batches, read_trace_arrays, validate_trace
from traces.convert import convert, read_source
from traces.inspect import inspect_trace
from traces.io import write_trace
from traces.prefix import cacheable_blocks, ideal_hits, matchable_blocks, prefix_stats
from traces.synth import synth

from tracekit import SAMPLES, write_raw

BLOCK_META = {"specsched.prefix_block_tokens": "4"}


def table(prompts, ids, id_type=pa.int64(), arrivals=None) -> pa.Table:
    n = len(prompts)
    return pa.table({
        "request_id": pa.array([f"r{i}" for i in range(n)]),
        "arrival_s": pa.array(arrivals if arrivals is not None else [float(i) for i in range(n)]),
        "prompt_tokens": pa.array(prompts, pa.int32()),
        "output_tokens": pa.array([1] * n, pa.int32()),
        "prefix_hashes": pa.array(ids, pa.list_(id_type)),
    })


def refused(path, *, row, column, text):
    for fn in (validate_trace, read_trace_arrays, inspect_trace):
        with pytest.raises(TraceValidationError) as info:
            fn(path)
        msg = str(info.value)
        assert str(path) in msg
        assert any(p.row == row and p.column == column and text in p.message
                   for p in info.value.problems), msg


# ------------------------------------------------------------------------------- validation


def test_fewer_ids_than_blocks_and_empty_lists_are_valid(tmp_path):
    # block 4: a prompt of 9 tokens has ceil(9/4) = 3 blocks; 3, 1 or 0 known ids are fine
    p = write_raw(table([9, 9, 9], [[1, 2, 3], [1], []], pa.int32()), tmp_path / "ok.parquet",
                  BLOCK_META)
    rep = validate_trace(p)
    assert rep.prefix_ids == 4
    ta = read_trace_arrays(p, acceptance="geometric:k=1,alpha=0.5")
    assert ta.prefix_block_tokens == 4
    assert ta.prefix_offsets.tolist() == [0, 3, 4, 4] and ta.prefix_ids.dtype == np.int64
    assert ta.prefix_ids.tolist() == [1, 2, 3, 1]


def test_more_ids_than_blocks_is_refused(tmp_path):
    # 9 tokens in 4-token blocks: at most 3 ids; row 1 has 4
    p = write_raw(table([9, 9], [[1, 2, 3], [1, 2, 3, 4]]), tmp_path / "many.parquet", BLOCK_META)
    refused(p, row=1, column="prefix_hashes", text="4 block ids for prompt_tokens 9: at most "
                                                   "ceil(9 / 4) = 3")


def test_null_list_and_null_id_are_refused(tmp_path):
    p = write_raw(table([9, 9, 9], [[1], None, [1, None]]), tmp_path / "null.parquet", BLOCK_META)
    refused(p, row=1, column="prefix_hashes", text="null list")
    refused(p, row=2, column="prefix_hashes", text="null id")


def test_block_metadata_is_required_and_checked(tmp_path):
    t = table([9], [[1]])
    refused(write_raw(t, tmp_path / "none.parquet"), row=None, column="prefix_hashes",
            text="no metadata specsched.prefix_block_tokens")
    for bad in ('0', '"512"', '2.5', 'true'):
        p = write_raw(t, tmp_path / "bad.parquet", {"specsched.prefix_block_tokens": bad})
        refused(p, row=None, column="prefix_hashes", text="must be a whole number >= 1")


def test_ids_must_be_integers_that_fit_int64(tmp_path):
    t = table([9], [["a"]], pa.string())
    with pytest.raises(TraceValidationError, match="wrong type"):
        validate_trace(write_raw(t, tmp_path / "s.parquet", BLOCK_META))
    t = table([9, 9], [[1], [2**63]], pa.uint64())
    refused(write_raw(t, tmp_path / "u.parquet", BLOCK_META), row=1, column="prefix_hashes",
            text="does not fit int64")


def test_write_trace_checks_the_column_against_its_metadata(tmp_path):
    t = table([9], [[1, 2, 3, 4]])
    with pytest.raises(TraceValidationError, match="at most"):
        write_trace(t, tmp_path / "w.parquet", metadata={"prefix_block_tokens": 4})
    with pytest.raises(TraceValidationError, match="no metadata"):
        write_trace(t, tmp_path / "w.parquet", metadata={})
    assert not (tmp_path / "w.parquet").exists()


def test_unsorted_arrivals_carry_their_ids_and_head_cuts_them(tmp_path):
    t = table([9, 9, 9], [[1, 2], [3], [4, 5, 6]], arrivals=[2.0, 0.0, 1.0])
    p = tmp_path / "u.parquet"
    write_trace(t, p, metadata={"prefix_block_tokens": 4})
    ta = read_trace_arrays(p, acceptance="geometric:k=1,alpha=0.5")
    assert ta.request_id.to_pylist() == ["r1", "r2", "r0"]
    assert ta.prefix_offsets.tolist() == [0, 1, 4, 6]
    assert ta.prefix_ids.tolist() == [3, 4, 5, 6, 1, 2]
    h = ta.head(2)
    assert h.prefix_offsets.tolist() == [0, 1, 4] and h.prefix_ids.tolist() == [3, 4, 5, 6]
    cols = list(iter_trace_batches(p, columns=["prefix_hashes"]))
    assert cols[0].schema.names == ["prefix_hashes"]


# ------------------------------------------------------------------------------- ideal hit rate


def test_block_counts():
    # 4-token blocks. P = 12: 3 full blocks; the match stops one token short: (12-1)//4 = 2
    assert matchable_blocks([12, 13, 9, 4, 1], [3, 4, 3, 1, 1], 4).tolist() == [2, 3, 2, 0, 0]
    assert cacheable_blocks([12, 13, 9, 4, 1], [3, 4, 3, 1, 1], 4).tolist() == [3, 3, 2, 1, 0]
    assert cacheable_blocks([12], [1], 4).tolist() == [1]          # only known blocks count


def test_ideal_hits_by_hand():
    B = 4
    prompts = [12, 12, 13, 9, 8, 6, 9]
    ids = [[1, 2, 3],        # A: nothing cached yet -> 0; caches [1,2,3]
           [1, 2, 3],        # B: same prompt, but only (12-1)//4 = 2 blocks matchable -> 2
           [1, 2, 3, 4],     # C: min(4, 12//4) = 3 matchable, [1,2,3] cached by A -> 3
           [1, 9, 3],        # D: [1] then 9 differs -> 1 (the 3 after it does not count)
           [5, 2],           # E: id 2 at position 1 is cached, but under 1, not 5 -> 0
           [7, 8],           # F: 6 tokens: block [8] is partial, not cached; caches [7]
           [7, 8, 9]]        # G: matchable 2: [7] hit, [8] never cached -> 1
    off = np.concatenate([[0], np.cumsum([len(x) for x in ids])])
    flat = np.asarray([x for row in ids for x in row])
    hits = ideal_hits(np.asarray(prompts), off, flat, B)
    assert hits.tolist() == [0, 2, 3, 1, 0, 0, 1]
    s = prefix_stats(np.asarray(prompts), off, flat, B)
    assert s["prefix_ideal_hit_tokens"] == 7 * 4
    assert s["prefix_ideal_hit_rate"] == round(28 / sum(prompts), 6)
    assert s["prefix_requests_with_hit"] == round(4 / 7, 6)


def brute_force_rate(ta) -> float:
    """The same definition with a set of id tuples (no trie)."""
    B, seen, hit = ta.prefix_block_tokens, set(), 0
    for i in range(len(ta)):
        ids = tuple(ta.prefix_ids[ta.prefix_offsets[i]:ta.prefix_offsets[i + 1]].tolist())
        p = int(ta.prompt_tokens[i])
        h = 0
        while h < min(len(ids), (p - 1) // B) and ids[:h + 1] in seen:
            h += 1
        hit += h * B
        seen.update(ids[:k] for k in range(1, min(len(ids), p // B) + 1))
    return hit / int(ta.prompt_tokens.sum())


def test_inspect_reports_the_ideal_hit_rate_of_the_mooncake_sample():
    path = SAMPLES / "mooncake_conv_1k.parquet"
    s = inspect_trace(path)
    ta = read_trace_arrays(path)
    assert s["prefix_block_tokens"] == 512 and s["prefix_ids"] == ta.prefix_ids.size
    assert s["prefix_ideal_hit_rate"] == round(brute_force_rate(ta), 6)
    assert 0 < s["prefix_ideal_hit_rate"] < 1


def test_inspect_without_prefix_column_reports_nulls():
    s = inspect_trace(SAMPLES / "azure_conv_eagle_2k.parquet")
    assert s["prefix_block_tokens"] is None and s["prefix_ideal_hit_rate"] is None


# ------------------------------------------------------------------------------- Mooncake


MOONCAKE = "\n".join(json.dumps(o) for o in [
    {"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]},
    {"timestamp": 2000, "input_length": 1600, "output_length": 7, "hash_ids": [0, 1, 3, 4]},
    {"timestamp": 1000, "input_length": 300, "output_length": 9, "hash_ids": [0]},
]) + "\n"


def test_mooncake_hash_ids_become_prefix_hashes(tmp_path):
    src = tmp_path / "m.jsonl"
    src.write_text(MOONCAKE)
    out = tmp_path / "m.parquet"
    res = convert("mooncake", src, out)
    assert res.metadata["specsched.prefix_block_tokens"] == 512
    t = pq.read_table(out)
    assert t["request_id"].to_pylist() == ["0", "2", "1"]               # sorted by arrival
    assert t["prefix_hashes"].to_pylist() == [[0, 1, 2], [0], [0, 1, 3, 4]]
    assert t.schema.field("prefix_hashes").type == pa.list_(pa.int64())
    out2 = tmp_path / "m2.parquet"
    convert("mooncake", src, out2, limit=2)
    assert pq.read_table(out2)["prefix_hashes"].to_pylist() == [[0, 1, 2], [0, 1, 3, 4]]


@pytest.mark.parametrize("bad, text", [
    ('"hash_ids": "x"', "expected a list of integers"),
    ('"hash_ids": [0, 1.5]', "entry 1 is not an integer"),
    ('"hash_ids": [0, 1, 2, 3]', "4 block ids for input_length 1100: at most ceil(1100 / 512) = 3"),
])
def test_bad_hash_ids_name_row_and_column(tmp_path, bad, text):
    src = tmp_path / "m.jsonl"
    src.write_text(MOONCAKE.replace('"hash_ids": [0, 1, 2]', bad))
    with pytest.raises(TraceValidationError) as info:
        read_source("mooncake", src)
    assert any(p.row == 0 and p.column == "hash_ids" and text in p.message
               for p in info.value.problems), str(info.value)


def test_mooncake_without_hash_ids_has_no_prefix_column(tmp_path):
    src = tmp_path / "m.jsonl"
    src.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "hash_ids"})
                           + "\n" for line in MOONCAKE.splitlines()))
    out = tmp_path / "m.parquet"
    convert("mooncake", src, out)
    assert "prefix_hashes" not in pq.read_table(out).column_names


# ------------------------------------------------------------------------------- sessions


def test_sessions_by_hand(tmp_path):
    # 1 system prompt of 8 tokens, 2 turns per session, user messages of 3 tokens, answers of
    # 2, no think time, 4-token blocks.  Turn 1: 8 + 3 = 11 tokens, blocks ending at 4, 8 (the
    # system prompt's) and 11 (the session's).  Turn 2: 8 + (3 + 2) + 3 = 16 tokens, blocks
    # ending at 4, 8, 12, 16.  Ids by first appearance in arrival order.
    out = tmp_path / "s.parquet"
    synth(out, n=4, rate=1.0, prompt="fixed:3", output="fixed:2", turns="fixed:2", turn_gap=0.0,
          system_prompts=1, system_prompt_len="fixed:8", prefix_block=4)
    t = pq.read_table(out)
    assert t["prompt_tokens"].to_pylist() == [11, 16, 11, 16]
    assert t["prefix_hashes"].to_pylist() == [[0, 1, 2], [0, 1, 3, 4], [0, 1, 5], [0, 1, 6, 7]]
    arr = t["arrival_s"].to_pylist()
    assert arr[0] == arr[1] == 0.0 and arr[2] == arr[3] > 0
    meta = read_trace_arrays(out, acceptance="geometric:k=1,alpha=0.5").metadata
    assert meta["specsched.prefix_block_tokens"] == 4
    assert meta["specsched.source"]["sessions"]["sessions"] == 2
    # ideal: turn 1 of session 0 hits nothing; every later request hits the 2 system blocks
    # (turn 2 cannot reuse turn 1's block ending at 11: it was partial, never cached)
    s = inspect_trace(out)
    assert s["prefix_ideal_hit_tokens"] == 3 * 2 * 4


def test_turns_extend_the_previous_turn(tmp_path):
    # without system prompts, turn k's prompt = turn k-1's prompt + its answer + a user message,
    # so turn k-1's full blocks are a leading run of turn k's ids
    out = tmp_path / "t.parquet"
    synth(out, n=60, rate=5.0, turns="fixed:3", turn_gap=10.0, prefix_block=16, seed=3,
          prompt="lognormal:median=40,sigma=0.5,min=20", output="lognormal:median=20,sigma=0.5")
    t = pq.read_table(out).to_pydict()
    by_first: dict[int, list[int]] = {}
    for i, ids in enumerate(t["prefix_hashes"]):
        by_first.setdefault(ids[0], []).append(i)
    assert len(by_first) == 20 and all(len(v) == 3 for v in by_first.values())
    for rows in by_first.values():
        for a, b in zip(rows, rows[1:]):
            pa_, pb = t["prompt_tokens"][a], t["prompt_tokens"][b]
            assert pb > pa_ + t["output_tokens"][a]
            full = pa_ // 16
            assert t["prefix_hashes"][b][:full] == t["prefix_hashes"][a][:full]
            assert t["arrival_s"][b] > t["arrival_s"][a]


def test_sessions_same_seed_same_bytes(tmp_path):
    kw = dict(n=300, rate=3.0, turns="lognormal:median=3,sigma=0.7,max=10", system_prompts=4,
              system_prompt_len="lognormal:median=500,sigma=0.5", acceptance="geometric:k=3,alpha=0.6",
              seed=7, block_rows=100)
    synth(tmp_path / "a.parquet", **kw)
    synth(tmp_path / "b.parquet", **kw)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    rep = validate_trace(tmp_path / "a.parquet")
    assert rep.rows == 300 and rep.prefix_ids > 300


def test_plain_synth_has_no_prefix_column(tmp_path):
    synth(tmp_path / "p.parquet", n=10, rate=1.0)
    assert "prefix_hashes" not in pq.read_table(tmp_path / "p.parquet").column_names
