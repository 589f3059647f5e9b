"""SGLang's rules, each checked against a case worked out by hand (docs/sglang.md names them)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import core as C
from simulator import run, sglang
from simulator.cache_ops import new_states
from simulator.config import SimConfig
from tests.simulator.helpers import make_trace, table_executor

NO_CACHE = new_states(1, 0, 1)  # a replica without a radix cache

H200 = 143771 << 20


def _steps(res):
    s = res.steps.to_pandas()
    s["kind"] = s["kind"].astype(str)
    return s


# ---------------------------------------------------------------- defaults (server_args)
def test_default_run_is_sglangs_eagle_topk1_run():
    from specsched.setup import prepare

    e = prepare(SimConfig.load()).config.engine
    assert (e.policy, e.num_draft_tokens, e.max_running, e.page_size) == ("fixed", 4, 48, 1)
    assert (e.chunked_prefill_size, e.cuda_graph_max_bs, e.max_prefill_tokens) == (8192, 256, 16384)
    assert e.overlap is True and e.widths_captured == (4,)
    # the speculative ladder up to 256, cut at the request pool of 48 (23 sizes)
    assert e.ladder == (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32,
                        40, 44, 48)
    assert e.what_ifs == []


def test_capture_ladder_steps_by_16_above_256():
    lad = sglang.spec_ladder(300)
    assert lad[-5:] == (248, 256, 272, 288, 300)  # 300 itself is added
    assert len(sglang.spec_ladder(256)) == 8 + 12 + 7 + 24
    assert sglang.capture_ladder(24, 48) == sglang.spec_ladder(24)
    assert sglang.capture_ladder(256, 50)[-3:] == (44, 48, 50)


@pytest.mark.parametrize("gib, tp, expect", [
    (143771 / 1024, 1, (8192, 256)),    # H200
    (143771 / 1024, 8, (8192, 512)),
    (192, 1, (16384, 512)),             # MI300X
    (79.6, 1, (8192, 256)),             # H100 80 GB
    (24, 1, (4096, 48)),
    (16, 1, (2048, 8)),
])
def test_chunked_prefill_and_graph_max_bs_by_gpu_memory(gib, tp, expect):
    assert sglang.gpu_memory_defaults(int(gib * (1 << 30)), tp) == expect


def test_max_running_without_speculation_comes_from_the_pool_and_context():
    # resolve_max_num_reqs: min(clamp(int(capacity / context * 512), 2048, 4096), capacity // 2)
    assert sglang.nospec_max_running(729_296, 131_072) == 2848      # int(2848.8)
    assert sglang.nospec_max_running(100_000, 131_072) == 2048      # 390 -> the floor
    assert sglang.nospec_max_running(3_000_000, 8192) == 4096       # 187,500 -> the ceiling
    assert sglang.nospec_max_running(1000, 131_072) == 500          # half the pool
    assert sglang.nospec_max_running(729_296, 0) is None            # context unknown


def test_simulate_without_speculation_sizes_max_running_from_the_pool():
    from specsched.setup import prepare

    prep = prepare(SimConfig.load(None, {"engine.num_draft_tokens": 1}))
    cap = prep.kv_capacity_tokens
    assert prep.config.engine.max_running == min(max(min(int(cap / 131072 * 512), 4096), 2048),
                                                 cap // 2)
    # the pool without speculation has no draft layer in its cells: larger than with it
    assert cap > prepare(SimConfig.load()).kv_capacity_tokens
    # an explicit value stays
    assert prepare(SimConfig.load(None, {"engine.num_draft_tokens": 1, "engine.max_running": 64})
                   ).config.engine.max_running == 64


def test_new_token_ratio_parameters():
    init, low, decay = sglang.new_token_ratio_params(1.0)
    assert init == 0.7 and abs(low - 0.098) < 1e-12 and abs(decay - 0.602 / 600) < 1e-12
    assert sglang.new_token_ratio_params(2.0)[0] == 1.0  # capped at 1


def test_decode_reserve_and_default_max_new_tokens():
    assert sglang.decode_reserve_tokens(4) == 8       # 2 * max(3 steps x top-1, 4 tokens)
    assert sglang.decode_reserve_tokens(1) == 1
    # prompt 100, context 1000, pool 10000, page 1: min(999 - 100 - 1, 10000 - 100 - 1 - 1)
    assert sglang.default_max_new_tokens([100], 1000, 10000, 1)[0] == 898
    # no context bound, pool 1024, page 16: min(1023 - 100 - 1, 1024 - 112 - 16 - 1)
    assert sglang.default_max_new_tokens([100], 0, 1024, 16)[0] == 895


# ---------------------------------------------------------------- the EAGLE round
def _one_request(drafts, n_steps=6):
    return make_trace([0.0], [10], [1 + n_steps * (drafts + 1)], [[(drafts, drafts)] * n_steps])


def test_round_is_steps_minus_one_drafts_verify_and_draft_extend():
    res = run(_one_request(1), SimConfig.load(), table_executor(), kv_capacity_tokens=10_000)
    s = _steps(res)
    rounds = s[s.kind != "prefill"]
    # num_draft_tokens 4 = 3 steps: 2 draft passes, a verify of 4 tokens, a draft-extend of 4
    assert list(rounds.kind[:3]) == ["draft", "verify", "draft_extend"]
    assert set(rounds.passes[rounds.kind == "draft"]) == {2}
    assert set(rounds.width[rounds.kind != "draft"]) == {4}
    assert rounds.graph.all()
    assert res.summary["draft_extend_passes"] == res.summary["verify_launches"] > 0


def test_no_draft_passes_with_one_step_and_none_without_speculation():
    two = run(_one_request(1), SimConfig.load(None, {"engine.num_draft_tokens": 2}),
              table_executor(), kv_capacity_tokens=10_000)
    assert _steps(two).kind.tolist().count("draft") == 0  # num_steps 1: no draft forward
    assert two.summary["draft_extend_passes"] > 0
    plain = run(_one_request(0), SimConfig.load(None, {"engine.num_draft_tokens": 1}),
                table_executor(), kv_capacity_tokens=10_000)
    assert set(_steps(plain).kind) == {"prefill", "verify"}


def test_split_runs_uncaptured_widths_eagerly():
    trace = make_trace([0.0, 0.0], [10, 10], [9, 9], [[(1, 1)] * 4, [(3, 3)] * 2])
    res = run(trace, SimConfig.load(None, {"engine.policy": "split"}), table_executor(),
              kv_capacity_tokens=10_000)
    v = _steps(res)
    v = v[v.kind == "verify"]
    assert set(v.graph[v.width == 4]) == {True} and set(v.graph[v.width == 2]) == {False}
    assert "what-if" in " ".join(res.summary["warnings"])


def test_pad_with_widen_draft_verifies_real_drafts():
    trace = make_trace([0.0, 0.0], [10, 10], [9, 9], [[(1, 1)] * 4, [(3, 3)] * 2])
    res = run(trace, SimConfig.load(None, {"engine.policy": "pad", "engine.widen": "draft"}),
              table_executor(), kv_capacity_tokens=10_000)
    assert res.summary["width_pad_frac"] == 0.0
    assert int(res.requests["verified_drafts"].to_numpy()[0]) >= 3  # drafted up to the pad width


def test_max_running_48_caps_the_batch():
    n = 100
    trace = make_trace(np.zeros(n), [10] * n, [9] * n, [[(3, 3)] * 2] * n)
    res = run(trace, SimConfig.load(), table_executor(), kv_capacity_tokens=1_000_000)
    assert _steps(res).bs.max() == 48


# ---------------------------------------------------------------- admission (PrefillAdder)
def _two_requests(capacity):
    trace = make_trace([0.0, 0.0], [100, 300], [50, 50], [[(3, 3)] * 13, [(3, 3)] * 13])
    cfg = SimConfig.load(None, {"engine.max_new_tokens": 500})
    return run(trace, cfg, table_executor(), kv_capacity_tokens=capacity)


def test_admission_reserves_max_new_tokens_of_new_and_running_requests():
    # A: 100 + min(500, 4096) + 1 page = 601 < 1000 -> admitted; the offset becomes 100 + 1 +
    # 500 = 601.  B: 300 + 500 + 1 = 801 >= 1000 - 601 -> waits.  While A runs, B needs
    # 1000 - kv_A - (500 - out_A) x ratio > 801, impossible while kv_A >= 100 and the ratio
    # >= 0.098 keeps A's reservation above 99: B is admitted once A has finished.
    small = _two_requests(1000).requests.to_pandas()
    assert small.admit_s[1] >= small.finish_s[0]
    # with 2000 tokens: B's 801 < 2000 - 601, both in the first prefill pass
    big = _two_requests(2000).requests.to_pandas()
    assert big.admit_s[0] == big.admit_s[1] == 0.0


# ---------------------------------------------------------------- retraction (retract_decode)
def _state(gens, prompts, kvs, free, mnt):
    n = len(gens)
    R = np.zeros((n, C.NR), np.int64)
    R[:, C.R_GEN] = gens
    R[:, C.R_KV] = kvs
    R[:, C.R_PAGES] = kvs  # page 1
    R[:, C.R_STATUS] = C.ST_RUNNING
    E = np.zeros((1, C.NE), np.int64)
    E[0, C.E_FREE] = free
    E[0, C.E_NRUN] = n
    E[0, C.E_CHUNKED] = -1
    EF = np.zeros((1, C.NEF))
    EF[0, C.EF_RATIO] = 0.5
    RUN = np.arange(n, dtype=np.int64)[None, :].copy()
    W = np.zeros((1, n + 1), np.int64)
    WT = np.zeros((1, n + 1))
    CI = np.zeros(C.NCI, np.int64)
    CI[C.C_PAGE] = 1
    CI[C.C_DECODE_RESERVE] = 8
    CI[C.C_RETRACT_STEPS] = 20
    CF = np.zeros(C.NCF)
    CF[C.CF_RATIO_MIN] = 0.098
    CF[C.CF_RATIO_DECAY] = 0.001
    return R, E, EF, W, WT, RUN, np.asarray(prompts, np.int64), np.asarray(mnt, np.int64), CI, CF


def test_retraction_victims_fewest_outputs_then_longest_prompt():
    R, E, EF, W, WT, RUN, prompt, mnt, CI, CF = _state([5, 2, 2], [10, 30, 20], [15, 32, 22],
                                                       free=5, mnt=[100, 300, 200])
    # needs 3 x 8 = 24 free tokens, has 5: retract request 1 (2 outputs, the longer prompt):
    # 5 + 32 = 37 >= 2 x 8 -> stop
    C._update_running(0, 1.0, R, E, EF, W, WT, RUN, prompt, mnt, CI, CF, NO_CACHE)
    assert E[0, C.E_NRUN] == 2 and list(RUN[0, :2]) == [0, 2]
    assert R[1, C.R_STATUS] == C.ST_QUEUED and W[0, 0] == 1 and E[0, C.E_FREE] == 37
    # new ratio over the remaining: (5 + 2 + 20 x 2) / (100 + 200 + 1)
    assert abs(EF[0, C.EF_RATIO] - 47 / 301) < 1e-12


def test_retraction_full_tie_takes_the_latest_and_keeps_one():
    R, E, EF, W, WT, RUN, prompt, mnt, CI, CF = _state([3, 3], [10, 10], [13, 13], free=0,
                                                       mnt=[50, 50])
    C._update_running(0, 1.0, R, E, EF, W, WT, RUN, prompt, mnt, CI, CF, NO_CACHE)
    assert list(RUN[0, :E[0, C.E_NRUN]]) == [0]  # the later of two equals went first
    # one request left: kept even if it did not fit; here 13 free >= 8
    assert abs(EF[0, C.EF_RATIO] - (3 + 20) / 51) < 1e-12


def test_a_last_request_that_still_does_not_fit_is_kept_and_counted():
    """SGLang's retract_decode aborts the last request when it still fails check_decode_mem;
    specsched keeps it and counts it (the run's summary warns)."""
    # two requests, 3 free tokens: each needs 8. Retract request 1 (2 outputs against 3):
    # 3 + 12 = 15 free >= 8 for the one left -> it fits, nothing counted
    R, E, EF, W, WT, RUN, prompt, mnt, CI, CF = _state([3, 2], [10, 10], [13, 12], free=3,
                                                       mnt=[50, 50])
    C._update_running(0, 1.0, R, E, EF, W, WT, RUN, prompt, mnt, CI, CF, NO_CACHE)
    assert list(RUN[0, :E[0, C.E_NRUN]]) == [0] and E[0, C.E_FREE] == 15
    assert E[0, C.E_XKEEP] == 0
    # one request, 7 free tokens: it needs 8, nothing to retract -> kept, counted once
    R, E, EF, W, WT, RUN, prompt, mnt, CI, CF = _state([3], [10], [13], free=7, mnt=[50])
    C._update_running(0, 1.0, R, E, EF, W, WT, RUN, prompt, mnt, CI, CF, NO_CACHE)
    assert E[0, C.E_NRUN] == 1 and E[0, C.E_XKEEP] == 1 and E[0, C.E_FREE] == 7
    # two requests, 0 free: retracting request 1 gives back its 4 pages; 4 < 8 -> counted
    R, E, EF, W, WT, RUN, prompt, mnt, CI, CF = _state([3, 2], [10, 2], [13, 4], free=0,
                                                       mnt=[50, 50])
    C._update_running(0, 1.0, R, E, EF, W, WT, RUN, prompt, mnt, CI, CF, NO_CACHE)
    assert list(RUN[0, :E[0, C.E_NRUN]]) == [0] and E[0, C.E_FREE] == 4
    assert E[0, C.E_XKEEP] == 1


def test_ratio_decays_to_its_minimum_when_nothing_is_retracted():
    R, E, EF, W, WT, RUN, prompt, mnt, CI, CF = _state([3], [10], [13], free=100, mnt=[50])
    EF[0, C.EF_RATIO] = 0.0985
    C._update_running(0, 1.0, R, E, EF, W, WT, RUN, prompt, mnt, CI, CF, NO_CACHE)
    assert EF[0, C.EF_RATIO] == 0.098 and E[0, C.E_NRUN] == 1


# ---------------------------------------------------------------- host time
def test_overlap_hides_host_time_behind_the_gpu():
    E = np.zeros((1, C.NE), np.int64)
    E[0, C.E_NPASS] = 2
    PF = np.zeros((1, C.MAXPASS, C.NPF))
    PF[0, :2, C.PF_LAT] = [1e-3, 2e-3]
    CI = np.zeros(C.NCI, np.int64)
    CF = np.zeros(C.NCF)
    EF = np.zeros((1, C.NEF))  # no draft-count switch this round
    CF[C.CF_OVERHEAD] = 5e-3
    assert abs(C.iteration_time(0, E, EF, PF, CI, CF) - 8e-3) < 1e-15
    CI[C.C_OVERLAP] = 1
    assert C.iteration_time(0, E, EF, PF, CI, CF) == 5e-3
    CF[C.CF_OVERHEAD] = 1e-3
    assert abs(C.iteration_time(0, E, EF, PF, CI, CF) - 3e-3) < 1e-15


# ---------------------------------------------------------------- the simulate command
def test_simulate_with_no_options_is_an_sglang_run_and_split_runs_eagerly(tmp_path):
    """`simulate` on a shipped sample, no options: SGLang's limits and one captured width, a
    draft-extend pass per round; --policy split launches other widths eagerly."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    import pyarrow.parquet as pq

    root = Path(__file__).resolve().parents[2]
    sample = root / "traces" / "samples" / "azure_conv_eagle_2k.parquet"

    def simulate(out, *args):
        proc = subprocess.run([sys.executable, "-m", "specsched", "simulate", "--trace", sample,
                               "--limit", "120", "--no-report", "--out", out, *args],
                              cwd=root, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr
        return json.loads((out / "summary.json").read_text()), pq.read_table(
            out / "steps.parquet").to_pandas()

    summary, steps = simulate(tmp_path / "default")
    engine = summary["config"]["engine"]
    assert engine["max_running"] == 48 and engine["policy"] == "fixed"
    assert engine["num_draft_tokens"] == 4 and summary["controller"]["captured_widths"] == [4]
    verify = steps[steps.kind.astype(str) == "verify"]
    assert set(verify.width) == {4} and verify.graph.all()
    assert summary["draft_extend_passes"] > 0 and summary["what_if"] == []
    summary, steps = simulate(tmp_path / "split", "--policy", "split")
    verify = steps[steps.kind.astype(str) == "verify"]
    assert (~verify.graph[verify.width != 4]).all() and (verify.width != 4).any()
    assert verify.graph[verify.width == 4].all() and summary["what_if"]
