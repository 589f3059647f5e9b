"""Outputs appear only when complete, with the user's usual permissions, and never replace
anything specsched did not write (traces.atomic's one rule for every command)."""

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from traces.atomic import (MARKER, atomic_output_dir, atomic_output_file, check_output_dir,
                           check_output_file)
from traces.errors import SpecschedError


def names(folder):
    return sorted(p.name for p in folder.iterdir())


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
    assert names(out) == [MARKER, "b.txt"]
    assert names(tmp_path) == ["run"]


def test_an_interrupt_leaves_nothing(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with atomic_output_dir(tmp_path / "run") as tmp:
            (tmp / "half.txt").write_text("x")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_the_marker_says_who_wrote_what(tmp_path):
    with atomic_output_dir(tmp_path / "run", command="specsched simulate") as tmp:
        (tmp / "summary.json").write_text("{}")
        (tmp / "sub").mkdir()
    doc = json.loads((tmp_path / "run" / MARKER).read_text())
    assert doc["tool"] == "specsched" and doc["command"] == "specsched simulate"
    assert doc["files"] == ["sub", "summary.json"]
    assert "version" in doc


def test_a_folder_with_a_user_file_is_refused_and_untouched(tmp_path):
    out = tmp_path / "data"
    out.mkdir()
    for n in ("notes.txt", "a.csv", "b.csv", "c.csv"):
        (out / n).write_text("mine")
    with pytest.raises(SpecschedError) as e:
        with atomic_output_dir(out) as tmp:
            (tmp / "x").write_text("x")
    assert str(e.value) == (f"{out} holds files specsched did not write (a.csv, b.csv, c.csv, "
                            f"and 1 more): choose another --out or remove them")
    assert names(out) == ["a.csv", "b.csv", "c.csv", "notes.txt"]
    assert names(tmp_path) == ["data"]  # no temporary was even created


def test_a_file_added_to_a_results_folder_protects_it(tmp_path):
    out = tmp_path / "run"
    with atomic_output_dir(out) as tmp:
        (tmp / "summary.json").write_text("{}")
    (out / "sub").mkdir()
    (out / "sub" / "notes.txt").write_text("mine")
    with pytest.raises(SpecschedError, match=r"did not write \(sub/notes.txt\)"):
        check_output_dir(out)
    (out / "sub" / "notes.txt").unlink()
    check_output_dir(out)  # an empty folder inside is nothing to lose


def test_the_current_folder_and_its_parents_are_refused(tmp_path, monkeypatch):
    here = tmp_path / "d"
    here.mkdir()
    monkeypatch.chdir(here)
    for final in (".", "./", "..", str(here), str(tmp_path)):
        with pytest.raises(SpecschedError, match="is the current folder or holds it"):
            with atomic_output_dir(final):
                pass
    assert names(tmp_path) == ["d"] and names(here) == []


def test_a_folder_holding_an_input_is_refused(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "t.parquet").write_bytes(b"trace")
    with pytest.raises(SpecschedError, match=r"data holds t.parquet, an input of this command"):
        check_output_dir(data, inputs=[data / "t.parquet"])
    with pytest.raises(SpecschedError, match="holds sub/t.parquet, an input"):
        check_output_dir(tmp_path / "runs", inputs=[tmp_path / "runs" / "sub" / "t.parquet"])
    assert (data / "t.parquet").read_bytes() == b"trace"


def test_results_folders_of_older_versions_are_recognised(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    for n in ("requests.parquet", "steps.parquet", "report.html"):
        (run / n).write_bytes(b"x")
    (run / "summary.json").write_text(json.dumps({"requests": 3}))
    with pytest.raises(SpecschedError, match="did not write"):  # not the engine's keys
        check_output_dir(run)
    (run / "summary.json").write_text(json.dumps(
        {"backend": "profile", "policy": "pad", "config": {}, "kv_capacity_tokens": 1}))
    check_output_dir(run)
    grid = tmp_path / "grid"  # a folder of such folders (uniformity --out, an old sweep)
    grid.mkdir()
    os.rename(run, grid / "pad")
    check_output_dir(grid)


def test_a_symbolic_link_is_refused(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(SpecschedError, match="symbolic link"):
        check_output_dir(tmp_path / "link")


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
    assert (tmp_path / "d" / MARKER).stat().st_mode & 0o777 == 0o644
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


def test_a_file_output_never_replaces_an_input_a_folder_or_a_foreign_file(tmp_path):
    src = tmp_path / "in.csv"
    src.write_text("a,b\n")
    with pytest.raises(SpecschedError, match="in.csv is an input of this command"):
        with atomic_output_file(src, inputs=[str(src)]) as tmp:
            tmp.write_text("x")
    assert src.read_text() == "a,b\n"
    with pytest.raises(SpecschedError, match="is a folder"):
        check_output_file(tmp_path)
    # kind "parquet": a CSV, or a parquet someone else wrote, is not replaced ...
    with pytest.raises(SpecschedError, match="exists and is not a parquet file specsched wrote"):
        check_output_file(src, kind="parquet")
    theirs = tmp_path / "theirs.parquet"
    pq.write_table(pa.table({"x": [1]}), theirs)
    with pytest.raises(SpecschedError, match="not a parquet file specsched wrote"):
        check_output_file(theirs, kind="parquet")
    # ... a parquet of specsched's (its metadata keys) is
    ours = tmp_path / "ours.parquet"
    pq.write_table(pa.table({"x": [1]}).replace_schema_metadata({"specsched.format_version": "1"}),
                   ours)
    check_output_file(ours, kind="parquet")
    page = tmp_path / "index.html"
    page.write_text("<!DOCTYPE html><html><body>my page</body></html>")
    with pytest.raises(SpecschedError, match="not an HTML report specsched wrote"):
        check_output_file(page, kind="html")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv", "index.html", "ours.parquet",
                                                         "theirs.parquet"]
