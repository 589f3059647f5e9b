"""tune-spec's search pieces, worked by hand: which settings run identically, the per-range
figures of a run, the per-range start of the schedule search, the max-rate search's first step."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from analysis.runner import RunSpec, simulate
from analysis.tune_rate import first_growth
from analysis.tune_spec import _config, _setting, canonical, per_range_best, range_stats
from simulator.config import SimConfig

SAMPLE = "traces/samples/azure_conv_eagle_2k.parquet"


def _sched(ndt: int, **ranges) -> dict:
    return {"controller": "schedule", "num_draft_tokens": ndt,
            "settings": {"schedule": json.dumps(ranges["r"])}}


def _adaptive(slots: dict) -> dict:
    cfg = {lo: {"candidate_steps": st} for lo, st in slots.items()}
    return _setting("sglang-adaptive", 1, adaptive_config=json.dumps(cfg))


def test_equivalent_settings_share_a_key():
    static3 = canonical(_setting("static", 3))
    # every range at 3 with 4 draft tokens: static k=3
    assert canonical(_sched(4, r={"1-8": 3, "9-32": 3, "33-4096": 3})) == static3
    # the same schedule with 8 draft tokens captures width 8 too: not the same run
    assert canonical(_sched(8, r={"1-8": 3, "9-32": 3, "33-4096": 3})) != static3
    # off above 8 = a schedule 3 up to 8, 0 above (same captured widths 1 and 4)
    assert canonical(_setting("threshold", 3, max_bs=8)) == \
        canonical(_sched(4, r={"1-8": 3, "9-32": 0, "33-4096": 0}))
    assert canonical(_setting("threshold", 3, max_bs=8)) != \
        canonical(_setting("threshold", 3, max_bs=16))
    # an adaptive config with one candidate per range never switches: static k=2
    assert canonical(_adaptive({"1": [2]})) == canonical(_setting("static", 2))
    assert canonical(_adaptive({"1": [2], "64": [2]})) == canonical(_setting("static", 2))
    assert canonical(_adaptive({"1": [2, 3]})) != canonical(_setting("static", 2))
    assert canonical(_setting("static", 0)) == canonical(_sched(1, r={"1-4096": 0}))


@pytest.mark.parametrize("a,b", [
    (_setting("threshold", 3, max_bs=8), _sched(4, r={"1-8": 3, "9-4096": 0})),
    (_adaptive({"1": [2]}), _setting("static", 2)),
])
def test_settings_with_one_key_run_identically(a, b):
    assert canonical(a) == canonical(b)
    base = SimConfig.load(None, {})
    ra = simulate(RunSpec(SAMPLE, _config(base, a)))
    rb = simulate(RunSpec(SAMPLE, _config(base, b)))
    assert ra.requests.equals(rb.requests)
    assert ra.summary["controller"]["rounds_by_draft_tokens"] == \
        rb.summary["controller"]["rounds_by_draft_tokens"]


def _steps(rows):
    cols = ["replica", "iteration", "kind", "latency_s", "bs", "committed_tokens"]
    data = {c: [r[i] for r in rows] for i, c in enumerate(cols)}
    kinds = pa.array(data.pop("kind")).dictionary_encode()
    return pa.table({**{c: data[c] for c in ("replica", "iteration", "latency_s", "bs",
                                             "committed_tokens")}, "kind": kinds})


def test_range_stats_by_hand():
    steps = _steps([
        (0, 0, "prefill", 0.010, 1, 0),            # not a decode round
        (0, 1, "draft", 0.001, 4, 0), (0, 1, "verify", 0.004, 4, 10),
        (0, 1, "draft_extend", 0.001, 4, 0),       # round: 6 ms, bs 4, 10 tokens
        (0, 2, "draft", 0.002, 20, 0), (0, 2, "verify", 0.006, 20, 50),
        (0, 2, "draft_extend", 0.002, 20, 0),      # round: 10 ms, bs 20, 50 tokens
        (1, 1, "verify", 0.003, 2, 4),             # replica 1's iteration 1: its own round
    ])
    small, mid, big = range_stats(steps)
    assert small["rounds"] == 2 and small["tokens"] == 14
    assert small["time_s"] == pytest.approx(0.009)
    assert small["throughput_tok_s"] == pytest.approx(14 / 0.009)
    # (6 ms x 4 + 3 ms x 2) / 14 tokens
    assert small["tpot_s"] == pytest.approx(0.030 / 14)
    assert mid["rounds"] == 1 and mid["throughput_tok_s"] == pytest.approx(5000.0)
    assert mid["tpot_s"] == pytest.approx(0.010 * 20 / 50)
    assert big["rounds"] == 0 and big["tpot_s"] is None and big["throughput_tok_s"] is None


def test_per_range_start_of_the_schedule_search():
    def run(tpots, rounds=(500, 495, 5)):
        return {"ranges": [{"tpot_s": t, "rounds": n} for t, n in zip(tpots, rounds)]}

    statics = {0: run([5.0, 6.0, None]), 1: run([3.0, 4.0, 9.0]), 2: run([2.0, 4.5, 1.0])}
    # range 1: k=2 fastest; range 2: k=1; range 3: 5 of 1,000 rounds at k=2 (< 1%): no pick
    assert per_range_best(statics, 2) == [2, 1, None]
    statics[2] = run([2.0, 4.5, 1.0], rounds=(500, 480, 20))
    assert per_range_best(statics, 2) == [2, 1, 2]


def test_first_step_of_the_rate_search():
    assert first_growth(0.8, True) == pytest.approx(1.25)   # 1 / busy fraction
    assert first_growth(0.95, True) == 1.15                  # at least 15%
    assert first_growth(0.1, True) == 4.0                    # at most x4
    assert first_growth(0.5, False) == 2.0                   # missing: halve
