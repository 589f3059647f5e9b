"""``specsched calibrate --from-run`` (backends/calibrate_from_run.py): a profile re-centred on a
recorded live run, on the shipped V2-Lite profile and a shipped live V2-Lite run of its GPU
model (``benchmarks/results/h200-2026-12-05``, 150 requests under `split`)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "benchmarks/results/h200-2026-12-05/live_v2lite_split150"
BASE = ROOT / "backends/profiles/deepseek-v2-lite__H200.parquet"
H100_CAL = ROOT / "benchmarks/results/h100-2026-12-06e/deepseek-v2-lite__H200.calibrated.parquet"
#: what the synthetic run's passes take, per group, over the base profile's own prediction
PLANTED = {"verify_graph": 1.25, "draft_graph": 0.8}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specsched", *args], cwd=ROOT,
                          capture_output=True, text=True)


def _planted_run(tmp_path: Path) -> Path:
    """A copy of the shipped run whose every pass the base profile can look up takes exactly
    the base's prediction times its group's planted factor (1 for the groups not planted)."""
    from analysis.fidelity.stats import step_errors
    from backends.calibrate import group_name
    from backends.profile import load_profile

    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    steps = pq.read_table(run / "steps.parquet")
    e = step_errors(steps, load_profile(str(BASE)), kv_lookup="fluid", _full=True)
    err, ok = e["_arrays"]["err"], e["_arrays"]["ok"]
    live = steps.column("latency_s").to_numpy()
    k = np.array([PLANTED.get(group_name(kind, bool(g)), 1.0) for kind, g in
                  zip(steps.column("kind").to_pylist(), steps.column("graph").to_pylist())])
    new = np.where(ok, live * (1.0 + np.nan_to_num(err)) * k, live)
    i = steps.column_names.index("latency_s")
    pq.write_table(steps.set_column(i, "latency_s", pa.array(new)), run / "steps.parquet")
    return run


def test_a_run_planted_per_group_gives_back_its_factors(tmp_path):
    """A run whose verify graphs take 1.25 x and draft graphs 0.8 x what the base predicts, and
    every other pass exactly the prediction: re-centred on it, those two groups' rows are the
    base's x 1.25 and x 0.8, every row of a group the base's times that group's factor, the
    held-out rows dropped; every group's summed time over the run is then the live one (eager
    verify, whose rows the profile fills in part from the graph rows, gets the factor that
    makes it so); draft, draft-extend and prefill passes are predicted exactly; and the
    metadata names the run by its steps."""
    from analysis.fidelity.stats import step_errors
    from backends.calibrate import group_name
    from backends.calibrate_from_run import group_ratios, recentre
    from backends.models import load_model
    from backends.profile import load_profile, read_profile
    from backends.shipped import file_sha256

    model = load_model("deepseek-v2-lite")
    run, out = _planted_run(tmp_path), tmp_path / "recentred.parquet"
    summary = recentre(model, BASE, run, out)
    rows, meta = read_profile(out)
    rec = meta["calibration"]["recentred"]
    f = {g: v["factor"] for g, v in rec["groups"].items() if v["applied"]}
    assert summary["factors"] == {g: round(x, 6) for g, x in f.items()}
    assert (f["verify_graph"], f["draft_graph"]) == (pytest.approx(1.25, rel=1e-9),
                                                     pytest.approx(0.8, rel=1e-9))
    for g in ("extend_graph", "prefill"):
        assert f[g] == pytest.approx(1.0, rel=1e-9)
    base_rows, _ = read_profile(BASE)
    key = ("kind", "graph", "bs", "width", "kv_len", "tokens", "split")
    base_of = {tuple(r[k] for k in key): r for r in base_rows.to_pylist()
               if r["split"] != "heldout"}
    got = rows.to_pylist()
    assert len(got) == len(base_of) and all(r["split"] != "heldout" for r in got)
    for r in got:
        b = base_of[tuple(r[k] for k in key)]
        for c in ("latency_s", "p10_s", "p90_s"):
            assert r[c] == pytest.approx(b[c] * f.get(group_name(r["kind"], r["graph"]), 1.0),
                                         rel=1e-9)
    steps = pq.read_table(run / "steps.parquet")
    for g, v in group_ratios(out, steps, model).items():
        if g in f:
            assert v["ratio"] == pytest.approx(1.0, abs=1e-6), g
    e = step_errors(steps, load_profile(str(out)), kv_lookup="fluid")
    for kind in ("draft", "draft_extend", "prefill"):
        assert e["by_kind"][kind]["mape_pct"] < 1e-6, kind
    assert rec["steps_sha256"] == file_sha256(run / "steps.parquet") and rec["run"] == str(run)
    assert meta["calibration"]["base_sha256"] == file_sha256(BASE)


def test_fidelity_refuses_the_run_a_profile_was_recentred_on(tmp_path):
    """Against its own source run a re-centred profile matches by construction: ``fidelity``
    refuses it (exit 2, one error line, nothing written). Against the shipped recording of
    the same requests, whose steps differ, it is scored, and the report says what it is."""
    run, out = _planted_run(tmp_path), tmp_path / "recentred.parquet"
    r = cli("calibrate", "--model", "deepseek-v2-lite", "--base", str(BASE), "--from-run",
            str(run), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["from_run"] == str(run)
    folder = tmp_path / "fid"
    r = cli("fidelity", "--reference-run", str(run), "--profile", str(out), "--out", str(folder))
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    assert "was re-centred on this run" in r.stderr and not folder.exists()
    r = cli("fidelity", "--reference-run", str(RUN), "--profile", str(out), "--out", str(folder))
    assert r.returncode == 0, r.stderr
    rep = json.loads((folder / "fidelity.json").read_text())
    assert rep["profile"]["calibration"]["recentred"]["run"] == str(run)
    assert rep["profile"]["calibration"]["recentred"]["factors"]["verify_graph"] == \
        pytest.approx(1.25)
    assert f"Profile re-centred on the live run {run} (`calibrate --from-run`): factors" in \
        (folder / "fidelity.md").read_text()


@pytest.mark.parametrize("case, needle", [
    ("other-gpu-model", "was recorded on NVIDIA H200, and the profile"),
    ("not-live", "is a run of the 'profile' backend, not a live one"),
    ("no-steps", "steps.parquet"),
    ("with-anchors", "--from-run measures nothing: drop --anchors"),
    ("out-is-base", "is the base profile"),
    ("out-in-run", "is inside the --from-run folder"),
])
def test_from_run_refusals(tmp_path, case, needle):
    """Each refusal names what is wrong, exits 2 with one error line and writes nothing: a run
    of another GPU model than the profile's (the H200 run against an H100 calibration), a run
    that did not time its passes on a GPU, a folder without steps, --anchors beside it, -o
    naming the base, and -o inside the run's folder; the run is left as it was."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    base, out = BASE, tmp_path / "out.parquet"
    extra: list[str] = []
    if case == "other-gpu-model":
        base = H100_CAL
    elif case == "not-live":
        s = json.loads((run / "summary.json").read_text())
        s["config"]["backend"]["name"] = "profile"
        (run / "summary.json").write_text(json.dumps(s))
    elif case == "no-steps":
        (run / "steps.parquet").unlink()
    elif case == "with-anchors":
        extra = ["--anchors", "8"]
    elif case == "out-is-base":
        out = base
    elif case == "out-in-run":
        out = run / "requests.parquet"
    before = {p.name for p in tmp_path.iterdir()}
    in_run = {p.name: p.read_bytes() for p in run.iterdir()}
    r = cli("calibrate", "--model", "deepseek-v2-lite", "--base", str(base), "--from-run",
            str(run), "-o", str(out), *extra)
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert {p.name for p in tmp_path.iterdir()} == before
    assert {p.name: p.read_bytes() for p in run.iterdir()} == in_run
