"""Write results so that a failed run leaves nothing half-written.

Outputs are written into a temporary sibling (same folder, so the final rename stays on one
file system) and renamed into place only when everything succeeded.  On any exception the
temporary is removed and the destination is left as it was.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

__all__ = ["atomic_output_dir", "atomic_output_file"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _normal_mode(path: Path, *, folder: bool) -> None:
    """mkdtemp/mkstemp create 0700/0600; results should get the user's usual permissions."""
    os.chmod(path, (0o777 if folder else 0o666) & ~_umask())


@contextmanager
def atomic_output_dir(final: str | os.PathLike, *, overwrite: bool = True) -> Iterator[Path]:
    """Yield a fresh temporary folder; on success it replaces ``final``.

    An existing ``final`` is replaced only when ``overwrite`` is true; the old folder is moved
    aside first and deleted after the new one is in place, so ``final`` is never missing
    half-way through.
    """
    from traces.errors import SpecschedError

    final = Path(final)
    parent = final.parent if str(final.parent) else Path(".")
    if final.exists() and not overwrite:
        raise SpecschedError("exists already (pass --force to replace it)", path=str(final))
    if final.exists() and not final.is_dir():
        raise SpecschedError("exists and is not a folder", path=str(final))
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=parent))
    _normal_mode(tmp, folder=True)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if final.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-", dir=parent))
        os.replace(final, old / "x")
    os.replace(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextmanager
def atomic_output_file(final: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``final``; on success it is renamed onto ``final``."""
    final = Path(final)
    parent = final.parent if str(final.parent) else Path(".")
    parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{final.name}.tmp-", dir=parent)
    os.close(fd)
    tmp = Path(name)
    _normal_mode(tmp, folder=False)
    try:
        yield tmp
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, final)
