"""The compiled-function cache is keyed by the source of every module that may be inlined."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from backends import jit


def test_any_source_change_in_simulator_or_backends_moves_the_cache(tmp_path):
    for rel, text in (("simulator/core.py", "def f(): pass\n"),
                      ("backends/latency_table.py", "def g(): pass\n"),
                      ("backends/aiter/runner.py", "def h(): pass\n"),
                      ("analysis/report.py", "x = 1\n")):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    base = jit._source_digest(tmp_path)
    assert base == jit._source_digest(tmp_path)  # stable
    # a callee's module changing (the caller's file untouched) gives a new cache folder
    (tmp_path / "backends/latency_table.py").write_text("def g(): return 1\n")
    changed = jit._source_digest(tmp_path)
    assert changed != base
    (tmp_path / "backends/aiter/runner.py").write_text("def h(): return 2\n")
    assert jit._source_digest(tmp_path) not in (base, changed)
    # a package whose functions are never compiled does not
    before = jit._source_digest(tmp_path)
    (tmp_path / "analysis/report.py").write_text("x = 2\n")
    assert jit._source_digest(tmp_path) == before


def test_numba_caches_under_the_digest_unless_the_user_chose_a_folder():
    if not jit.JIT_ENABLED:
        pytest.skip(f"hot loops are not compiled here: {jit.jit_status()}")
    import numba

    if os.environ.get("NUMBA_CACHE_DIR"):
        assert numba.config.CACHE_DIR == os.environ["NUMBA_CACHE_DIR"]
    else:
        assert Path(numba.config.CACHE_DIR).name == f"numba-{jit._source_digest()}"


def test_a_new_cache_folder_prunes_all_but_the_most_recent_others(tmp_path):
    """Six folders of older sources, used at times 1..6, a folder that is not a cache and a file:
    pruning beside a new folder keeps the three used last, the new one and the rest."""
    for i in range(1, 7):
        d = tmp_path / f"numba-{i:016x}"
        d.mkdir()
        (d / "f.nbi").write_text("x")
        os.utime(d, (1_000_000 + i, 1_000_000 + i))
    (tmp_path / "numba-notacache").mkdir()
    (tmp_path / "notes.txt").write_text("mine")
    current = tmp_path / f"numba-{'f' * 16}"
    current.mkdir()
    gone = jit.prune_caches(current, keep=3)
    assert sorted(d.name for d in gone) == [f"numba-{i:016x}" for i in (1, 2, 3)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [f"numba-{i:016x}" for i in (4, 5, 6)] + ["numba-notacache", "notes.txt", current.name])
    assert jit.prune_caches(current, keep=3) == []
