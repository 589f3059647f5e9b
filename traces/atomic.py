"""Write results so that a failed run leaves nothing half-written and no user file is ever lost.

Outputs are written into a temporary sibling (same folder, so the final rename stays on one
file system) and renamed into place only when everything succeeded.  On any exception (an
interrupt included) the temporary is removed and the destination is left as it was.

What an output may replace (the one rule every command follows, checked before anything is
written and again just before the rename):

- **A folder** (:func:`atomic_output_dir`) replaces an existing folder only when that folder is
  empty or holds nothing but what specsched wrote: folders carry a small marker file
  (:data:`MARKER`, ``.specsched``: tool, command, version and the names written), and folders
  written before the marker existed are recognised by their own files (a ``summary.json`` with
  the engine's keys, a sweep's ``manifest.json``, ...).  Anything else is refused.  The current
  folder, a folder holding it, and a folder holding an input of the command are refused too.
- **A file** (:func:`atomic_output_file`) never replaces one of the command's inputs or a
  folder; with ``kind`` (``"parquet"``, ``"html"``), it replaces an existing file only when
  that file is one specsched wrote of that kind (a parquet with ``specsched.*`` metadata, an
  HTML report of specsched), so ``-o`` never overwrites a CSV, a notes file or someone else's
  data set by a slip of the name.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

__all__ = ["atomic_output_dir", "atomic_output_file", "check_output_dir", "check_output_file",
           "claim_output_dir", "foreign_entries", "MARKER", "HTML_GENERATOR"]

#: The marker file inside every folder specsched writes (JSON: tool, command, version, files).
MARKER = ".specsched"
#: What an HTML report carries in its <head> so that a later ``report -o`` may replace it.
HTML_GENERATOR = '<meta name="generator" content="specsched">'
#: Files specsched writes into its folders: accepted in a folder recognised as specsched's even
#: when it has no marker (written by an older version).
KNOWN_FILES = frozenset({"requests.parquet", "steps.parquet", "request_steps.parquet",
                         "summary.json", "report.html", "point.json", "manifest.json",
                         "sweep.parquet", "fidelity.json", "fidelity.md"})
#: Names of the temporaries this module creates (``.NAME.tmp-XXXX`` / ``.NAME.old-XXXX``).
_TEMP = re.compile(r"^\..+\.(tmp|old)-[a-z0-9_]+$")
_KINDS = {"parquet": "a parquet file", "html": "an HTML report"}
_MAX_DEPTH = 4
_SHOWN = 3


# ----------------------------------------------------------------------------- ownership
def _read_json(path: Path, limit: int = 1 << 22) -> dict | None:
    try:
        if not path.is_file() or path.stat().st_size > limit:
            return None
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


def _marker_files(folder: Path) -> set[str] | None:
    """The names the marker lists, or None when the folder has no specsched marker."""
    doc = _read_json(folder / MARKER)
    if doc is None or doc.get("tool") != "specsched":
        return None
    files = doc.get("files")
    return {str(f) for f in files} if isinstance(files, list) else set()


def _legacy(folder: Path, names: set[str]) -> bool:
    """A folder specsched wrote before folders carried the marker, recognised by its own files."""
    if "summary.json" in names:
        doc = _read_json(folder / "summary.json")
        if doc is not None and {"backend", "policy", "config", "kv_capacity_tokens"} <= set(doc):
            return True
    if "manifest.json" in names:
        doc = _read_json(folder / "manifest.json")
        if doc is not None and "specsched_sweep" in doc:
            return True
    if "point.json" in names:
        doc = _read_json(folder / "point.json")
        if doc is not None and {"fingerprint", "config"} <= set(doc):
            return True
    if "fidelity.json" in names:
        doc = _read_json(folder / "fidelity.json", limit=1 << 26)
        if doc is not None and {"steps", "runs", "checks"} <= set(doc):
            return True
    return False


def _foreign(folder: Path, depth: int, first_only: bool) -> list[str]:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        return [f"(cannot list it: {exc.strerror or exc})"]
    if not entries:
        return []
    names = {e.name for e in entries}
    listed = _marker_files(folder)
    recognised = listed is not None or _legacy(folder, names)
    out: list[str] = []
    for e in entries:
        n = e.name
        if n == MARKER or _TEMP.match(n):
            continue
        if e.is_dir(follow_symlinks=False):
            if depth >= _MAX_DEPTH:
                out.append(n + "/")
            else:
                sub = _foreign(Path(e.path), depth + 1, True)
                if sub:
                    out.append(f"{n}/{sub[0]}")
        elif not (recognised and e.is_file(follow_symlinks=False)
                  and (n in KNOWN_FILES or (listed is not None and n in listed))):
            out.append(n)
        if first_only and out:
            break
    return out


def foreign_entries(folder: str | os.PathLike) -> list[str]:
    """Entries of ``folder`` specsched did not write (a subfolder shows its first such file)."""
    return _foreign(Path(folder), 0, False)


def _few(names: list[str]) -> str:
    more = len(names) - _SHOWN
    return ", ".join(names[:_SHOWN]) + (f", and {more} more" if more > 0 else "")


def _resolved(p: str | os.PathLike) -> Path:
    return Path(os.path.abspath(p)).resolve()


def _check_inputs(final: Path, inputs: Iterable, what: str, folder: bool) -> None:
    from traces.errors import SpecschedError

    res = _resolved(final)
    for inp in inputs:
        if inp is None or str(inp) == "":
            continue
        r = _resolved(inp)
        if r == res:
            raise SpecschedError(f"{final} is an input of this command: choose another {what}")
        if folder and res in r.parents:
            raise SpecschedError(f"{final} holds {os.path.relpath(r, res)}, an input of this "
                                 f"command: choose another {what}")


def check_output_dir(final: str | os.PathLike, *, inputs: Iterable = (),
                     what: str = "--out") -> None:
    """Raise SpecschedError unless ``final`` may be written (or replaced) as an output folder.

    Refused: the current folder or one that holds it, a folder holding one of ``inputs``, a
    symbolic link, a file, and an existing folder holding anything specsched did not write.
    """
    from traces.errors import SpecschedError

    final = Path(final)
    res = _resolved(final)
    cwd = Path.cwd().resolve()
    if res == cwd or res in cwd.parents:
        raise SpecschedError(f"{final} is the current folder or holds it; an output folder is "
                             f"replaced as a whole: choose another {what}")
    if final.is_symlink():
        raise SpecschedError(f"{final} is a symbolic link: choose another {what} (a real folder)")
    _check_inputs(final, inputs, what, folder=True)
    if final.exists():
        if not final.is_dir():
            raise SpecschedError("exists and is not a folder", path=str(final))
        foreign = foreign_entries(final)
        if foreign:
            raise SpecschedError(f"{final} holds files specsched did not write ({_few(foreign)}): "
                                 f"choose another {what} or remove them")


def _own_file(path: Path, kind: str) -> bool:
    """Is the existing ``path`` a file specsched wrote, of ``kind``?"""
    try:
        if kind == "parquet":
            import pyarrow.parquet as pq

            meta = pq.read_metadata(path).metadata or {}
            return any(k.startswith(b"specsched.") for k in meta)
        if kind == "html":
            with open(path, "rb") as fh:
                head = fh.read(4096)
                fh.seek(max(0, path.stat().st_size - 16384))
                tail = fh.read()
            return (HTML_GENERATOR.encode() in head
                    or (head.lstrip().lower().startswith(b"<!doctype html")
                        and b"data-figures-rendered" in tail))  # reports before the tag
    except Exception:  # noqa: BLE001 - unreadable or not that kind: not ours
        return False
    raise ValueError(f"unknown output kind {kind!r}")


def check_output_file(final: str | os.PathLike, *, inputs: Iterable = (),
                      kind: str | None = None, what: str = "--out") -> None:
    """Raise SpecschedError unless ``final`` may be written (or replaced) as an output file.

    Refused: one of ``inputs``, a folder, and (with ``kind``) an existing file that is not one
    specsched wrote of that kind.
    """
    from traces.errors import SpecschedError

    final = Path(final)
    _check_inputs(final, inputs, what, folder=False)
    if final.is_dir():
        raise SpecschedError(f"is a folder: give a file name to {what}", path=str(final))
    if kind is not None and final.exists() and not _own_file(final, kind):
        raise SpecschedError(f"{final} exists and is not {_KINDS[kind]} specsched wrote: choose "
                             f"another {what} or remove it")


# ----------------------------------------------------------------------------- writing
def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _normal_mode(path: Path, *, folder: bool) -> None:
    """mkdtemp/mkstemp create 0700/0600; results should get the user's usual permissions."""
    os.chmod(path, (0o777 if folder else 0o666) & ~_umask())


def _make_parent(folder: Path, shown: Path) -> None:
    from traces.errors import SpecschedError

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SpecschedError(f"cannot create its folder {folder} ({exc.strerror or exc})",
                             path=str(shown)) from None


@contextmanager
def _interrupts_deferred() -> Iterator[None]:
    """Hold SIGINT/SIGTERM while a few renames or a clean-up run, then deliver them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    sigs = [signal.SIGINT] + ([signal.SIGTERM] if hasattr(signal, "SIGTERM") else [])
    prev = {s: signal.getsignal(s) for s in sigs}
    for s in sigs:
        if prev[s] is not None:
            signal.signal(s, lambda signum, frame: got.append(signum))
    try:
        yield
    finally:
        for s, h in prev.items():
            if h is not None:
                signal.signal(s, h)
        if got:
            h = prev[got[0]]
            if callable(h):
                h(got[0], None)
            elif h == signal.SIG_DFL:
                os.kill(os.getpid(), got[0])


def _version() -> str | None:
    mod = sys.modules.get("specsched")  # traces imports nothing of the project
    if getattr(mod, "__version__", None):
        return str(mod.__version__)
    try:
        from importlib.metadata import version

        return version("specsched")
    except Exception:  # noqa: BLE001 - not installed: no version to record
        return None


def _command() -> str | None:
    try:
        import click

        ctx = click.get_current_context(silent=True)
    except ImportError:
        return None
    return ctx.command_path if ctx is not None else None


def _write_marker(folder: Path, command: str | None) -> None:
    names = sorted(n for n in os.listdir(folder) if n != MARKER)
    doc = {"tool": "specsched", "version": _version(), "command": command or _command(),
           "files": names}
    (folder / MARKER).write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    _normal_mode(folder / MARKER, folder=False)


def claim_output_dir(final: str | os.PathLike, *, inputs: Iterable = (),
                     command: str | None = None) -> Path:
    """Check ``final`` (:func:`check_output_dir`), create it and mark it as specsched's: for a
    folder that is filled piece by piece (a sweep), each piece written atomically inside it."""
    check_output_dir(final, inputs=inputs)
    final = Path(final)
    _make_parent(final, final)
    if _marker_files(final) is None:
        doc = {"tool": "specsched", "version": _version(), "command": command or _command(),
               "files": []}
        with atomic_output_file(final / MARKER) as tmp:
            tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    return final


@contextmanager
def atomic_output_dir(final: str | os.PathLike, *, overwrite: bool = True, inputs: Iterable = (),
                      command: str | None = None) -> Iterator[Path]:
    """Yield a fresh temporary folder; on success it replaces ``final``.

    ``final`` is checked first (:func:`check_output_dir`, ``inputs`` being the command's input
    files); an existing one is replaced only when ``overwrite`` is true.  The marker file is
    written into the folder before the rename; the old folder is moved aside and deleted after
    the new one is in place, so ``final`` is never missing half-way through.
    """
    from traces.errors import SpecschedError

    inputs = tuple(inputs)
    shown = Path(final)
    if shown.exists() and not overwrite:
        raise SpecschedError("exists already (pass --force to replace it)", path=str(shown))
    check_output_dir(shown, inputs=inputs)
    final = Path(os.path.abspath(shown))
    parent = final.parent
    _make_parent(parent, shown)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=parent))
    _normal_mode(tmp, folder=True)
    try:
        yield tmp
        _write_marker(tmp, command)
        check_output_dir(shown, inputs=inputs)  # the folder may have changed meanwhile
    except BaseException:
        with _interrupts_deferred():
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    with _interrupts_deferred():
        old = None
        try:
            if os.path.lexists(final):
                old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=parent))
                os.replace(final, old / "x")
            os.replace(tmp, final)
        except BaseException as exc:
            if old is not None and not os.path.lexists(final):
                os.replace(old / "x", final)  # put the previous folder back
            shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(exc, OSError):
                raise SpecschedError(f"cannot replace it ({exc.strerror or exc})",
                                     path=str(shown)) from None
            raise
        finally:
            if old is not None and not os.path.lexists(old / "x"):
                os.rmdir(old)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


@contextmanager
def atomic_output_file(final: str | os.PathLike, *, inputs: Iterable = (),
                       kind: str | None = None) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; on success it is renamed onto ``final``.

    ``final`` is checked first (:func:`check_output_file`): never one of ``inputs`` or a folder,
    and with ``kind`` never an existing file specsched did not write.
    """
    inputs = tuple(inputs)
    check_output_file(final, inputs=inputs, kind=kind)
    final = Path(final)
    parent = final.parent if str(final.parent) else Path(".")
    _make_parent(parent, final)
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.tmp-", dir=parent)
    os.close(fd)
    tmp = Path(name)
    _normal_mode(tmp, folder=False)
    try:
        yield tmp
        check_output_file(final, inputs=inputs, kind=kind)
    except BaseException:
        with _interrupts_deferred():
            tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, final)
