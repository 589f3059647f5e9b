"""``specsched tune-spec`` on the shipped EAGLE sample: the JSON it promises, and a winner that
is the best of everything it simulated."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.tune_cli import parse_thresholds
from traces.errors import SpecschedError

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = "traces/samples/azure_conv_eagle_2k.parquet"


def test_tune_spec_json_on_the_sample():
    p = subprocess.run([sys.executable, "-m", "specsched", "tune-spec", "--trace", SAMPLE,
                        "--slo", "ttft=1s,tpot=3ms", "--max-k", "2", "--rate-scale", "4",
                        "--jobs", "1", "--json"], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    for key in ("best", "best_goodput", "no_spec_goodput", "best_static", "sglang_args",
                "vllm_speculative_config"):
        assert key in res
    goodputs = [row["goodput_req_s"] for row in res["all"]]
    assert res["best_goodput"] == max(goodputs)
    statics = [r for r in res["all"] if r["controller"] == "static"]
    assert {r["num_draft_tokens"] for r in statics} == {1, 2, 3}
    assert res["best_static"]["goodput"] == max(r["goodput_req_s"] for r in statics)
    assert res["no_spec_goodput"] == next(r["goodput_req_s"] for r in statics
                                          if r["num_draft_tokens"] == 1)
    assert res["best_goodput"] >= res["best_static"]["goodput"] >= res["no_spec_goodput"]


def test_slo_thresholds_parse_and_bad_ones_are_refused():
    assert parse_thresholds("ttft=2s,tpot=50ms") == (2.0, 0.05)
    assert parse_thresholds("tpot<=0.02") == (None, 0.02)
    with pytest.raises(SpecschedError, match="--slo"):
        parse_thresholds("e2e=3s")
