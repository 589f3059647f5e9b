"""An input of the wrong kind is refused in one line saying what the file is; repeated per-row
problems are listed five per column with a count."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from backends.profile import load_profile
from traces import read_trace_arrays, validate_trace
from traces.acceptance import parse_acceptance
from traces.convert import read_source
from traces.errors import SpecschedError, TraceValidationError
from traces.sniff import kind_of

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "traces" / "samples" / "azure_conv_eagle_2k.parquet"
LFS = ("version https://git-lfs.github.com/spec/v1\n"
       "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
       "size 575812\n")
MOONCAKE = "".join(json.dumps({"timestamp": 10 * i, "input_length": 100, "output_length": 20,
                               "hash_ids": [1, 2]}) + "\n" for i in range(40))
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
    f"2023-11-16 18:15:{i:02d}.0000000,100,20\n" for i in range(40))


def _one_line(exc: pytest.ExceptionInfo, *needles: str) -> str:
    text = str(exc.value)
    assert "\n" not in text, text
    for n in needles:
        assert n in text, text
    return text


@pytest.fixture
def lfs(tmp_path) -> Path:
    p = tmp_path / "pointer.parquet"
    p.write_text(LFS)
    return p


def test_kinds(tmp_path, lfs):
    for name, data, kind in (("a.csv", AZURE, "text"), ("m.jsonl", MOONCAKE, "json"),
                             ("blank", "\n\n", "empty"), ("u.csv", AZURE.encode("utf-16"), "utf-16"),
                             ("z.gz", b"\x1f\x8b\x08\x00rest", "gzip"),
                             ("b.bin", b"\x00\x01\x02junk", "binary")):
        p = tmp_path / name
        p.write_bytes(data if isinstance(data, bytes) else data.encode())
        assert kind_of(p) == kind, name
    assert kind_of(SAMPLE) == "parquet"
    assert kind_of(lfs) == "lfs-pointer"


@pytest.mark.parametrize("fmt", ["azure", "burstgpt", "vidur"])
def test_parquet_given_as_a_csv_log(fmt):
    with pytest.raises(SpecschedError) as exc:
        read_source(fmt, SAMPLE)
    _one_line(exc, str(SAMPLE), "this is a parquet file", "`simulate --trace` or `trace inspect`")


def test_jsonl_given_as_csv_and_csv_given_as_jsonl(tmp_path):
    m = tmp_path / "mooncake.csv"
    m.write_text(MOONCAKE)
    with pytest.raises(SpecschedError) as exc:
        read_source("azure", m)
    _one_line(exc, "this is JSON lines, not a CSV (azure)", "--from mooncake")
    a = tmp_path / "azure.jsonl"
    a.write_text(AZURE)  # 40 lines that are not JSON: one message, not 41 row errors
    with pytest.raises(SpecschedError) as exc:
        read_source("mooncake", a)
    _one_line(exc, "looks like CSV", "--from azure")


def test_git_lfs_pointer_everywhere(tmp_path, lfs):
    needles = ("this is a Git LFS pointer, not the data", "575,812-byte file", "git lfs pull")
    for fn in (validate_trace, read_trace_arrays, load_profile,
               lambda p: read_source("azure", p), lambda p: read_source("mooncake", p),
               lambda p: parse_acceptance(f"specbench:{p}")):
        with pytest.raises(SpecschedError) as exc:
            fn(lfs)
        _one_line(exc, str(lfs), *needles)


def test_cli_prints_one_line_and_exits_2(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "specsched", "trace", "convert", "--from",
                           "azure", str(SAMPLE), "-o", str(tmp_path / "x.parquet")], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("error: ")
    assert "Traceback" not in proc.stderr and not (tmp_path / "x.parquet").exists()


def test_repeated_row_problems_are_capped_per_column(tmp_path):
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    lines += [f"yesterday,{'x' if i < 30 else 5},7" for i in range(100)]
    p = tmp_path / "bad.csv"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(TraceValidationError) as exc:
        read_source("azure", p)
    text = str(exc.value).splitlines()
    assert text[0] == f"{p}: refused, 130 problems:"
    # a bad cell is reported once (not again as "0 tokens"); columns in order of first row
    assert text[1:] == (
        [f"  row {i}, column 'ContextTokens': not a whole number: 'x'" for i in range(5)]
        + ["  ... and 25 more in column 'ContextTokens'"]
        + [f"  row {i}, column 'TIMESTAMP': not a date-time like 2023-11-16 18:15:46.6805900: "
           "'yesterday'" for i in range(5)] + ["  ... and 95 more in column 'TIMESTAMP'"])


def test_rows_with_wrong_field_counts_are_capped(tmp_path):
    p = tmp_path / "ragged.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "1,2,3,4\n" * 50)
    with pytest.raises(TraceValidationError) as exc:
        read_source("azure", p)
    text = str(exc.value).splitlines()
    assert len(text) == 1 + 5 + 1 and text[-1] == "  ... and 45 more like these"
