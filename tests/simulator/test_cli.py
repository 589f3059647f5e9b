"""``simulate`` end to end: a results folder on success; exit 2, one clear message, no traceback
and nothing written on bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.simulator.helpers import random_trace
from traces import write_trace
from traces.io import steps_table as list_columns

ROOT = Path(__file__).resolve().parents[2]

REQUEST_COLUMNS = ["request_id", "replica", "arrival_s", "admit_s", "first_token_s", "finish_s",
                   "prompt_tokens", "output_tokens", "steps", "drafted_tokens", "verified_drafts",
                   "accepted_tokens", "truncated_drafts", "padded_slots", "retractions",
                   "cached_tokens", "max_gap_s", "category", "tenant", "ttft_slo_s", "tpot_slo_s"]
STEP_COLUMNS = ["replica", "iteration", "launch", "kind", "start_s", "latency_s", "bs",
                "bs_padded", "width", "min_width", "max_width", "distinct_widths",
                "iter_distinct_widths", "mode", "tokens", "padded_slots", "graph_pad_slots",
                "graph", "passes", "kv_mean", "kv_max", "lookup_kv", "kv_pages_used", "kv_pages_cached",
                "committed_tokens",
                "violations", "out_of_grid", "max_abs_error", "member_kv"]
SUMMARY_KEYS = ["requests", "duration_s", "throughput_tok_s", "ttft_s", "tpot_s", "e2e_s",
                "accept_len_mean", "padding_waste", "width_pad_frac", "graph_pad_frac",
                "verify_slots", "verify_launches_per_iter", "violations",
                "retractions", "backend", "policy", "wall_s", "radix_cache",
                "prefix_cache_hit_rate", "prefix_cache_evicted_tokens"]


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory) -> Path:
    toy = random_trace(np.random.default_rng(0), 60, rate=40, prompt_max=600, output_max=50)
    drafts, accepts = list_columns(toy.step_offsets, toy.draft_tokens, toy.accepted_tokens)
    import pyarrow as pa

    table = pa.table({"request_id": toy.request_id, "arrival_s": toy.arrival_s,
                      "prompt_tokens": toy.prompt_tokens, "output_tokens": toy.output_tokens,
                      "draft_tokens": drafts, "accepted_tokens": accepts})
    path = tmp_path_factory.mktemp("trace") / "toy.parquet"
    write_trace(table, path, metadata={"source": {"format": "test"},
                                       "acceptance": {"kind": "recorded"}})
    return path


def cli(*args, cwd=None):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "specsched", *map(str, args)], cwd=cwd or ROOT,
                          env=env, capture_output=True, text=True, timeout=600)


def assert_clean_error(proc, *needles):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    for n in needles:
        assert n in proc.stderr, proc.stderr


def test_simulate_writes_a_complete_results_folder(trace_file, tmp_path):
    out = tmp_path / "run"
    proc = cli("simulate", "--trace", trace_file, "--backend", "roofline", "--policy", "split",
               "--out", out, "--no-report")
    assert proc.returncode == 0, proc.stderr
    assert "TTFT" in proc.stdout and str(out) in proc.stdout
    req = pq.read_table(out / "requests.parquet")
    steps = pq.read_table(out / "steps.parquet")
    assert req.column_names == REQUEST_COLUMNS and req.num_rows == 60
    assert steps.column_names == STEP_COLUMNS
    assert pq.read_table(out / "request_steps.parquet").num_rows > 60
    summary = json.loads((out / "summary.json").read_text())
    for key in SUMMARY_KEYS:
        assert key in summary, key
    # the fraction that sized the pool is recorded, and it is SGLang's for the model and GPU
    from backends.models import load_model

    assert summary["mem_fraction_static"] == load_model("llama-3.1-8b").sglang_mem_fraction("H200")
    # the pool and the running cap the run had are printed as the summary records them
    assert (f"{summary['kv_capacity_tokens']:,} tokens / "
            f"{summary['config']['engine']['max_running']}") in proc.stdout
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        assert set(summary[key]) == {"p50", "p90", "p99", "mean"}
    assert summary["policy"] == "split" and summary["backend"] == "roofline"
    assert summary["requests"] == 60
    assert not list(tmp_path.glob(".run.*")), "temporary folders left behind"


def test_simulate_console_script_is_the_same_command(trace_file, tmp_path):
    exe = Path(sys.executable).with_name("simulate")
    if not exe.exists():
        pytest.skip("the `simulate` console script is not installed in this environment")
    proc = subprocess.run([exe, "--trace", trace_file, "--backend", "roofline", "--out",
                           tmp_path / "r", "--no-report", "--json"], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["requests"] == 60


@pytest.mark.parametrize("args, needles", [
    (["--set", "engine.policy=sideways"], ["unknown policy 'sideways'"]),
    (["--set", "engine.no_such_key=1"], ["unknown configuration key 'engine.no_such_key'"]),
    (["--set", "engine.kv_capacity_tokens=64"],
     ["KV budget (64 tokens) is smaller than one request needs", "row "]),
    (["--set", "engine.page_size=0"], ["engine.page_size: must be >= 1"]),
    (["--model", "deepseek-v3", "--policy", "fixed", "--set", "engine.num_draft_tokens=8"],
     ["not a width the AITER MLA decode kernels support"]),
    (["--rate-scale", "0"], ["rate_scale"]),
])
def test_bad_configuration_exits_2_and_writes_nothing(trace_file, tmp_path, args, needles):
    out = tmp_path / "never"
    proc = cli("simulate", "--trace", trace_file, "--backend", "roofline", "--out", out, *args)
    assert_clean_error(proc, *needles)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_bad_toml_names_the_file_and_key(trace_file, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[engine]\npolicy = 'pad'\nmax_runing = 3\n")
    proc = cli("simulate", "--trace", trace_file, "--config", cfg, "--out", tmp_path / "x")
    assert_clean_error(proc, str(cfg), "unknown key 'engine.max_runing'")
    cfg.write_text("[engine]\nmax_running = 'many'\n")
    proc = cli("simulate", "--trace", trace_file, "--config", cfg, "--out", tmp_path / "x")
    assert_clean_error(proc, str(cfg), "'engine.max_running' must be an integer")
    assert not (tmp_path / "x").exists()


def test_a_bad_trace_is_refused_with_its_name(tmp_path):
    bad = tmp_path / "notparquet.parquet"
    bad.write_text("request_id,arrival_s\n")
    proc = cli("simulate", "--trace", bad, "--out", tmp_path / "x")
    assert_clean_error(proc, str(bad))
    assert not (tmp_path / "x").exists()


def test_a_failed_run_leaves_an_existing_folder_untouched(trace_file, tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    (out / "keep.txt").write_text("old")
    proc = cli("simulate", "--trace", trace_file, "--backend", "roofline", "--out", out,
               "--set", "engine.kv_capacity_tokens=16")
    assert proc.returncode == 2
    assert (out / "keep.txt").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_aiter_backend_without_a_gpu_fails_at_once(trace_file, tmp_path):
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a GPU is present: the aiter backend would run")
    except ImportError:
        pass
    proc = cli("simulate", "--trace", trace_file, "--backend", "aiter", "--out", tmp_path / "x")
    assert_clean_error(proc, "GPU")
    assert not (tmp_path / "x").exists()


def test_progress_into_a_log_is_plain_lines(trace_file, tmp_path):
    """--progress with stderr going to a file (a GPU job's log): plain lines, the last one the
    whole count, no terminal control codes."""
    proc = cli("simulate", "--trace", trace_file, "--backend", "roofline", "--out",
               tmp_path / "run", "--no-report", "--progress")
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("requests finished")]
    assert lines and lines[-1].startswith("requests finished 60/60 (")
    assert "\x1b[" not in proc.stderr
