"""The prefill grid of a MoE model brackets each fused-MoE tile change and reaches down to one
token (no torch needed)."""

from __future__ import annotations

from backends.aiter.moe import moe_config
from backends.aiter.profiling import prefill_grid


def test_tiles_change_at_256_and_1024_rows():
    assert moe_config(255)["BLOCK_SIZE_M"] == 64
    assert moe_config(256)["BLOCK_SIZE_M"] == 128
    assert moe_config(1023)["BLOCK_SIZE_M"] == 128
    assert moe_config(1024)["BLOCK_SIZE_M"] == 256


def test_a_moe_models_grid_measures_both_sides_of_each_change_inside_its_span():
    # 64..8192 spans both thresholds: 255 and 1023 are added (256 and 1024 are already there),
    # and 1, 2, 4, ..., 32 below 64, where the experts a prefill reads grow with its tokens
    assert prefill_grid((64, 256, 1024, 4096, 8192), experts=64) == [
        1, 2, 4, 8, 16, 32, 64, 255, 256, 1023, 1024, 4096, 8192]
    # a grid ending at 512 spans only the first threshold; nothing above the span is added
    assert prefill_grid((300, 128, 512), experts=64) == [
        1, 2, 4, 8, 16, 32, 64, 128, 255, 256, 300, 512]
    # a smallest point that is not a power of two keeps the powers below it
    assert prefill_grid((48, 96), experts=8) == [1, 2, 4, 8, 16, 32, 48, 96]
    assert prefill_grid((1, 64), experts=8) == [1, 64]
    # a dense model's grid is the one asked for
    assert prefill_grid((64, 256, 1024), experts=0) == [64, 256, 1024]


def test_fp8_weights_take_aiters_fp8_table_which_keeps_one_tile_from_256_rows():
    # AITER's MI300X-MOE-FP8_W8A8.json: 64 x 64 x 128 below 256 rows, 128 x 128 x 128 from 256 on
    # (its large-M entry is the medium one), so no second tile change at 1024 with FP8 weights
    small, medium, large = (moe_config(t, fp8=True) for t in (255, 256, 1024))
    assert (small["BLOCK_SIZE_M"], small["BLOCK_SIZE_N"], small["BLOCK_SIZE_K"]) == (64, 64, 128)
    assert (medium["BLOCK_SIZE_M"], medium["BLOCK_SIZE_K"], medium["GROUP_SIZE_M"]) == (128, 128, 1)
    assert large == medium
    # the bf16 table is unchanged: 256 x 256 x 64 from 1024 rows
    assert moe_config(1024)["BLOCK_SIZE_K"] == 64


def test_the_tables_are_aiters_files_without_the_amd_only_keys():
    import importlib.util
    import json
    from pathlib import Path

    import pytest

    spec = importlib.util.find_spec("aiter")   # located, not imported (that needs a GPU stack)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("amd-aiter is not installed")
    base = Path(list(spec.submodule_search_locations)[0]) / "ops" / "triton" / "configs" / "moe"
    amd_only = {"waves_per_eu", "matrix_instr_nonkdim", "kpack"}
    for name, fp8 in (("MI300X-MOE-DEFAULT.json", False), ("MI300X-MOE-FP8_W8A8.json", True)):
        table = json.loads((base / name).read_text())
        for key, rows in (("small_M", 1), ("medium_M", 300), ("large_M", 2048)):
            want = {k: v for k, v in table[key].items() if k not in amd_only}
            assert moe_config(rows, fp8=fp8) == want, (name, key)
