"""A fidelity report's split of per-step errors at a calibration's longest anchored KV."""

import numpy as np
import pyarrow as pa
import pytest

from analysis.fidelity.reach import kv_reach, reach_text


def _steps(**over):
    cols = {"kind": ["verify", "draft", "draft_extend", "prefill", "verify"],
            "kv_max": [1000, 3000, 2048, 5000, 4000],
            "latency_s": [1.0, 2.0, 3.0, 4.0, 4.0]}
    cols.update(over)
    return pa.table(cols)


ARRAYS = {"ok": np.array([True, True, True, True, False]),
          "kind": np.array(["verify", "draft", "draft_extend", "prefill", "verify"]),
          "err": np.array([0.01, -0.02, 0.05, 0.5, 0.04])}
CAL = {"anchors": [{"kind": "verify", "kv_len": 1024}, {"kind": "draft_extend", "kv_len": 2048},
                   {"kind": "prefill", "kv_len": 8192}],
       "prior": {"attention_power": 1.0,
                 "attention_power_cost": {"0": 0.3, "0.5": 0.25, "1": 0.2}}}


def test_steps_split_at_the_longest_decode_anchor():
    # Reach 2,048: the prefill anchor's 8,192 is a cached prefix, not a decode KV. The steps at
    # KV 1,000 and 2,048 are within, the draft at 3,000 beyond; the prefill is no decode step
    # and the verify at 4,000 was not scored (ok False).
    r = kv_reach(CAL, _steps(), ARRAYS)
    assert r["anchors_kv_max"] == 2048
    assert r["within"]["steps"] == 2
    assert r["within"]["mape_pct"] == pytest.approx(3.0)  # (1% + 5%) / 2
    assert r["within"]["mean_signed_pct"] == pytest.approx(3.0)
    assert r["beyond"]["steps"] == 1
    assert r["beyond"]["mean_signed_pct"] == pytest.approx(-2.0)
    assert r["beyond_time_share"] == pytest.approx(2.0 / 6.0)  # 2 s of the scored 1 + 2 + 3
    assert r["attention_power"] == 1.0
    assert r["power_cost_spread_pct"] == pytest.approx(50.0)  # 0.3 / 0.2 - 1


def test_report_text_names_the_reach_the_power_and_both_errors():
    text = reach_text(kv_reach(CAL, _steps(), ARRAYS))
    assert "up to 2,048" in text and "power 1" in text and "differs by 50%" in text
    assert "1 of this run's 3 scored decode steps (33% of their time)" in text
    assert "MAPE 2.00% (mean signed -2.00%) over 1 steps" in text
    assert "MAPE 3.00% (mean signed +3.00%) over 2 steps" in text


def test_a_run_within_reach_says_so_and_no_prior_names_no_power():
    cal = {"anchors": [{"kind": "verify", "kv_len": 32768}]}
    r = kv_reach(cal, _steps(), ARRAYS)
    assert r["beyond"]["steps"] == 0 and r["attention_power"] is None
    text = reach_text(r)
    assert "every scored decode step of this run is within that (3 steps)" in text
    assert "power" not in text


def test_nothing_to_say_without_decode_anchors_or_kv():
    assert kv_reach(None, _steps(), ARRAYS) is None
    assert kv_reach({"anchors": [{"kind": "prefill", "kv_len": 0}]}, _steps(), ARRAYS) is None
    assert kv_reach(CAL, _steps().drop(["kv_max"]), ARRAYS) is None


def test_an_unresolved_power_is_named_as_such():
    cal = dict(CAL, prior=dict(CAL["prior"], attention_power=0.0,
                               attention_resolved={"resolved": False, "groups": {}}))
    r = kv_reach(cal, _steps(), ARRAYS)
    assert r["attention_resolved"] is False and r["attention_power"] == 0.0
    text = reach_text(r)
    assert "taken to the power 0: they did not resolve a power" in text
    assert "chosen from them" not in text and "differs by 50%" in text
    assert kv_reach(CAL, _steps(), ARRAYS)["attention_resolved"] is None


def test_prefill_steps_split_at_the_longest_prefill_anchor():
    # Prefill anchors of 1,024 and 4,096 new tokens: reach 4,096. Of the three scored prefills
    # (6,000, 4,096 and 2,000 tokens; the fourth is not ok), the one of 6,000 is beyond, with
    # -10% error and 6 s of the 6 + 2 + 1 s measured; the other two within, +1% and +3%.
    cal = {"anchors": [{"kind": "verify", "kv_len": 32768},
                       {"kind": "prefill", "kv_len": 0, "tokens": 1024},
                       {"kind": "prefill", "kv_len": 0, "tokens": 4096}]}
    steps = pa.table({"kind": ["prefill"] * 4 + ["verify"], "kv_max": [0, 0, 0, 0, 100],
                      "latency_s": [6.0, 2.0, 1.0, 5.0, 1.0],
                      "tokens": [6000, 4096, 2000, 9000, 4]})
    arrays = {"ok": np.array([True, True, True, False, True]),
              "kind": np.array(["prefill"] * 4 + ["verify"]),
              "err": np.array([-0.10, 0.01, 0.03, 0.5, 0.0])}
    r = kv_reach(cal, steps, arrays)
    p = r["prefill"]
    assert p["anchors_tokens_max"] == 4096
    assert p["beyond"]["steps"] == 1 and p["beyond"]["mean_signed_pct"] == pytest.approx(-10.0)
    assert p["within"]["steps"] == 2 and p["within"]["mape_pct"] == pytest.approx(2.0)
    assert p["beyond_time_share"] == pytest.approx(6.0 / 9.0)
    text = reach_text(r)
    assert "Its prefill anchors measured up to 4,096 new tokens. 1 of this run's 3 scored " \
           "prefill steps (67% of their time) have more: per-step MAPE 10.00% (mean signed " \
           "-10.00%) over 1 steps; within it, per-step MAPE 2.00%" in text
    short = kv_reach(cal, steps.set_column(3, "tokens", pa.array([100, 200, 300, 400, 4])),
                     arrays)
    assert short["prefill"]["beyond"]["steps"] == 0
    assert reach_text(short).endswith("every scored prefill of this run is within that (3 steps).")
