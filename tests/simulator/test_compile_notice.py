"""A first run says that it compiles, and the engine's reported speed leaves compilation out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from backends import jit
from simulator.config import SimConfig
from simulator.engine import Simulation
from tests.simulator.helpers import random_trace, table_executor
from traces import write_trace
from traces.io import steps_table

ROOT = Path(__file__).resolve().parents[2]


def test_compiling_before_the_run_leaves_the_state_alone():
    trace = random_trace(np.random.default_rng(5), 20)
    for router in ("round-robin", "least-outstanding-tokens"):
        config = SimConfig.load(None, {"cluster.replicas": 2, "cluster.router": router})
        sim = Simulation(trace, config, table_executor(), kv_capacity_tokens=200_000)
        before = {k: getattr(sim, k).copy() for k in ("R", "RF", "E", "EF", "Q", "W", "RUN", "PI")}
        assert sim.compile() >= 0.0
        for k, v in before.items():
            assert np.array_equal(getattr(sim, k), v, equal_nan=True), k
        assert sim.buf.G.sum() == 0


@pytest.mark.slow
def test_a_cold_cache_says_so_once_and_wall_s_excludes_compilation(tmp_path):
    if not jit.JIT_ENABLED:
        pytest.skip(f"hot loops are not compiled here: {jit.jit_status()}")
    toy = random_trace(np.random.default_rng(0), 30)
    d, a = steps_table(toy.step_offsets, toy.draft_tokens, toy.accepted_tokens)
    trace = tmp_path / "toy.parquet"
    write_trace(pa.table({"request_id": toy.request_id, "arrival_s": toy.arrival_s,
                          "prompt_tokens": toy.prompt_tokens, "output_tokens": toy.output_tokens,
                          "draft_tokens": d, "accepted_tokens": a}), trace, metadata={})
    env = dict(os.environ, PYTHONPATH=str(ROOT), XDG_CACHE_HOME=str(tmp_path / "cache"))
    env.pop("NUMBA_CACHE_DIR", None)

    def simulate(out: str):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "specsched", "simulate", "--trace", trace,
                               "--out", tmp_path / out, "--no-report", "--json"], cwd=ROOT,
                              env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        return proc, json.loads(proc.stdout), time.perf_counter() - t0

    cold, summary, elapsed = simulate("a")
    assert cold.stderr.splitlines() == [jit.COMPILE_NOTICE]
    # the 30 requests take milliseconds; the compilation before them takes seconds
    assert summary["wall_s"] < 1.0 < elapsed - summary["wall_s"]
    warm, _, _ = simulate("b")
    assert jit.COMPILE_NOTICE not in warm.stderr
