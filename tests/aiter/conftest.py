"""GPU tests (``@pytest.mark.gpu``) skip with the reason when no CUDA/ROCm GPU is usable; tests
that run AITER's Triton kernels on the CPU use the Triton interpreter in a subprocess."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: the marks of a module whose tests run AITER's Triton kernels under the interpreter
INTERPRETED_MARKS = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                       reason="needs Triton (its interpreter runs AITER's kernels on the CPU)"),
    pytest.mark.skipif(importlib.util.find_spec("aiter") is None,
                       reason="needs the amd-aiter package (pip install amd-aiter)"),
]


def _gpu_problem() -> str | None:
    from backends.aiter import bridge

    return bridge.gpu_problem()


def pytest_collection_modifyitems(config, items):
    problem = None
    checked = False
    for item in items:
        if "gpu" in item.keywords:
            if not checked:
                problem = _gpu_problem()
                checked = True
            if problem is not None:
                item.add_marker(pytest.mark.skip(reason=f"needs a CUDA or ROCm GPU: {problem}"))


def run_interpreted(code: str, timeout: float = 900) -> str:
    """Run ``code`` in a fresh Python with the Triton interpreter on (AITER's kernels on the CPU);
    return its stdout, failing the test with its output when it fails."""
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=timeout)
    if res.returncode != 0:
        pytest.fail(f"interpreted run failed (rc {res.returncode}):\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}")
    return res.stdout


#: Python source defining ``m``, a one-layer model, and ``spec``, a tiny profile grid over it
#: (batch sizes 1 and 3, width 1, KV 16 and 64, prefill 8 and 16 tokens; one repetition each)
TINY_PROFILE = """
m = ModelShape(name='tiny', layers=1, hidden=64, heads=4, kv_heads=2, head_dim=32,
               intermediate=128, vocab=96)
spec = ProfileSpec(bs=(1, 3), widths=(1,), kv=(16, 64), eager_bs=(1, 3), eager_widths=(1,),
                   eager_kv=(16, 64), extend_widths=(2,), extend_eager_widths=(1,),
                   prefill_tokens=(8, 16), prefill_prefix=(0,), reps=1, warmup=0, eager_reps=1,
                   settle_s=0.0)
"""


def cpu_profiler_prelude(capture_bs: str) -> str:
    """Python source that lets ``run_profile`` run on a CPU under :func:`run_interpreted`: no GPU
    check, a tiny float16 runner capturing ``capture_bs`` (a list literal), and graph launches
    replaced by eager ones (a CPU has no graphs)."""
    return f"""
bridge.require_gpu = lambda: None
def make(model, **kw):
    r = Runner(model, device='cpu', dtype='float16', max_context=512, capture_bs={capture_bs},
               kv_pool_bytes=8 << 20, extend_logits='last')
    return executor.AiterExecutor(r, model=model, gpu='H200')
executor.make_executor = make
Runner.capture = lambda self, key: None
eager_run = Runner.run
Runner.run = lambda self, key, launch, graph, **kw: eager_run(self, key, launch, graph=False, **kw)
"""


@pytest.fixture
def interpreted():
    return run_interpreted
