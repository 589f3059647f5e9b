"""Optional compilation of hot loops with numba.

``njit`` compiles a function with numba when numba imports (and ``SPECSCHED_NO_JIT`` is not
set); otherwise it returns the function unchanged, so the same source runs as plain Python.
Functions written for it must therefore stay inside the subset of Python and NumPy that numba
compiles (scalars, NumPy arrays, loops; no Python objects), and must give the same results
compiled or not: integer arithmetic that could overflow 64 bits is masked explicitly.

Compiled functions are cached on disk (``cache=True``).  Numba checks a cached function against
its own source file only, so a compiled caller would keep an old copy of a function it calls from
another module (``simulator.core`` inlines ``backends.latency_table.effective_kv``) after that
module changed.  The cache therefore lives in a folder named after a digest of every source file
of ``simulator`` and ``backends`` (under ``$XDG_CACHE_HOME/specsched`` or ``~/.cache/specsched``):
any change there compiles afresh.  ``NUMBA_CACHE_DIR``, when set, is left to the user.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path

__all__ = ["njit", "JIT_ENABLED", "jit_status"]

_reason = ""
if os.environ.get("SPECSCHED_NO_JIT", "") not in ("", "0"):
    _numba = None
    _reason = "disabled by SPECSCHED_NO_JIT"
else:
    try:
        import numba as _numba
    except Exception as exc:  # ImportError, or numba refusing this NumPy version
        _numba = None
        _reason = f"numba unavailable ({type(exc).__name__}: {exc})"

JIT_ENABLED = _numba is not None


def _source_digest(root: Path | None = None) -> str:
    """A digest of the source files whose compiled functions may call one another."""
    root = Path(__file__).resolve().parents[1] if root is None else root
    h = hashlib.sha256()
    for pkg in ("simulator", "backends"):
        for f in sorted((root / pkg).rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "specsched" / f"numba-{_source_digest()}"


if JIT_ENABLED and not os.environ.get("NUMBA_CACHE_DIR"):
    _numba.config.CACHE_DIR = str(_cache_dir())


def njit(fn=None, **kwargs):
    """``numba.njit(cache=True, ...)`` when numba is available, else the identity."""
    def wrap(f):
        if _numba is None:
            return f
        opts = {"cache": True, "nogil": True}
        opts.update(kwargs)
        return _numba.njit(**opts)(f)

    return wrap(fn) if fn is not None else wrap


def jit_status() -> str:
    """One line for logs and summaries: whether hot loops are compiled, and why not."""
    if JIT_ENABLED:
        return f"numba {_numba.__version__}"
    return f"pure Python ({_reason})"


if not JIT_ENABLED and _reason.startswith("numba unavailable"):
    warnings.warn(f"specsched: {_reason}; hot loops run as plain Python (slower, same results)",
                  RuntimeWarning, stacklevel=2)
