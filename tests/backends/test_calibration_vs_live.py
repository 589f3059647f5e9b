"""``benchmarks/calibration_vs_live.py``: a calibration beside the live runs on its GPU, on a
hand-made calibration whose anchors read verify graphs 2% slow and prefill 1% slow, against a
shipped live run (CPU)."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "benchmarks/results/h200-2026-12-04d/live_split150"  # Llama-3.1-8B on a760d975
SHIPPED = ROOT / "backends/profiles/llama-3.1-8b__H200.parquet"


def _calibrated(path: Path, uuid: str | None, verify: float = 1.02, prefill: float = 1.01):
    """The shipped 8B grid, with a calibration of three verify graph anchors at bs <= 8 measured
    at ``verify`` x the grid and three prefill anchors at ``prefill`` x (the rows themselves
    are not scaled: the script reads only the anchors)."""
    from backends.profile import grid_rows, read_profile, write_profile

    table, meta = read_profile(SHIPPED)
    grid = grid_rows(table).to_pylist()
    ver = [r for r in grid if r["kind"] == "verify" and r["graph"] and r["bs"] <= 8][:3]
    pre = [r for r in grid if r["kind"] == "prefill"][:3]
    shape = ("kind", "graph", "bs", "width", "kv_len", "tokens")
    anchors = [dict({k: r[k] for k in shape}, base_s=1.0, measured_s=r["latency_s"] * f,
                    ratio=f, reps=5) for rs, f in ((ver, verify), (pre, prefill)) for r in rs]
    machine = {"name": "NVIDIA H200"} | ({"uuid": uuid} if uuid else {})
    cal = {"machine": machine, "at": "2026-12-04T00:00:00Z", "anchors": anchors, "factors": {}}
    write_profile(grid, path, dict(meta, calibration=cal))


def _run(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks/calibration_vs_live.py"),
                           str(root)], capture_output=True, text=True, cwd=ROOT, timeout=300)


def _live_state():
    """The run's own median residuals per kind (``benchmarks/machine_state.py``, tested with
    it): what the script sets beside the calibration."""
    sys.path.insert(0, str(ROOT))
    import pyarrow.parquet as pq

    from backends.profile import load_profile
    from benchmarks.machine_state import state
    from benchmarks.residual_by_shape import residuals

    s = residuals(RUN, load_profile(SHIPPED))
    return state(s, 0, pq.ParquetFile(RUN / "steps.parquet").metadata.num_rows)


def test_a_calibration_is_set_beside_the_live_sitting_on_its_gpu(tmp_path):
    """Verify graphs: the factor is log(1.02) = +1.98% beside the run's own residual; prefill:
    log(1.01) = +1.00% against the run's own (about -0.5% since the profile's prefill line:
    the run's prefills are a little faster than the profile), so scaled by it the profile is
    |live - 1.00| from the sitting against |live| unscaled: further. Draft graphs had no anchor
    (no factor). A calibration that repeats another's measurements and one that names no GPU
    are left out, so there is one pairing."""
    root = tmp_path / "results"
    shutil.copytree(RUN, root / "s" / "live_split150",
                    ignore=shutil.ignore_patterns("request_steps.parquet", "requests.parquet"))
    _calibrated(root / "s" / "a.calibrated.parquet", "a760d975-af09-b30c-50bd-eab99559f67f")
    _calibrated(root / "s" / "b.calibrated.parquet", "a760d975-af09-b30c-50bd-eab99559f67f")
    _calibrated(root / "s" / "c.calibrated.parquet", None, verify=1.05)
    p = _run(root)
    assert p.returncode == 0, p.stderr
    rows = [line for line in p.stdout.splitlines() if line.startswith("| s/")]
    assert len(rows) == 1, p.stdout
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    live = _live_state()
    fv, fp = math.log(1.02) * 100, math.log(1.01) * 100
    assert cells[:3] == ["s/a.calibrated.parquet", "a760d975", "s/live_split150, 1"]
    assert cells[3] == f"{fv:+.2f} / {live['verify'][0]:+.2f}"
    assert cells[4] == f"- / {live['draft'][0]:+.2f}"
    assert cells[6] == f"{fp:+.2f} / {live['prefill'][0]:+.2f}"
    after, before = abs(live["prefill"][0] - fp), abs(live["prefill"][0])
    assert after > before  # the run's prefills are not 1% slower than the profile
    assert cells[7] == f"{after:.2f} vs {before:.2f} (further)"
    assert "nearer the live sitting in 0, further in 1 pairings" in p.stdout


def test_a_folder_without_pairings_prints_no_rows(tmp_path):
    """A calibration whose GPU ran no live run here is not paired."""
    root = tmp_path / "results"
    root.mkdir()
    _calibrated(root / "x.calibrated.parquet", "00000000-0000")
    p = _run(root)
    assert p.returncode == 0, p.stderr
    assert "nearer the live sitting in 0, further in 0 pairings" in p.stdout


def test_prefill_anchors_are_listed_with_their_own_readings(tmp_path):
    """--prefill-anchors: the hand-made calibration's three prefill anchors, each measured at
    1.01 x the shipped grid, read log(1.01) = +1.00% each (the grid's first three prefill rows),
    and its factor is their median; the live column is the run's prefills at the grid's tokens."""
    root = tmp_path / "results"
    shutil.copytree(RUN, root / "s" / "live_split150",
                    ignore=shutil.ignore_patterns("request_steps.parquet", "requests.parquet"))
    _calibrated(root / "s" / "a.calibrated.parquet", "a760d975-af09-b30c-50bd-eab99559f67f")
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks/calibration_vs_live.py"),
                        str(root), "--prefill-anchors"], capture_output=True, text=True,
                       cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    rows = [line for line in p.stdout.splitlines() if line.startswith("| s/")]
    assert len(rows) == 1, p.stdout
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    from backends.profile import grid_rows, read_profile

    pre = [r for r in grid_rows(read_profile(SHIPPED)[0]).to_pylist() if r["kind"] == "prefill"][:3]
    f = math.log(1.01) * 100
    want = ", ".join(f"{t:,} @ {k:,}: {f:+.2f}"
                     for t, k in sorted((r["tokens"], r["kv_len"]) for r in pre))
    assert cells[:4] == ["s/a.calibrated.parquet", "a760d975", want, f"{f:+.2f}"]
    assert cells[4].endswith(")") and cells[4][0] in "+-"
