"""The prefill grid of a MoE model brackets each fused-MoE tile change (no torch needed)."""

from __future__ import annotations

from backends.aiter.moe import moe_config
from backends.aiter.profiling import prefill_grid


def test_tiles_change_at_256_and_1024_rows():
    assert moe_config(255)["BLOCK_SIZE_M"] == 64
    assert moe_config(256)["BLOCK_SIZE_M"] == 128
    assert moe_config(1023)["BLOCK_SIZE_M"] == 128
    assert moe_config(1024)["BLOCK_SIZE_M"] == 256


def test_a_moe_models_grid_measures_both_sides_of_each_change_inside_its_span():
    # 64..8192 spans both thresholds: 255 and 1023 are added (256 and 1024 are already there)
    assert prefill_grid((64, 256, 1024, 4096, 8192), experts=64) == [
        64, 255, 256, 1023, 1024, 4096, 8192]
    # a grid ending at 512 spans only the first threshold; nothing outside the span is added
    assert prefill_grid((300, 128, 512), experts=64) == [128, 255, 256, 300, 512]
    # a dense model's grid is the one asked for
    assert prefill_grid((64, 256, 1024), experts=0) == [64, 256, 1024]
