"""``specsched trace ...`` through click's CliRunner and through run_cli (exit 2, no traceback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from specsched.cli import cli
from traces.cli import trace
from traces.errors import SpecschedError, TraceValidationError

from tracekit import SAMPLES, make_table, write_raw

ROOT = Path(__file__).resolve().parents[2]
CONV = SAMPLES / "azure_conv_eagle_2k.parquet"


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """The real command line: ``python -m specsched ...`` (run_cli's error policy)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "specsched", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)


def test_every_command_has_help_with_an_example():
    runner = CliRunner()
    for name in ("convert", "synth", "inspect", "validate"):
        res = runner.invoke(cli, ["trace", name, "--help"])
        assert res.exit_code == 0, res.output
        assert "Example" in res.output and f"specsched trace {name}" in res.output
    res = runner.invoke(cli, ["trace", "--help"])
    assert res.exit_code == 0 and "convert" in res.output


def test_convert_inspect_validate_roundtrip(tmp_path):
    runner = CliRunner()
    out = tmp_path / "c.parquet"
    res = runner.invoke(cli, ["trace", "convert", "--from", "azure",
                              str(SAMPLES / "azure2023_code_head2000.csv"), "-o", str(out),
                              "--acceptance", "geometric:k=3,alpha=0.6", "--seed", "2",
                              "--limit", "100", "--rate-scale", "2"])
    assert res.exit_code == 0, res.output
    assert "wrote" in res.output and "100 requests" in res.output
    res = runner.invoke(cli, ["trace", "validate", str(out)])
    assert res.exit_code == 0 and res.output.startswith("ok:")
    res = runner.invoke(cli, ["trace", "inspect", "--json", str(out)])
    assert res.exit_code == 0
    stats = json.loads(res.output)
    assert stats["rows"] == 100 and stats["width_share"] == {"4": 1.0}
    assert stats["acceptance"]["kind"] == "geometric" and stats["acceptance"]["seed"] == 2
    assert stats["source"]["rate_scale"] == 2.0


def test_inspect_json_keys_on_the_sample():
    res = CliRunner().invoke(trace, ["inspect", "--json", str(CONV)])
    assert res.exit_code == 0, res.output
    s = json.loads(res.output)
    documented = {
        "path", "rows", "format_version", "columns", "row_groups", "sorted", "rows_moved_by_sort",
        "first_arrival_s", "last_arrival_s", "span_s", "rate_per_s", "interarrival_mean_s",
        "interarrival_cv", "prompt_tokens", "output_tokens", "total_output_tokens", "steps",
        "steps_per_request", "drafts_per_step_mean", "drafts_per_step_min", "drafts_per_step_max",
        "accepted_per_step_mean", "committed_per_step_mean", "acceptance_rate", "width_share",
        "distinct_widths", "mixed_widths", "requests_with_varying_width", "accept_lag1_autocorr",
        "category_share", "tenant_share", "acceptance", "position_accept_prob",
        "position_accept_prob_source", "source", "notes", "prefix_block_tokens", "prefix_ids",
        "prefix_distinct_ids", "prefix_requests_without_ids", "prefix_ideal_hit_tokens",
        "prefix_ideal_hit_rate", "prefix_requests_with_hit",
    }
    assert set(s) == documented
    doc = (ROOT / "docs" / "traces.md").read_text()
    for key in documented:
        assert f"`{key}`" in doc, f"docs/traces.md does not document {key}"
    assert s["rows"] == 2000 and s["mixed_widths"] is True
    assert sum(s["width_share"].values()) == pytest.approx(1.0, abs=1e-5)
    assert abs(s["committed_per_step_mean"] - 3.58) < 0.1
    for k in ("p50", "p90", "p99"):
        assert k in s["prompt_tokens"]


def test_inspect_tables():
    res = CliRunner().invoke(trace, ["inspect", str(CONV)])
    assert res.exit_code == 0, res.output
    for text in ("rows", "2,000", "mixed widths", "verify widths", "p99"):
        assert text in res.output


def test_clirunner_sees_the_user_error(tmp_path):
    bad = write_raw(make_table(3).drop_columns(["output_tokens"]), tmp_path / "bad.parquet")
    res = CliRunner().invoke(trace, ["validate", str(bad)])
    assert res.exit_code != 0
    assert isinstance(res.exception, TraceValidationError)
    res = CliRunner().invoke(trace, ["convert", "--from", "azure", str(tmp_path / "none.csv"),
                                     "-o", str(tmp_path / "o.parquet")])
    assert isinstance(res.exception, SpecschedError)


def test_run_cli_bad_trace_exits_2_naming_file_row_column(tmp_path):
    t = make_table(5)
    vals = t["arrival_s"].to_pylist()
    vals[3] = -1.0
    import pyarrow as pa
    t = t.set_column(1, "arrival_s", pa.array(vals))
    bad = write_raw(t, tmp_path / "bad.parquet")
    for cmd in (["trace", "validate", str(bad)], ["trace", "inspect", str(bad)]):
        res = run(cmd, tmp_path)
        assert res.returncode == 2, res
        assert res.stderr.startswith("error: ")
        assert str(bad) in res.stderr and "row 3" in res.stderr and "column 'arrival_s'" in res.stderr
        assert "Traceback" not in res.stderr


def test_run_cli_not_parquet_and_empty(tmp_path):
    (tmp_path / "x.parquet").write_text("hello")
    (tmp_path / "e.parquet").write_bytes(b"")
    for name, text in (("x.parquet", "not a parquet trace"), ("e.parquet", "empty file")):
        res = run(["trace", "validate", name], tmp_path)
        assert res.returncode == 2 and text in res.stderr and "Traceback" not in res.stderr


def test_run_cli_bad_convert_leaves_nothing_behind(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                   "2023-11-16 18:15:46.6805900,374,44\n"
                   "2023-11-16 18:15:50.9951690,abc,109\n")
    res = run(["trace", "convert", "--from", "azure", "in.csv", "-o", "out.parquet",
               "--acceptance", "geometric:k=2,alpha=0.5"], tmp_path)
    assert res.returncode == 2
    assert "in.csv" in res.stderr and "row 1" in res.stderr and "column 'ContextTokens'" in res.stderr
    assert "Traceback" not in res.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_run_cli_bad_acceptance_spec_exits_2(tmp_path):
    res = run(["trace", "synth", "-n", "5", "--rate", "1", "--acceptance", "geometric:k=2",
               "-o", "s.parquet"], tmp_path)
    assert res.returncode == 2 and "needs k= and alpha=" in res.stderr
    assert not (tmp_path / "s.parquet").exists()


def test_run_cli_existing_output_is_untouched_on_failure(tmp_path):
    out = tmp_path / "keep.parquet"
    out.write_bytes(b"previous")
    src = tmp_path / "in.csv"
    src.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,5,0\n")
    res = run(["trace", "convert", "--from", "vidur", "in.csv", "-o", "keep.parquet"], tmp_path)
    assert res.returncode == 2
    assert out.read_bytes() == b"previous"


def test_synth_command(tmp_path):
    out = tmp_path / "s.parquet"
    res = CliRunner().invoke(trace, ["synth", "-n", "300", "--rate", "10", "--arrival", "gamma",
                                     "--cv", "2", "--acceptance", "dynamic:k=2-6,alpha=0.7",
                                     "--seed", "5", "-o", str(out)])
    assert res.exit_code == 0, res.output
    t = pq.read_table(out)
    assert t.num_rows == 300
    meta = json.loads(t.schema.metadata[b"specsched.source"])
    assert meta["arrival"] == "gamma" and meta["cv"] == 2.0 and meta["seed"] == 5


def test_corrupt_pages_are_refused_not_a_traceback(tmp_path):
    good = tmp_path / "g.parquet"
    from traces import write_trace
    write_trace(make_table(200), good, metadata={})
    data = bytearray(good.read_bytes())
    for i in range(8, len(data) // 2):       # scramble the data pages, keep header and footer
        data[i] = (data[i] * 7 + 13) % 256
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(bytes(data))
    res = run(["trace", "validate", "bad.parquet"], tmp_path)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and "bad.parquet" in res.stderr


def test_output_that_is_a_folder_and_negative_seed(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,5,3\n")
    (tmp_path / "outdir").mkdir()
    res = run(["trace", "convert", "--from", "vidur", "in.csv", "-o", "outdir"], tmp_path)
    assert res.returncode == 2 and "is a directory" in res.stderr and "Traceback" not in res.stderr
    from traces.convert import convert as do_convert
    with pytest.raises(SpecschedError, match="is a folder"):
        do_convert("vidur", src, tmp_path / "outdir")
    res = run(["trace", "convert", "--from", "vidur", "in.csv", "-o", "o.parquet", "--seed", "-1"],
              tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    from traces import read_trace_arrays
    from traces.convert import convert
    convert("vidur", src, tmp_path / "o.parquet")
    with pytest.raises(SpecschedError, match="seed"):
        read_trace_arrays(tmp_path / "o.parquet", acceptance="geometric:k=1,alpha=0.5", seed=-3)


def test_numbers_too_large(tmp_path):
    from traces.convert import read_source
    src = tmp_path / "a.csv"
    src.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                   "2023-11-16 18:15:46.6805900,99999999999999999999,4\n")
    with pytest.raises(TraceValidationError, match="row 0, column 'ContextTokens'.*int32"):
        read_source("azure", src)
    moon = tmp_path / "m.jsonl"
    moon.write_text('{"timestamp": 0, "input_length": 99999999999999999999999, "output_length": 2}\n')
    with pytest.raises(TraceValidationError, match="input_length"):
        read_source("mooncake", moon)


def test_prefix_column_through_the_command_line(tmp_path):
    res = CliRunner().invoke(trace, ["validate", str(SAMPLES / "mooncake_conv_1k.parquet")])
    assert res.exit_code == 0 and "prefix block ids of 512 tokens" in res.output, res.output
    res = CliRunner().invoke(trace, ["inspect", str(SAMPLES / "mooncake_conv_1k.parquet")])
    assert res.exit_code == 0 and "ideal prefix hit rate" in res.output, res.output
    res = CliRunner().invoke(trace, ["synth", "-n", "50", "--rate", "2", "--turns", "fixed:5",
                                     "--system-prompts", "2", "-o", str(tmp_path / "s.parquet")])
    assert res.exit_code == 0 and "note: 10 sessions, 5.00 turns on average" in res.output, res.output
    import pyarrow as pa
    t = make_table(3, lists=False).append_column(
        "prefix_hashes", pa.array([[1], [1, 2, 3, 4, 5, 6, 7], []], pa.list_(pa.int64())))
    bad = write_raw(t, tmp_path / "bad.parquet", {"specsched.prefix_block_tokens": "16"})
    assert t["prompt_tokens"][1].as_py() <= 96     # 7 ids of 16 tokens need at least 97
    res = run(["trace", "validate", str(bad)], tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "row 1, column 'prefix_hashes'" in res.stderr, res.stderr
