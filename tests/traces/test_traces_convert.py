"""Converters: the published column layouts of Azure, Mooncake, BurstGPT and Vidur traces.

The fixtures copy the layouts of the real files: Azure/AzurePublicDataset
data/AzureLLMInferenceTrace_conv.csv, kvcache-ai/Mooncake FAST25-release/traces/
conversation_trace.jsonl, HPMLL/BurstGPT data/BurstGPT_1.csv, microsoft/vidur
data/processed_traces/splitwise_conv.csv (the first rows are taken from those files).
"""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from traces import TraceValidationError, read_trace_arrays, validate_trace
from traces.convert import convert, read_source
from traces.errors import SpecschedError

from tracekit import SAMPLES

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,374,44
2023-11-16 18:15:50.9951690,396,109
2023-11-16 18:15:51.2224670,879,55
2023-11-16 18:15:51.3910170,91,16
2023-11-16 18:15:52.5730450,91,16"""

MOONCAKE = """{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}
{"timestamp": 0, "input_length": 7322, "output_length": 490, "hash_ids": [0, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27]}
{"timestamp": 3000, "input_length": 13544, "output_length": 71, "hash_ids": [0, 219, 220]}
{"timestamp": 5999, "input_length": 1053, "output_length": 26, "hash_ids": [0, 773, 774]}
"""

BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,230,1317,Conversation log
118,GPT-4,417,276,693,Conversation log
120,GPT-4,300,0,300,API log
131,ChatGPT,12,40,52,API log
"""

VIDUR = """arrived_at,num_prefill_tokens,num_decode_tokens
0.0,374,44
4.314579,396,109
4.541877,879,55
4.710427,91,16
"""

VIDUR_LENGTHS_ONLY = """num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio
3772,54,3826,69.85185185185185
2015,156,2171,12.916666666666666
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_azure(tmp_path):
    src = read_source("azure", write(tmp_path, "a.csv", AZURE))
    assert src.prompt_tokens.tolist() == [374, 396, 879, 91, 91]
    assert src.output_tokens.tolist() == [44, 109, 55, 16, 16]
    # the same arrivals as Vidur's splitwise_conv.csv, which was derived from this file
    assert src.arrival_s[:4] == pytest.approx([0.0, 4.314579, 4.541877, 4.710427], abs=1e-9)
    assert src.info["time_origin"] == "2023-11-16 18:15:46.6805900"


def test_mooncake_timestamps_are_milliseconds(tmp_path):
    src = read_source("mooncake", write(tmp_path, "m.jsonl", MOONCAKE))
    assert src.arrival_s.tolist() == [0.0, 0.0, 3.0, 5.999]
    assert src.prompt_tokens.tolist() == [6758, 7322, 13544, 1053]
    assert src.output_tokens.tolist() == [500, 490, 71, 26]


def test_burstgpt_drops_failed_rows_and_counts_them(tmp_path):
    out = tmp_path / "b.parquet"
    res = convert("burstgpt", write(tmp_path, "b.csv", BURSTGPT), out)
    assert res.rows == 4 and res.dropped == {"failed (Response tokens = 0)": 1}
    t = pq.read_table(out)
    assert t["request_id"].to_pylist() == ["0", "1", "2", "4"]
    assert t["arrival_s"].to_pylist() == [0.0, 40.0, 113.0, 126.0]
    assert t["tenant"].to_pylist() == ["ChatGPT", "ChatGPT", "GPT-4", "ChatGPT"]
    assert t["category"].to_pylist() == ["Conversation log"] * 3 + ["API log"]
    assert any("dropped 1 rows" in n for n in res.notes)
    assert res.metadata["specsched.source"]["dropped"] == {"failed (Response tokens = 0)": 1}


def test_vidur(tmp_path):
    src = read_source("vidur", write(tmp_path, "v.csv", VIDUR))
    assert src.arrival_s.tolist() == [0.0, 4.314579, 4.541877, 4.710427]
    assert src.output_tokens.tolist() == [44, 109, 55, 16]


def test_vidur_without_arrivals_points_to_synth(tmp_path):
    with pytest.raises(TraceValidationError, match="synth --lengths empirical:vidur"):
        read_source("vidur", write(tmp_path, "v.csv", VIDUR_LENGTHS_ONLY))


@pytest.mark.parametrize("fmt,text,row,column", [
    ("azure", AZURE.replace("396,109", "396,x"), 1, "GeneratedTokens"),
    ("azure", AZURE.replace("879,55", "879,0"), 2, "GeneratedTokens"),
    ("azure", AZURE.replace("2023-11-16 18:15:51.2224670", "yesterday"), 2, "TIMESTAMP"),
    ("azure", AZURE.replace("91,16\n", "91,\n", 1), 3, "GeneratedTokens"),
    ("azure", AZURE.replace("ContextTokens", "Context"), None, "ContextTokens"),
    ("azure", AZURE.replace("396,109", "396,109,7"), 1, None),
    ("mooncake", MOONCAKE.replace('"input_length": 7322', '"input_length": "7322"'), 1, "input_length"),
    ("mooncake", MOONCAKE.replace('"timestamp": 3000, ', ''), 2, "timestamp"),
    ("mooncake", MOONCAKE.replace('"output_length": 26', '"output_length": 0'), 3, "output_length"),
    ("mooncake", MOONCAKE + "{not json}\n", 4, None),
    ("burstgpt", BURSTGPT.replace("118,GPT-4", "-5,GPT-4"), 2, "Timestamp"),
    ("burstgpt", BURSTGPT.replace("1087,230", "0,230"), 1, "Request tokens"),
    ("vidur", VIDUR.replace("4.541877", "nan"), 2, "arrived_at"),
    ("vidur", VIDUR.replace("91,16", "91,-16"), 3, "num_decode_tokens"),
])
def test_bad_inputs_name_row_and_column(tmp_path, fmt, text, row, column):
    inp = write(tmp_path, "in.txt", text)
    out = tmp_path / "out.parquet"
    with pytest.raises(TraceValidationError) as info:
        convert(fmt, inp, out)
    err = info.value
    assert str(inp) in str(err)
    assert any((row is None or p.row == row) and (column is None or p.column == column)
               for p in err.problems), str(err)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [inp]          # no temporary left behind


def test_empty_and_header_only_inputs(tmp_path):
    for fmt, text in (("azure", ""), ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n"),
                      ("mooncake", "\n\n"), ("vidur", "")):
        with pytest.raises(TraceValidationError):
            read_source(fmt, write(tmp_path, "e.txt", text))


def test_unknown_format_and_missing_file(tmp_path):
    with pytest.raises(SpecschedError, match="unknown input format"):
        read_source("sharegpt", tmp_path / "x")
    with pytest.raises(SpecschedError, match="no such file"):
        read_source("azure", tmp_path / "missing.csv")


def test_unsorted_input_is_sorted_and_reported(tmp_path):
    lines = AZURE.split("\n")
    text = "\n".join([lines[0], lines[3], lines[1], lines[2], lines[4], lines[5]])
    out = tmp_path / "s.parquet"
    res = convert("azure", write(tmp_path, "u.csv", text), out)
    t = pq.read_table(out)
    assert t["request_id"].to_pylist() == ["1", "2", "0", "3", "4"]
    assert t["arrival_s"].to_pylist()[0] == 0.0
    assert np.all(np.diff(t["arrival_s"].to_numpy()) >= 0)
    assert any("not sorted" in n for n in res.notes)


def test_limit_and_rate_scale(tmp_path):
    out = tmp_path / "l.parquet"
    res = convert("vidur", write(tmp_path, "v.csv", VIDUR), out, limit=3, rate_scale=2.0)
    t = pq.read_table(out)
    assert res.rows == 3
    assert t["arrival_s"].to_pylist() == pytest.approx([0.0, 4.314579 / 2, 4.541877 / 2])
    src = res.metadata["specsched.source"]
    assert src["limit"] == 3 and src["rate_scale"] == 2.0 and src["rows_in_file"] == 4
    with pytest.raises(SpecschedError, match="rate-scale"):
        convert("vidur", tmp_path / "v.csv", tmp_path / "z.parquet", rate_scale=0)


def test_without_acceptance_the_trace_has_no_lists(tmp_path):
    out = tmp_path / "n.parquet"
    res = convert("azure", write(tmp_path, "a.csv", AZURE), out)
    assert res.steps is None
    rep = validate_trace(out)
    assert not rep.has_lists
    with pytest.raises(SpecschedError, match="acceptance"):
        read_trace_arrays(out)


def test_convert_with_acceptance_equals_reading_with_acceptance(tmp_path):
    """Filling at conversion or at read time gives the same lists (same order, same seed)."""
    spec = "geometric:k=3,alpha=0.65"
    inp = SAMPLES / "azure2023_code_head2000.csv"
    with_lists = tmp_path / "w.parquet"
    without = tmp_path / "wo.parquet"
    convert("azure", inp, with_lists, acceptance=spec, seed=7, limit=300)
    convert("azure", inp, without, limit=300)
    a = read_trace_arrays(with_lists)
    b = read_trace_arrays(without, acceptance=spec, seed=7)
    assert np.array_equal(a.step_offsets, b.step_offsets)
    assert np.array_equal(a.draft_tokens, b.draft_tokens)
    assert np.array_equal(a.accepted_tokens, b.accepted_tokens)
    assert a.acceptance == b.acceptance


def test_same_seed_same_bytes_other_seed_other_draws(tmp_path):
    spec = f"specbench:{SAMPLES / 'specbench_vicuna7b_eagle_lengths.jsonl'}"
    inp = SAMPLES / "azure2023_conv_head2000.csv"
    a, b, c = tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "c.parquet"
    convert("azure", inp, a, acceptance=spec, seed=3, limit=500)
    convert("azure", inp, b, acceptance=spec, seed=3, limit=500)
    convert("azure", inp, c, acceptance=spec, seed=4, limit=500)
    assert a.read_bytes() == b.read_bytes()
    assert pq.read_table(a)["accepted_tokens"] != pq.read_table(c)["accepted_tokens"]


def test_output_file_is_readable_by_others(tmp_path):
    out = tmp_path / "p.parquet"
    convert("vidur", write(tmp_path, "v.csv", VIDUR), out)
    import os
    mask = os.umask(0)
    os.umask(mask)
    assert (out.stat().st_mode & 0o777) == (0o666 & ~mask)
