"""A live run's wall-time line (``simulate``'s summary and ``--progress``), and a profile run
that keeps no such account: its summary and printout unchanged."""

from __future__ import annotations

import numpy as np

from simulator.cli import _ProgressBar, live_wall_line, print_summary
from simulator.config import SimConfig
from specsched.setup import simulate_to
from tests.simulator.helpers import random_trace

#: a live run's describe()["wall"], the fields the line reads (the figures of the brief's run)
WALL = {"setup_s": 40.0, "span_s": 270.0, "calls_s": 265.0, "engine_s": 5.0,
        "captures": {"count": 50, "s": 120.0}, "warmup_s": 3.0, "rerun_s": 1.0,
        "timed_s": 100.0, "gpu_s": 61.0, "hold_s": 30.0, "executor_other_s": 41.0}


def test_the_line_adds_the_parts_and_leaves_the_rest():
    # 312 s in all: 40 setup + 270 from the first executor call on; the 2 s left are the rest
    assert live_wall_line(WALL, 312.0) == (
        "live: wall 312.0 s = setup 40.0 s + captures (50) 120.0 s + warm-ups 3.0 s + re-runs "
        "1.0 s + timed (GPU 61.0 s, holds 30.0 s) 100.0 s + executor other 41.0 s + engine "
        "5.0 s + rest 2.0 s")
    no_setup = dict(WALL, setup_s=None)  # an executor built by hand: no setup time known
    assert live_wall_line(no_setup, 270.0).endswith("engine 5.0 s + rest 0.0 s")
    assert "setup 0.0 s" in live_wall_line(no_setup, 270.0)


class _Live:
    def __init__(self):
        self.asked = 0

    def wall_account(self):
        self.asked += 1
        return WALL


def test_progress_prints_the_line_for_an_executor_that_keeps_an_account(capsys):
    bar = _ProgressBar(10, every_s=3600.0)  # not a terminal under pytest: plain lines
    live = _Live()
    bar.watch(live)
    bar.update(3, 10)                        # before every_s: nothing
    assert live.asked == 0 and capsys.readouterr().err == ""
    bar.update(10, 10)                       # the last request: always
    err = capsys.readouterr().err.splitlines()
    assert live.asked == 1 and err[0].startswith("live: wall ") and err[1].startswith(
        "requests finished 10/10")
    bar.close()
    quiet = _ProgressBar(10, every_s=3600.0)
    quiet.watch(object())                    # a profile or roofline executor: no account
    quiet.update(10, 10)
    quiet.close()
    assert capsys.readouterr().err.splitlines()[0].startswith("requests finished 10/10")


def test_a_profile_run_keeps_no_wall_account(capsys, tmp_path):
    seen = []
    trace = random_trace(np.random.default_rng(3), 6)
    res = simulate_to(trace, SimConfig.load(None, {"backend.name": "profile"}), None,
                      on_executor=seen.append)
    assert len(seen) == 1 and not hasattr(seen[0], "wall_account")
    assert "wall" not in res.summary["backend_detail"]
    print_summary(res.summary, tmp_path)
    assert "live:" not in capsys.readouterr().out
    # the same printout of a live run's summary: the line over wall_s + setup_s
    live = dict(res.summary, backend_detail={"wall": WALL}, wall_s=272.0)
    print_summary(live, tmp_path)
    out = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "live: wall 312.0 s = setup 40.0 s + captures (50) 120.0 s" in out
    assert "engine 5.0 s + rest 2.0 s" in out
