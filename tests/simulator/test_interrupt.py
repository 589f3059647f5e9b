"""Ctrl-C (SIGINT) and SIGTERM stop ``simulate`` at once, whatever the run's size: exit 130, no
traceback, nothing written; and the engine's bounded compiled chunks change no result."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.simulator.helpers import random_trace, table_executor

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def slow_trace(tmp_path_factory) -> Path:
    from traces.synth import synth

    path = tmp_path_factory.mktemp("sig") / "t.parquet"
    synth(path, n=5000, rate=50, acceptance="geometric:k=4,alpha=0.7", seed=0)
    return path


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_simulate_within_a_second(slow_trace, tmp_path, sig):
    # One running request per replica: ~500k iterations over 4 replicas, about 2.5 s of engine
    # time on the development machine, of which the signal comes early in the first replica's.
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specsched", "simulate", "--trace", str(slow_trace), "--out",
         str(out), "--replicas", "4", "--set", "engine.max_running=1", "--no-report"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        # a test runner started in the background of a shell without job control inherits
        # SIGINT ignored, and so would the command (Python keeps an ignored SIGINT ignored):
        # start it as a terminal would
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 300  # the first run after a change compiles the engine
        # the engine is running once it has streamed its first step rows into the temporary
        while not list(tmp_path.glob(".run.tmp-*/steps.parquet")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the engine never started"
            time.sleep(0.005)
        t0 = time.monotonic()
        proc.send_signal(sig)
        stdout, stderr = proc.communicate(timeout=120)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert took < 1.0, f"exited {took:.2f} s after the signal"
    assert "Traceback" not in stderr and "interrupted; nothing was written" in stderr, stderr
    assert stdout == ""
    assert list(tmp_path.iterdir()) == [], "a folder or temporary was left behind"


def test_chunked_advance_gives_the_same_tables(monkeypatch):
    """Returning to Python after every iteration (the smallest chunk) changes nothing."""
    import simulator
    import simulator.engine as E
    from simulator.config import SimConfig

    trace = random_trace(np.random.default_rng(3), 120, rate=80, output_max=80)
    cfg = SimConfig.load(None, {"cluster.replicas": 2, "engine.max_running": 8})
    ex = table_executor()
    ref = simulator.run(trace, cfg, ex, kv_capacity_tokens=200_000)
    monkeypatch.setattr(E, "CHUNK_WORK", 1)  # one iteration per compiled call
    calls = []
    real = E.Simulation._advance

    def counted(self, r, horizon):
        status = real(self, r, horizon)
        calls.append(status)
        return status

    monkeypatch.setattr(E.Simulation, "_advance", counted)
    got = simulator.run(trace, cfg, ex, kv_capacity_tokens=200_000)
    from simulator import core as C

    assert calls.count(C.ADV_YIELD) > 100  # the chunks really were one iteration each
    for name in ("requests", "steps", "request_steps"):  # bytes: NaN == NaN here
        assert _ipc(getattr(got, name)) == _ipc(getattr(ref, name)), name


def _ipc(table) -> bytes:
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table.combine_chunks())
    return sink.getvalue().to_pybytes()
