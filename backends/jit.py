"""Optional compilation of hot loops with numba.

``njit`` compiles a function with numba when numba imports (and ``SPECSCHED_NO_JIT`` is not
set); otherwise it returns the function unchanged, so the same source runs as plain Python.
Functions written for it must therefore stay inside the subset of Python and NumPy that numba
compiles (scalars, NumPy arrays, loops; no Python objects), and must give the same results
compiled or not: integer arithmetic that could overflow 64 bits is masked explicitly.

Compiled functions are cached on disk (``cache=True``).  Numba checks a cached function against
its own source file only, so a compiled caller would keep an old copy of a function it calls from
another module (``simulator.core`` inlines ``backends.attention_kv.effective_kv``) after that
module changed.  The cache therefore lives in a folder named after a digest of every source file
of ``simulator`` and ``backends`` (under ``$XDG_CACHE_HOME/specsched`` or ``~/.cache/specsched``):
any change there compiles afresh.  ``NUMBA_CACHE_DIR``, when set, is left to the user.  Each
folder holds 10-25 MB, so a run that starts a new one removes the folders of older sources
beyond the :data:`KEEP_CACHES` used most recently (a folder's time is refreshed each time a
process uses it); a run from another checkout that loses its folder compiles again.

Compiled functions run without numba's reference counting (``_nrt=False``) unless they allocate
arrays (``@njit(_nrt=True)``: the engine's ``advance``, the radix cache's compaction).  With
it, every call between compiled functions increments and decrements the count of each array it
passes, each an atomic instruction; the engine's per-iteration helpers pass 10-30 arrays each,
so on the 19,366-request Azure trace these counts took half of the engine's time (perf: 31% of
the whole command's samples in ``NRT_incref``/``NRT_decref``).  Without them the simulation
proper went from 2.03 to 1.00 s on one core, with byte-identical results.  A function compiled
so cannot create arrays (numba refuses to compile it), and arrays it reads belong to its caller.

Compilation is the slow part of a first run, so numba optimises at level 1 without loop or SLP
vectorisation unless ``NUMBA_OPT`` / ``NUMBA_LOOP_VECTORIZE`` / ``NUMBA_SLP_VECTORIZE`` say
otherwise: the engine's branchy scalar loops run as fast as at numba's default level 3 (1.42-1.61
s of CPU for the 19,366-request Azure trace, against 1.48-1.69 s) and the core compiles in
11.1 s of CPU instead of 12.9 s (2-core development machine).  The first time a process compiles one
of specsched's functions (a cold cache: numba reports compilations, not cache loads), one line
on stderr says so, since nothing else moves meanwhile.
"""

from __future__ import annotations

import hashlib
import os
import sys
import warnings
from pathlib import Path

__all__ = ["njit", "JIT_ENABLED", "jit_status", "precompile", "COMPILE_NOTICE", "KEEP_CACHES",
           "prune_caches"]

#: cache folders of other sources kept beside the current one (the most recently used)
KEEP_CACHES = 3

#: printed on stderr before the first compilation of specsched's code in a process
COMPILE_NOTICE = ("specsched: compiling the engine with numba, once per install (10-40 s); "
                  "later runs load it from the cache")

_reason = ""
if os.environ.get("SPECSCHED_NO_JIT", "") not in ("", "0"):
    _numba = None
    _reason = "disabled by SPECSCHED_NO_JIT"
else:
    if "numba" not in sys.modules:  # numba reads these when imported; a user's own setting wins
        for _key, _value in (("NUMBA_OPT", "1"), ("NUMBA_LOOP_VECTORIZE", "0"),
                             ("NUMBA_SLP_VECTORIZE", "0")):
            os.environ.setdefault(_key, _value)
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


def prune_caches(current: Path, keep: int = KEEP_CACHES) -> list[Path]:
    """Remove the ``numba-<digest>`` folders beside ``current`` but the ``keep`` used most
    recently (by modification time; ``current`` is never removed, nor anything else in the
    folder); return those removed.  Errors (another process removing the same folder, no
    permission) are ignored: the cache only saves time."""
    import re
    import shutil

    pat = re.compile(r"^numba-[0-9a-f]{16}$")
    try:
        others = [d for d in current.parent.iterdir()
                  if d.is_dir() and pat.match(d.name) and d.name != current.name]
        others.sort(key=lambda d: d.stat().st_mtime, reverse=True)
    except OSError:
        return []
    gone = others[keep:]
    for d in gone:
        shutil.rmtree(d, ignore_errors=True)
    return gone


def _use_cache(folder: Path) -> None:
    """Point numba at ``folder``; a new folder prunes the stale ones, a used one is marked
    used now."""
    _numba.config.CACHE_DIR = str(folder)
    try:
        if folder.is_dir():
            os.utime(folder)
        else:
            folder.mkdir(parents=True, exist_ok=True)
            prune_caches(folder)
    except OSError:
        pass


if JIT_ENABLED and not os.environ.get("NUMBA_CACHE_DIR"):
    _use_cache(_cache_dir())

_PACKAGES = ("simulator", "backends")
_announced = False


def _announce(event) -> None:
    """numba's ``numba:compile`` start event: say once that the engine compiles."""
    global _announced
    fn = getattr(event.data.get("dispatcher"), "py_func", None)
    module = getattr(fn, "__module__", "") or ""
    if _announced or module.split(".")[0] not in _PACKAGES:
        return
    _announced = True
    print(COMPILE_NOTICE, file=sys.stderr, flush=True)


if JIT_ENABLED:
    from numba.core import event as _event

    class _CompileNotice(_event.Listener):
        def on_start(self, event) -> None:
            _announce(event)

        def on_end(self, event) -> None:
            pass

    _event.register("numba:compile", _CompileNotice())


def precompile(fn, *args) -> None:
    """Compile (or load from the cache) ``fn`` for the types of ``args`` without calling it."""
    if JIT_ENABLED:
        fn.compile(tuple(_numba.typeof(a) for a in args))


def njit(fn=None, **kwargs):
    """``numba.njit(cache=True, nogil=True, _nrt=False, ...)`` when numba is available, else
    the identity; a function that allocates arrays passes ``_nrt=True``."""
    def wrap(f):
        if _numba is None:
            return f
        opts = {"cache": True, "nogil": True, "_nrt": False}
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
