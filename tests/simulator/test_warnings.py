"""Every warning a run prints is true for that run (its model, its backend)."""

from __future__ import annotations

import numpy as np

from simulator.config import SimConfig
from specsched.setup import simulate_to
from tests.simulator.helpers import random_trace


def _warnings(model: str, backend: str) -> list[str]:
    trace = random_trace(np.random.default_rng(3), 6)
    config = SimConfig.load(None, {"model.name": model, "backend.name": backend})
    return simulate_to(trace, config, None).summary["warnings"]


def test_dense_model_on_the_roofline_gets_no_moe_or_profile_warning():
    warnings = _warnings("llama-3.1-8b", "roofline")
    assert any("least accurate backend" in w for w in warnings)  # the roofline's own caveats
    assert not [w for w in warnings if "MoE" in w]
    # the roofline prices attention by the summed KV: no profile, no occupancy to miss
    assert not [w for w in warnings if "attention-kernel occupancy" in w]


def test_moe_model_on_the_roofline_gets_the_moe_warning():
    warnings = _warnings("deepseek-v3", "roofline")
    assert [w for w in warnings if w.startswith("MoE routing assumed uniform")]


def test_profile_with_occupancy_gets_no_occupancy_warning():
    # the shipped 8B profile records the attention kernel's occupancy: the straggler rule runs
    assert not [w for w in _warnings("llama-3.1-8b", "profile")
                if "attention-kernel occupancy" in w]
