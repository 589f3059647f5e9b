"""``benchmarks/systematic_errors.py``: shape cells a shipped profile gets wrong the same way on
every recorded live run, on the shipped 70B runs (CPU)."""

from __future__ import annotations

from pathlib import Path

from backends_helpers import benchmark_script

ROOT = Path(__file__).resolve().parents[2]


def _module():
    return benchmark_script("systematic_errors")


def test_kv_bands_and_gpus():
    mod = _module()
    assert [mod.kv_band(k) for k in (128, 1024, 1025, 4096, 20000, 70000)] == \
        ["0-1024", "0-1024", "1025-4096", "1025-4096", "16385-65536", ">65536"]
    s = {"backend_detail": {"journal": {"live_calls": 200, "segments": [
        {"first_call": 0, "gpu": {"uuid": "a20c4827-x"}},
        {"first_call": 120, "gpu": {"uuid": "1195fda1-y"}}]}}}
    assert mod.run_gpus(s) == ["1195fda1", "a20c4827"]
    assert mod.run_gpus({"backend_detail": {"gpu": {"uuid": "3e203705-z"}}}) == ["3e203705"]


def test_every_cell_printed_errs_one_way_on_every_run(capsys):
    """Each row lists one median per run that saw the cell: all of one sign, none under the
    floor asked for, on at least two GPUs."""
    mod = _module()
    assert mod.main([str(ROOT / "benchmarks/results"), "--model", "llama-3.1-70b",
                     "--min-pct", "1.0"]) == 0
    rows = [ln for ln in capsys.readouterr().out.splitlines()
            if ln.startswith("| ") and not ln.startswith("| kind") and "---" not in ln]
    assert rows
    for ln in rows:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        meds = [float(x) for x in cells[-1].split(",")]
        assert int(cells[5]) == len(meds) >= 2 and int(cells[6]) >= 2
        assert all(m >= 1.0 for m in meds) or all(m <= -1.0 for m in meds)
