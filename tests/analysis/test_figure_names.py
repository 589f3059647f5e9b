"""One name per quantity: simulate's table, summary.json and the report show the same figure
under the same name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.metrics import summarize
from analysis.report import summary_table
from analysis.results import load_run

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "traces" / "samples" / "azure_conv_eagle_2k.parquet"

#: summary.json key -> the label simulate's table and the report both use
SHARED = {"padding_waste": "padding waste", "width_pad_frac": "width padding",
          "graph_pad_frac": "graph padding", "mixed_iter_frac": "iterations mixing widths",
          "verify_launches_per_iter": "verify launches / iteration",
          "accept_len_mean": "acceptance length (tokens/step)"}


def _printed(stdout: str, label: str) -> str:
    """The value on the row of simulate's table whose label is ``label``."""
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip("│ \n").split("│")]
        if len(cells) == 2 and cells[0] == label:
            return cells[1]
    raise AssertionError(f"no row {label!r} in:\n{stdout}")


def test_table_summary_json_and_report_agree(tmp_path):
    out = tmp_path / "run"
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="120")
    proc = subprocess.run([sys.executable, "-m", "specsched", "simulate", "--trace", SAMPLE,
                           "--limit", "400", "--policy", "pad", "--set",
                           "engine.capture_widths=1-8", "--out", out, "--no-report"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    stats = summarize(load_run(out))
    report = {label.strip(): values[0] for label, values in summary_table([stats])}
    v = stats["verify"]
    # the run has both kinds of padding (pad policy; every width captured, so batch sizes off
    # the ladder replay padded graphs), so the figures below are not all zero
    assert summary["width_pad_frac"] > 0.05 and summary["graph_pad_frac"] > 0.001
    assert summary["verify_slots"] == v["slots"]
    assert summary["padding_waste"] == pytest.approx(
        summary["width_pad_frac"] + summary["graph_pad_frac"])
    from_analysis = {"padding_waste": v["padding_waste"], "width_pad_frac": v["width_pad_frac"],
                     "graph_pad_frac": v["graph_pad_frac"],
                     "mixed_iter_frac": stats["iterations"]["mixed_iter_frac"],
                     "verify_launches_per_iter": stats["iterations"]["verify_launches_per_iter"],
                     "accept_len_mean": v["accept_len_mean"]}
    for key, label in SHARED.items():
        assert summary[key] == pytest.approx(from_analysis[key], rel=1e-12), key
        assert _printed(proc.stdout, label) == report[label], label
