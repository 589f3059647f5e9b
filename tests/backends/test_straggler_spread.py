"""``benchmarks/straggler_spread.py``: live batches' KV lists rebuilt from a run's tables, and
the processor-sharing form of the one-wave straggler rule."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from backends_helpers import benchmark_script

from backends.attention_kv import attention_params

#: H200-like grid constants, Llama-3.1-8B heads (as tests/simulator/test_effective_kv.py)
ATT = attention_params({"sms": 132, "kv_heads": 8, "block_q": 4, "target_programs": 528,
                        "min_segments": 16, "max_segments": 128,
                        "slots_per_sm": {"2d": 8, "2d_decode": 6, "3d": 8}})


def _mod():
    return benchmark_script("straggler_spread")


def test_one_straggler_alone_runs_at_its_tail_speed():
    # 3 requests x width 6 (18 rows): 16 segments, 2 query blocks x 8 heads x 16 = 256 programs
    # each, 768 <= 1,023 slots (31/32 of 1,056): one wave at 768 / 132 programs per SM. All
    # three run to 1,000; then the straggler alone, 256 / 132 per SM: f = (256 / 768) ** 0.4 =
    # 0.6444, so 1000 + 4000 x 0.6444 = 3577.6
    kv = _mod().shared_kv([1000, 1000, 5000], 3.0, 18.0, ATT, 0.4)
    assert kv == pytest.approx(1000 + 4000 * (1 / 3) ** 0.4) and kv == pytest.approx(3577.6, abs=0.1)


def test_a_spread_batch_slows_as_its_requests_finish():
    # sorted 1000, 2000, 5000 at exponent 0.5: two left run at (512 / 768) ** 0.5 = 0.8165,
    # one at (256 / 768) ** 0.5 = 0.5774: 1000 + 816.5 + 3000 x 0.5774 = 3548.5
    kv = _mod().shared_kv([2000, 1000, 5000], 3.0, 18.0, ATT, 0.5)
    assert kv == pytest.approx(3548.5, abs=0.1)
    # a uniform batch is its own length; two waves are not its case: 4 x 256 = 1,024 programs
    # are one more than a wave holds
    assert _mod().shared_kv([2000] * 3, 3.0, 18.0, ATT, 0.5) == pytest.approx(2000)
    assert _mod().shared_kv([1000] * 3 + [5000], 4.0, 24.0, ATT, 0.5) is None
    assert _mod().shared_kv([1000] * 4 + [5000], 5.0, 30.0, ATT, 0.5) is None


def test_batches_are_rebuilt_from_the_commits_of_each_iteration(tmp_path):
    # request 0 (prompt 100) and 1 (prompt 200) each commit a first token at their prefill; in
    # iteration 2 their KV is prompt + committed - 1 = 100 and 200; they commit 6 and 4 at its
    # draft-extend's end, so in iteration 3 they are at 106 and 204
    pq.write_table(pa.table({"request_id": ["0", "1"], "prompt_tokens": [100, 200]}),
                   tmp_path / "requests.parquet")
    rows = []  # (iteration, kind, start, latency, bs, kv_mean, kv_max)
    t = 0.0
    for it, kind, lat in ((0, "prefill", 0.2), (1, "prefill", 0.3)):
        rows.append((it, kind, t, lat, 1, 0.0, 0)); t += lat
    commits = [(0, rows[0][2] + rows[0][3], 1), (1, rows[1][2] + rows[1][3], 1)]
    for it, (m, mx), toks in ((2, (150.0, 200), (6, 4)), (3, (155.0, 204), (2, 2))):
        for kind, lat in (("draft", 0.001), ("verify", 0.01), ("draft_extend", 0.0003)):
            rows.append((it, kind, t, lat, 2, m, mx)); t += lat
        end = rows[-1][2] + rows[-1][3]
        commits += [(0, end, toks[0]), (1, end, toks[1])]
    rows[-2] = rows[-2][:6] + (999,)  # iteration 3's verify recorded another longest KV
    cols = list(zip(*rows))
    pq.write_table(pa.table({"iteration": cols[0], "kind": cols[1], "start_s": cols[2],
                             "latency_s": cols[3], "bs": cols[4], "kv_mean": cols[5],
                             "kv_max": cols[6]}), tmp_path / "steps.parquet")
    c = list(zip(*commits))
    pq.write_table(pa.table({"request": pa.array(c[0], pa.int32()), "time_s": c[1],
                             "tokens": pa.array(c[2], pa.int16())}),
                   tmp_path / "request_steps.parquet")
    kvs = _mod().batch_kvs(tmp_path)
    assert kvs[:2] == [None, None]  # prefills
    assert kvs[2:5] == [[100.0, 200.0]] * 3
    assert kvs[5] == [106.0, 204.0] and kvs[6] is None and kvs[7] == [106.0, 204.0]
    assert np.mean(kvs[5]) == 155.0
