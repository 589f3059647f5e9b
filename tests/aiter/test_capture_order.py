"""The live executor captures its graphs at start-up in SGLang's order (backends/aiter/executor.py,
``capture_order``): target verify graphs from the largest batch size down, then the draft graphs,
then the draft-extend graphs, the start-up width's last. Worked out by hand from SGLang's
``EAGLEWorker.init_cuda_graphs`` and ``CudaGraphRunner.capture`` (docs/sglang.md). CPU only."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from backends.aiter.executor import capture_all, capture_order, check_capture
from simulator.config import SimConfig
from traces.errors import SpecschedError


def test_one_width_goes_largest_first_verify_then_draft_then_extend():
    assert capture_order([1, 2, 4], [4], draft=True, num_draft_tokens=4) == [
        ("verify", 4, 4), ("verify", 2, 4), ("verify", 1, 4),
        ("draft", 4), ("draft", 2), ("draft", 1),
        ("extend", 4, 4), ("extend", 2, 4), ("extend", 1, 4)]


def test_several_widths_end_on_the_start_up_width_at_the_smallest_batch():
    # verify at every width; draft-extend at every width of 2 rows or more, num_draft_tokens
    # (4) last, so the last graph captured is the draft-extend of one request at width 4
    assert capture_order([8, 1], [2, 4, 8], draft=True, num_draft_tokens=4) == [
        ("verify", 8, 2), ("verify", 8, 4), ("verify", 8, 8),
        ("verify", 1, 2), ("verify", 1, 4), ("verify", 1, 8),
        ("draft", 8), ("draft", 1),
        ("extend", 8, 2), ("extend", 1, 2), ("extend", 8, 8), ("extend", 1, 8),
        ("extend", 8, 4), ("extend", 1, 4)]
    # width 1 (no drafts) has no draft-extend of its own: it follows as 2 rows
    assert capture_order([2], [1, 4], draft=True, num_draft_tokens=4)[-2:] == [
        ("extend", 2, 2), ("extend", 2, 4)]


def test_no_draft_model_captures_verify_graphs_only():
    assert capture_order([3, 1, 3], [4], draft=False, num_draft_tokens=4) == [
        ("verify", 3, 4), ("verify", 1, 4)]


def test_capture_all_asks_the_runner_in_that_order():
    got = []
    runner = SimpleNamespace(capture_bs=[1, 2], capture_widths=[4], draft=object(),
                             num_draft_tokens=4, capture=got.append)
    capture_all(runner)
    assert got == [("verify", 2, 4), ("verify", 1, 4), ("draft", 2), ("draft", 1),
                   ("extend", 2, 4), ("extend", 1, 4)]


def test_capture_mode_is_checked_and_defaults_to_start_up():
    assert SimConfig.load(None, {}).backend.capture == "all"
    with pytest.raises(SpecschedError, match="backend.capture: must be all or lazy"):
        SimConfig.load(None, {"backend.capture": "eager"})
    assert check_capture("lazy") == "lazy"
    with pytest.raises(SpecschedError, match="capture 'first': choose one of all, lazy"):
        check_capture("first")


def test_simulate_passes_the_capture_mode_to_the_live_executor(monkeypatch):
    import backends

    seen = {}

    def fake(name, **kw):
        seen.update(kw, name=name)
        raise SpecschedError("stop here")
    monkeypatch.setattr(backends, "make_executor", fake)
    from specsched.setup import prepare

    for mode in ("all", "lazy"):
        cfg = SimConfig.load(None, {"backend.name": "aiter", "backend.capture": mode})
        with pytest.raises(SpecschedError, match="stop here"):
            prepare(cfg)
        assert (seen["name"], seen["capture"]) == ("aiter", mode)
