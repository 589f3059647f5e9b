"""The unsafe-derived diagnostic on the MLA path on a real GPU (skipped without one): DeepSeek-
V2-Lite's layer shapes (two layers: dense, MoE), bfloat16, KV lengths in the thousands.

Widths 4, 1, 4, 2 under the fixed width 4 (rows packed at their real widths): rows 0-3
(request 0) and row 4 (request 1, position 0) are read right; rows 5, 6, 7 (request 2) go to
request 1, row 8 (request 2, position 3) to request 2 at position 0, rows 9, 10 (request 3) to
request 2: 5 misattributed rows, 1 misplaced, 5 phantom rows (16 - 11)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

WIDTHS, KV = [4, 1, 4, 2], [4000, 100, 2000, 3000]


@pytest.fixture(scope="module")
def runner():
    import torch

    from tests.aiter.mla_checks import tiny_runner
    from tests.aiter.test_aiter_mla_gpu import V2_LITE_LAYERS

    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return tiny_runner(device="cuda", dtype="bfloat16", sms=int(sms), shape=V2_LITE_LAYERS,
                       max_context=16384, capture_bs=[1, 2, 4], kv_pool_bytes=1 << 30)


def test_fixed_width_error_on_the_misattributed_rows(runner):
    from backends.aiter.mla_uniformity import mla_attention_error

    c = mla_attention_error(runner, WIDTHS, KV, 4, reference=True)
    assert (c["misattributed_rows"], c["misplaced_rows"], c["phantom_rows"]) == (5, 1, 5)
    scale = c["reference_scale"]
    assert c["max_abs_error_exact_vs_reference"] < 3e-2 * max(1.0, scale), c  # exact is right
    err = c["row_error"]
    assert err[:5] == [0.0] * 5                                       # bit-identical rows
    # rows read from another request's KV are far off; row 8 (its own request, 3 keys short
    # of 2,003) differs a little
    assert all(err[i] > 1e-2 * scale for i in (5, 6, 7, 9, 10)), err
    assert err[8] > 0.0, err
    u = mla_attention_error(runner, [4, 4, 4], [4000, 17, 2500], 4)
    assert u["max_abs_error"] == 0.0 and not u["mixed"]


def test_executor_reports_the_error_of_a_replayed_unsafe_verify(runner):
    from backends.aiter.mla_runner import MLAExecutor
    from backends.protocol import VerifyBatch

    ex = MLAExecutor(runner, model=runner.shape, gpu="H200", check_unsafe=True)
    t = ex.verify(VerifyBatch(bs_real=4, bs_padded=4, widths=np.array(WIDTHS),
                              kv_lens=np.array(KV), launch_width=4, mode="unsafe-derived",
                              graph=True))
    assert t.extra["graph"] and t.extra["key"] == ["verify", 4, 4] and t.latency_s > 0
    assert t.misattributed_rows == 5 and t.max_abs_error is not None and t.max_abs_error > 0
    u = ex.verify(VerifyBatch(bs_real=3, bs_padded=4, widths=np.array([4, 4, 4]),
                              kv_lens=np.array([10, 20, 30]), launch_width=4,
                              mode="unsafe-derived", graph=True))
    assert u.misattributed_rows == 0 and u.max_abs_error is None
