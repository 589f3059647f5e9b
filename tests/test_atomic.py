"""Outputs appear only when complete, and with the user's usual permissions."""

import os

import pytest

from traces.atomic import atomic_output_dir, atomic_output_file


def test_folder_appears_only_on_success_and_replaces_the_old_one(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError):
        with atomic_output_dir(out) as tmp:
            (tmp / "half.txt").write_text("x")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []
    with atomic_output_dir(out) as tmp:
        (tmp / "a.txt").write_text("1")
    with atomic_output_dir(out) as tmp:
        (tmp / "b.txt").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == ["b.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_permissions_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        with atomic_output_dir(tmp_path / "d") as tmp:
            (tmp / "f").write_text("x")
        with atomic_output_file(tmp_path / "f.txt") as tmp:
            tmp.write_text("x")
    finally:
        os.umask(old)
    assert (tmp_path / "d").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "f.txt").stat().st_mode & 0o777 == 0o644


def test_file_left_untouched_on_failure(tmp_path):
    f = tmp_path / "x.txt"
    f.write_text("old")
    with pytest.raises(ValueError):
        with atomic_output_file(f) as tmp:
            tmp.write_text("new")
            raise ValueError
    assert f.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.txt"]
