"""GPU sheets: complete, sourced, and datasheet kept apart from measured figures."""

import pytest

from backends.hardware import GPUS, get_gpu
from traces.errors import SpecschedError

DATASHEET = ("memory_bytes", "hbm_bw", "bf16_flops", "fp8_flops", "l2_bytes", "link_bw")


@pytest.mark.parametrize("name", ["H200", "H100", "MI300X", "MI355X"])
def test_every_datasheet_value_has_a_source(name):
    g = GPUS[name]
    for f in DATASHEET:
        assert getattr(g, f) > 0
        assert f in g.sources and g.sources[f], f"{name}.{f} has no source"
    assert 0 < g.achievable_bw_frac <= 1 and 0 < g.achievable_flops_frac <= 1
    assert g.achievable_bw < g.hbm_bw and g.achievable_bf16_flops < g.bf16_flops
    assert g.fp8_flops == pytest.approx(2 * g.bf16_flops, rel=0.01)
    assert g.achievable_basis


def test_h200_measured_ceilings_are_separate_and_justify_the_fractions():
    g = GPUS["H200"]
    copy = g.measured["copy_bw_read_plus_write"]["value"]
    mm = g.measured["bf16_matmul_flops"]["value"]
    assert copy == 4.3e12 and mm == 788e12
    assert g.hbm_bw == 4.8e12 and g.bf16_flops == 989.4e12  # datasheet untouched
    assert g.achievable_bw_frac == pytest.approx(copy / g.hbm_bw, abs=0.01)
    assert g.achievable_flops_frac == pytest.approx(mm / g.bf16_flops, abs=0.01)
    for name in ("H100", "MI300X", "MI355X"):
        assert not GPUS[name].measured  # nothing measured there: no invented figures
    assert "Not measured" in GPUS["MI300X"].achievable_basis


def test_h200_has_more_bandwidth_than_h100_and_same_compute():
    assert GPUS["H200"].hbm_bw > GPUS["H100"].hbm_bw
    assert GPUS["H200"].bf16_flops == GPUS["H100"].bf16_flops
    assert GPUS["MI355X"].bf16_flops > GPUS["MI300X"].bf16_flops


def test_get_gpu():
    assert get_gpu("h200") is GPUS["H200"]
    assert get_gpu(GPUS["MI300X"]) is GPUS["MI300X"]
    with pytest.raises(SpecschedError, match="known: H200, H100, MI300X, MI355X"):
        get_gpu("A100")
