"""Load AITER's kernels on whatever GPU is at hand.

On ROCm this is plain ``import aiter``: the package starts its HIP/CK machinery and every
kernel (native and Triton) is available.

Elsewhere (NVIDIA GPUs, or the Triton interpreter on a CPU) the package's ``__init__`` must not
run -- it looks for a ROCm installation and fails -- but AITER's Triton kernels under
``aiter/ops/triton/`` are plain Triton and run once two AMD-only assumptions are bridged
(measured on an H200, see docs/aiter.md):

1. ``aiter.ops.triton.utils._triton.arch_info.get_arch()`` returns the GPU's architecture as an
   int on CUDA (and fails under the interpreter), while ``utils/types.py`` compares it with
   strings at import time.  The bridge makes it return a string (``"sm90"``, ``"interpreter"``)
   that matches no AMD architecture, so every AMD-only branch stays off.
2. Kernel launches pass AMD-only launch options (``waves_per_eu``, ``matrix_instr_nonkdim``,
   ``kpack``), which Triton's CUDA backend rejects.  The bridge drops exactly those keywords,
   and only for kernels defined in ``aiter.*`` modules.

The package is entered through two empty package modules (``aiter``, ``aiter.ops``) whose
``__path__`` points at the installed ``aiter`` folder, so ``aiter.ops.triton.*`` imports as
usual and the top-level ``__init__`` never runs.

Under the Triton interpreter (``TRITON_INTERPRET=1``, CPU tensors) the kernels run on the CPU for
tests; ``get_num_sms()`` then reports an H200's 132 multiprocessors so that the kernels' launch
configuration is the one the GPU would use.  bfloat16 is not usable under the interpreter
(Triton 3.9 mis-handles it); tests there use float16 or float32.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["AMD_ONLY_LAUNCH_KEYS", "Kernels", "runtime", "gpu_problem", "require_gpu",
           "load_kernels", "versions", "INTERPRETER_NUM_SMS"]

#: Launch options that only AMD's Triton backend understands.
AMD_ONLY_LAUNCH_KEYS = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")

#: Multiprocessor count reported under the Triton interpreter (an H200 has 132).
INTERPRETER_NUM_SMS = 132

_state: dict[str, Any] = {}


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "") not in ("", "0")


def runtime() -> str:
    """``"rocm"``, ``"cuda"``, ``"interpreter"`` (Triton on the CPU) or ``"none"``."""
    if _interpreting():
        return "interpreter"
    problem = gpu_problem()
    if problem is not None:
        return "none"
    import torch

    return "rocm" if getattr(torch.version, "hip", None) else "cuda"


def gpu_problem() -> str | None:
    """Why no usable GPU is present (``None`` when one is)."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any import failure means no GPU stack
        return f"torch is not importable ({type(exc).__name__}: {exc})"
    try:
        if not torch.cuda.is_available():
            build = "ROCm" if getattr(torch.version, "hip", None) else (
                f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only")
            return f"torch {torch.__version__} ({build} build) sees no GPU"
    except Exception as exc:  # noqa: BLE001
        return f"torch cannot query the GPU ({type(exc).__name__}: {exc})"
    return None


def require_gpu() -> None:
    """Raise :class:`~traces.errors.SpecschedError` at once when no CUDA/ROCm GPU is usable."""
    from traces.errors import SpecschedError

    problem = gpu_problem()
    if problem is not None:
        raise SpecschedError(f"the aiter backend needs a CUDA or ROCm GPU: {problem}")


def _aiter_root() -> str:
    from traces.errors import SpecschedError

    mod = sys.modules.get("aiter")
    if mod is not None and getattr(mod, "__path__", None):
        return list(mod.__path__)[0]
    spec = importlib.util.find_spec("aiter")
    if spec is None or not spec.submodule_search_locations:
        raise SpecschedError(
            "the aiter backend needs the AITER package (pip install amd-aiter); it is not installed")
    return list(spec.submodule_search_locations)[0]


def _stub_package(name: str, path: str) -> None:
    mod = types.ModuleType(name)
    mod.__path__ = [path]
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [path]
    mod.__spec__ = spec
    mod.__file__ = None
    mod.__specsched_bridge__ = True  # marks the stub: the real __init__ did not run
    sys.modules[name] = mod


def _patch_launches() -> None:
    """Drop AMD-only launch keywords from launches of kernels defined in ``aiter.*``."""
    from triton.runtime import jit

    cls = jit.JITFunction
    if getattr(cls.run, "__specsched_bridge__", False):
        return
    original = cls.run

    def run(self, *args, **kwargs):
        module = getattr(self, "module", None) or getattr(getattr(self, "fn", None), "__module__", "")
        if module and module.startswith("aiter."):
            for key in AMD_ONLY_LAUNCH_KEYS:
                kwargs.pop(key, None)
        return original(self, *args, **kwargs)

    run.__specsched_bridge__ = True
    run.__wrapped__ = original
    cls.run = run


def _prepare_package(rt: str) -> None:
    if _state.get("prepared"):
        return
    if rt == "rocm":
        importlib.import_module("aiter")  # the real package and its native kernels
        _state["prepared"] = True
        return
    root = _aiter_root()
    if "aiter" not in sys.modules:
        _stub_package("aiter", root)
    if "aiter.ops" not in sys.modules:
        _stub_package("aiter.ops", os.path.join(root, "ops"))
    arch_info = importlib.import_module("aiter.ops.triton.utils._triton.arch_info")
    if rt == "interpreter":
        arch = "interpreter"
    else:
        import torch

        major, minor = torch.cuda.get_device_capability()
        arch = f"sm{major}{minor}"
    arch_info.get_arch = lambda: arch
    if rt == "interpreter":
        device_info = importlib.import_module("aiter.ops.triton.utils.device_info")
        device_info.get_num_sms = lambda: INTERPRETER_NUM_SMS
    else:
        _patch_launches()
    _state["prepared"] = True
    _state["arch"] = arch


@dataclass(frozen=True)
class Kernels:
    """AITER's kernels, as loaded for this runtime.

    ``unified_attention``: paged attention with per-request query lengths (SGLang's AITER
    backend uses it for non-MLA target verify, decode and draft extend).
    ``rms_norm`` / ``rmsnorm_add``: RMSNorm, and residual add + RMSNorm in one pass.
    ``rope_and_cache``: rotary embedding of q and k plus the paged KV write, in one kernel.
    ``mla_decode``: AITER's Triton MLA decode (absorbed latent attention; ``None`` if absent).
    """

    runtime: str
    arch: str
    unified_attention: Callable[..., Any]
    rms_norm: Callable[..., Any]
    rmsnorm_add: Callable[..., Any]
    rope_and_cache: Callable[..., Any]
    mla_decode: Callable[..., Any] | None
    modules: dict[str, str]


def load_kernels() -> Kernels:
    """Import AITER's kernels once (bridged where needed) and return them."""
    if "kernels" in _state:
        return _state["kernels"]
    rt = runtime()
    if rt == "none":
        require_gpu()
    _prepare_package(rt)
    ua = importlib.import_module("aiter.ops.triton.unified_attention")
    rms = importlib.import_module("aiter.ops.triton.rmsnorm")
    kv = importlib.import_module("aiter.ops.triton.fused_kv_cache")
    try:
        mla = importlib.import_module("aiter.ops.triton.mla_decode_rope")
        mla_fn = mla.decode_attention_fwd_grouped_rope
    except Exception:  # noqa: BLE001 - optional kernel
        mla_fn = None
    k = Kernels(
        runtime=rt,
        arch=_state.get("arch", "rocm"),
        unified_attention=ua.unified_attention,
        rms_norm=rms.rms_norm,
        rmsnorm_add=rms.rmsnorm2d_fwd_with_add,
        rope_and_cache=kv.fused_qk_rope_reshape_and_cache,
        mla_decode=mla_fn,
        modules={
            "attention": "aiter.ops.triton.unified_attention.unified_attention",
            "rmsnorm": "aiter.ops.triton.rmsnorm.rms_norm / rmsnorm2d_fwd_with_add",
            "rope_kv_write": "aiter.ops.triton.fused_kv_cache.fused_qk_rope_reshape_and_cache",
            "mla_decode": "aiter.ops.triton.mla_decode_rope.decode_attention_fwd_grouped_rope",
        },
    )
    _state["kernels"] = k
    return k


def versions() -> dict[str, str]:
    """Versions of the GPU stack, for profile metadata and ``describe()``."""
    out: dict[str, str] = {}
    try:
        import torch

        out["torch"] = torch.__version__
        out["cuda"] = str(torch.version.cuda) if torch.version.cuda else ""
        out["hip"] = str(getattr(torch.version, "hip", "") or "")
    except Exception:  # noqa: BLE001
        pass
    try:
        import triton

        out["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        pass
    try:
        from importlib.metadata import version

        out["aiter"] = version("amd-aiter")
    except Exception:  # noqa: BLE001
        out["aiter"] = "unknown"
    out["bridge"] = "native (import aiter)" if _state.get("arch") == "rocm" else (
        "triton kernels via specsched bridge" if _state.get("prepared") else "not loaded")
    return out
