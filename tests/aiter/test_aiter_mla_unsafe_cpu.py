"""The unsafe-derived diagnostic on the MLA path (backends/aiter/mla_uniformity.py) under the
Triton interpreter: a tiny MLA model (tests/aiter/mla_checks.py), float16 on the CPU.

The MLA metadata gives every request the fixed width W; rows packed at their real widths are
attributed to request ``r // W`` at position ``r % W``.  Each case's wrong rows are worked out by
hand below; the rows the fixed metadata gets right must come out bit-identical to the exact
launch (same kernel, keys and KV splits)."""

from __future__ import annotations

import json

from tests.aiter.conftest import INTERPRETED_MARKS, run_interpreted

pytestmark = INTERPRETED_MARKS


def _run(body: str) -> dict:
    out = run_interpreted("import json\nfrom tests.aiter.mla_checks import *\n" + body)
    return json.loads(out.strip().splitlines()[-1])


def test_fixed_width_errors_land_on_the_misattributed_rows_only():
    d = _run("""
from backends.aiter.mla_uniformity import mla_attention_error
r = tiny_runner()
res = {'uniform': mla_attention_error(r, [4, 4], [9, 30], 4, reference=True),
       'mixed': mla_attention_error(r, [4, 2, 4], [5, 9, 3], 4, reference=True),
       'fewer': mla_attention_error(r, [2, 2], [7, 12], 4),
       'w3': mla_attention_error(r, [3, 2], [6, 11], 3)}
print(json.dumps(res))
""")
    u, m, f, w3 = d["uniform"], d["mixed"], d["fewer"], d["w3"]
    # every request at the fixed width: the two launches are the same launch
    assert not u["mixed"] and u["max_abs_error"] == 0.0 and u["misattributed_rows"] == 0
    assert u["max_abs_error_exact_vs_reference"] < 1e-2 * max(1.0, u["reference_scale"]), u
    # widths 4, 2, 4 at W = 4: rows 0-3 request 0 and rows 4-5 request 1 (positions 0, 1) are
    # right; rows 6, 7 (request 2, positions 0, 1) go to request 1 at positions 2, 3
    # (misattributed); rows 8, 9 (request 2, positions 2, 3) go to request 2 at 0, 1 (misplaced)
    assert (m["misattributed_rows"], m["misplaced_rows"], m["phantom_rows"]) == (2, 2, 2)
    assert m["row_error"][:6] == [0.0] * 6
    assert all(e > 1e-3 for e in m["row_error"][6:]), m["row_error"]
    assert m["max_abs_error"] == max(m["row_error"])
    assert m["max_abs_error_exact_vs_reference"] < 1e-2 * max(1.0, m["reference_scale"]), m
    # every request proposed one draft (width 2) under W = 4: request 1's rows 2, 3 are read as
    # request 0's positions 2, 3 -- request 0's own rows are right
    assert f["misattributed_rows"] == 2 and f["row_error"][:2] == [0.0, 0.0]
    assert all(e > 1e-3 for e in f["row_error"][2:])
    # W = 3 (SGLang's metadata; the launch runs as 4): widths 3, 2 put every row at its own
    # request and position -- only request 1's KV extent differs, which its rows do not reach
    assert w3["misattributed_rows"] == 0 and w3["misplaced_rows"] == 0
    assert w3["mixed"] and w3["max_abs_error"] == 0.0


def test_mla_executor_reports_the_error_of_an_unsafe_derived_verify():
    d = _run("""
import numpy as np
from backends.aiter.mla_runner import MLAExecutor
from backends.protocol import VerifyBatch
r = tiny_runner()
res = {}
for check in (False, True):
    ex = MLAExecutor(r, model=r.shape, gpu='H200', check_unsafe=check)
    mixed = ex.verify(VerifyBatch(bs_real=3, bs_padded=3, widths=np.array([4, 2, 4]),
                                  kv_lens=np.array([5, 9, 3]), launch_width=4,
                                  mode='unsafe-derived', graph=False))
    same = ex.verify(VerifyBatch(bs_real=2, bs_padded=2, widths=np.array([4, 4]),
                                 kv_lens=np.array([9, 30]), launch_width=4,
                                 mode='unsafe-derived', graph=False))
    res[str(check)] = [mixed.misattributed_rows, mixed.max_abs_error, mixed.extra['key'],
                       same.misattributed_rows, same.max_abs_error]
print(json.dumps(res))
""")
    mis, err, key, mis_u, err_u = d["True"]
    assert mis == 2 and err is not None and err > 1e-3 and key == ["verify", 3, 4]
    assert mis_u == 0 and err_u is None                 # a uniform batch: nothing to measure
    assert d["False"][0] == 2 and d["False"][1] is None  # counted always, measured on request
