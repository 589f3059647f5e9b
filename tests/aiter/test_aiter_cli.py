"""`specsched verify-metadata` and `specsched profile` at the CLI edge (CPU)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from backends.cli import parse_int_list
from traces.errors import SpecschedError

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"padded_bs", "graph", "width", "qo_indptr", "kv_indptr", "seqused_k", "max_seqlen_q",
        "max_seqlen_k", "kv_indices_needed", "kv_indices_capacity", "error", "violation"}


CONV = ROOT / "traces" / "samples" / "azure_conv_eagle_2k.parquet"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specsched", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_json_has_the_documented_keys_and_sglang_values():
    r = cli("verify-metadata", "--widths", "4,4,2", "--kv-lens", "100,200,300", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert KEYS <= set(d)
    assert d["width"] == 3 and d["qo_indptr"] == [0, 3, 6, 9] and d["graph"] is True
    assert d["violation"]["misattributed_rows"] == 4


def test_refused_batch_still_prints_and_exits_0():
    r = cli("verify-metadata", "--widths", "5x2", "--kv-lens", "10,20", "--mla",
            "--num-draft-tokens", "5", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["error"] and d["seqused_k"] is None and d["width"] == 5


def test_eager_and_padding_from_the_cli():
    d = json.loads(cli("verify-metadata", "--widths", "2x300", "--kv-lens", "64x300", "--json").stdout)
    assert d["graph"] is False and d["padded_bs"] == 300
    d = json.loads(cli("verify-metadata", "--widths", "2x9", "--kv-lens", "64x9", "--capture-bs",
                       "1-8,10,12", "--num-draft-tokens", "4", "--json").stdout)
    assert d["padded_bs"] == 10 and d["seq_lens"][-1] == 4


@pytest.mark.parametrize("args,needle", [
    (("--widths", "4,4", "--kv-lens", "100"), "one KV length per request"),
    (("--widths", "4,x", "--kv-lens", "1,2"), "--widths: item 1"),
    (("--widths", "4", "--kv-lens", "0"), "--kv-lens: item 0"),
    (("--widths", "4", "--kv-lens", "10", "--mla"), "num_draft_tokens"),
    (("--widths", "4", "--kv-lens", "10", "--page-size", "0"), "--page-size"),
])
def test_bad_arguments_exit_2_without_traceback(args, needle):
    r = cli("verify-metadata", *args, "--json")
    assert r.returncode == 2
    assert needle in r.stderr and "Traceback" not in r.stderr
    assert r.stdout == ""


def test_human_output():
    r = cli("verify-metadata", "--widths", "4,4,2", "--kv-lens", "100,200,300")
    assert r.returncode == 0
    assert "violation   4 of 10 query rows" in r.stdout


def test_profile_without_a_gpu_exits_2(tmp_path):
    from backends.aiter import bridge

    if bridge.gpu_problem() is None:
        pytest.skip("a GPU is present")
    out = tmp_path / "p.parquet"
    r = cli("profile", "--model", "llama-3.1-8b", "-o", str(out))
    assert r.returncode == 2
    assert "the aiter backend needs a CUDA or ROCm GPU" in r.stderr and "Traceback" not in r.stderr
    assert not out.exists() and not list(tmp_path.iterdir())


def test_every_command_has_help_with_an_example():
    for cmd in ("verify-metadata", "profile"):
        r = cli(cmd, "--help")
        assert r.returncode == 0 and "specsched " + cmd in r.stdout


def test_parse_int_list():
    assert parse_int_list("1-3,5,2x2", option="--x") == [1, 2, 3, 5, 2, 2]
    with pytest.raises(SpecschedError, match="item 0"):
        parse_int_list("3-1", option="--x")
    with pytest.raises(SpecschedError, match="empty"):
        parse_int_list("1,,2", option="--x")


def _refused(r, needle: str, tmp_path: Path, out: Path, base: Path, before: bytes) -> None:
    """A refusal: exit 2, one `error:` message naming ``needle``, no traceback, nothing written
    (no ``out``, nothing new in ``tmp_path``) and the base profile as it was."""
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    assert not out.exists() and base.read_bytes() == before
    assert {p.name for p in tmp_path.iterdir()} <= {"base.parquet", "sub", "notes.txt"}


def _base_profile(tmp_path: Path) -> Path:
    sys.path.insert(0, str(ROOT / "tests" / "backends"))
    from backends_helpers import roofline_profile_rows
    from backends.profile import profile_metadata, write_profile

    m, rows = roofline_profile_rows()
    base = tmp_path / "base.parquet"
    write_profile(rows, base, profile_metadata(m, {"name": "H200"}))
    return base


@pytest.mark.parametrize("case, needle", [
    ("no-base", "--heldout-only needs --base PROFILE.parquet"),
    ("same-file", "is the --base file: --heldout-only writes the base's rows and the held-out "
                  "points to a new file and never overwrites the base"),
    ("same-file-other-spelling", "is the --base file"),
    ("zero", "--heldout-only with --heldout 0 would measure nothing"),
    ("grid-option", "--bs, --no-extend: the grid is the --base file's with --heldout-only"),
    ("base-alone", "--base is read only with --heldout-only"),
    ("negative", "--heldout must be >= 0, got -1"),
    ("not-a-profile", "not a profile parquet"),
])
def test_heldout_only_refusals_exit_2_before_the_gpu(tmp_path, case, needle):
    """Each refusal names what is wrong, exits 2 with no traceback, writes nothing and leaves
    the base file as it was; all are checked before a GPU is looked for."""
    base = _base_profile(tmp_path)
    before = base.read_bytes()
    out = tmp_path / "out.parquet"
    args = ["--model", "llama-3.1-8b", "--heldout-only", "--base", str(base), "-o", str(out)]
    if case == "no-base":
        args = ["--model", "llama-3.1-8b", "--heldout-only", "-o", str(out)]
    elif case == "same-file":
        args[-1] = str(base)
    elif case == "same-file-other-spelling":
        (tmp_path / "sub").mkdir()
        args[-1] = str(tmp_path / "sub" / ".." / "base.parquet")
    elif case == "zero":
        args += ["--heldout", "0"]
    elif case == "grid-option":
        args += ["--bs", "1,2", "--no-extend"]
    elif case == "base-alone":
        args.remove("--heldout-only")
    elif case == "negative":
        args = ["--model", "llama-3.1-8b", "--heldout", "-1", "-o", str(out)]
    elif case == "not-a-profile":
        bad = tmp_path / "notes.txt"
        bad.write_text("kind,graph\n")
        args[args.index(str(base))] = str(bad)
    _refused(cli("profile", *args), needle, tmp_path, out, base, before)


@pytest.mark.parametrize("case, needle", [
    ("same-file", "is the base profile"),
    ("same-file-other-spelling", "never overwrites the base"),
    ("missing-base", "no such profile file"),
    ("not-a-profile", "not a profile parquet"),
    ("other-model", "recorded for model 'llama-3.1-8b', not 'llama-3.1-70b'"),
    ("budget", "--budget-s must be a finite number > 0, got 0"),
    ("budget-nan", "--budget-s must be a finite number > 0, got nan"),
    ("anchors", "--anchors must be >= 1, got 0"),
    ("heldout", "--heldout must be >= 0, got -2"),
    ("anchors-from-no-anchors", "holds no anchors of `specsched calibrate`"),
    ("anchors-from-is-out", "is the --anchors-from file"),
    ("anchors-from-and-anchors", "--anchors-from measures nothing: drop --anchors, --heldout"),
    ("anchors-from-and-trace", "--anchors-from measures nothing"),
    ("limit-without-trace", "give --trace too"),
    ("missing-trace", "nope_trace.parquet: no such file"),
    ("trace-bad-set", "engine.policy: unknown policy 'nope'"),
])
def test_calibrate_refusals_exit_2_before_the_gpu(tmp_path, case, needle):
    """Each refusal of ``specsched calibrate`` names what is wrong, exits 2 with no traceback,
    writes nothing and leaves the base as it was; all are checked before a GPU is looked for."""
    base = _base_profile(tmp_path)
    before = base.read_bytes()
    out = tmp_path / "out.parquet"
    args = ["--model", "llama-3.1-8b", "--base", str(base), "-o", str(out)]
    if case == "same-file":
        args[-1] = str(base)
    elif case == "same-file-other-spelling":
        (tmp_path / "sub").mkdir()
        args[-1] = str(tmp_path / "sub" / ".." / "base.parquet")
    elif case == "missing-base":
        args[3] = str(tmp_path / "nope.parquet")
    elif case == "not-a-profile":
        bad = tmp_path / "notes.txt"
        bad.write_text("kind,graph\n")
        args[3] = str(bad)
    elif case == "other-model":
        args[1] = "llama-3.1-70b"
    elif case == "budget":
        args += ["--budget-s", "0"]
    elif case == "budget-nan":
        args += ["--budget-s", "nan"]
    elif case == "anchors":
        args += ["--anchors", "0"]
    elif case == "heldout":
        args += ["--heldout", "-2"]
    elif case == "anchors-from-no-anchors":
        args += ["--anchors-from", str(base)]
    elif case == "anchors-from-is-out":
        args += ["--anchors-from", str(out)]
    elif case == "anchors-from-and-anchors":
        args += ["--anchors-from", str(base), "--anchors", "8"]
    elif case == "anchors-from-and-trace":
        args += ["--anchors-from", str(base), "--trace", str(CONV)]
    elif case == "limit-without-trace":
        args += ["--limit", "5"]
    elif case == "missing-trace":
        args += ["--trace", str(ROOT / "nope_trace.parquet")]
    elif case == "trace-bad-set":
        args += ["--trace", str(CONV), "--set", "engine.policy=nope"]
    _refused(cli("calibrate", *args), needle, tmp_path, out, base, before)


def test_calibrate_anchors_from_refits_on_a_cpu(tmp_path):
    """--anchors-from measures nothing, so it runs here (no GPU): the factors of
    tests/backends/test_calibrate.py's worked case, printed as JSON, and the file written."""
    from tests.backends.test_calibrate import _refit_files

    _, _, base, src = _refit_files(tmp_path)
    out = tmp_path / "refit.parquet"
    r = cli("calibrate", "--model", "llama-3.1-8b", "--base", str(base), "--anchors-from", str(src),
            "-o", str(out))
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["anchors"], d["anchors_missing"]) == (4, 1) and out.is_file()
    assert d["factors"]["verify_graph"] == pytest.approx(1.2) and d["factors"]["prefill"] == pytest.approx(0.9)


@pytest.mark.parametrize("field, value, needle", [
    ("measured_s", None, "anchors[1]: measured_s must be a finite number > 0, got None"),
    ("measured_s", float("nan"), "anchors[1]: measured_s must be a finite number > 0, got nan"),
    ("measured_s", 0.0, "anchors[1]: measured_s must be a finite number > 0, got 0.0"),
    ("kind", ..., "anchors[1] lacks kind"),
    ("kind", "decode", "anchors[1]: no pass group is kind 'decode' with graph True"),
    ("bs", 2.5, "anchors[1]: bs must be an integer >= 0, got 2.5"),
])
def test_calibrate_anchors_from_refuses_a_damaged_anchor(tmp_path, field, value, needle):
    """An --anchors-from file whose second anchor is damaged (a field missing, written ``...``
    here, or a value no measurement has) is refused naming the file and that anchor, exit 2,
    nothing written."""
    from backends.profile import read_profile, write_profile
    from tests.backends.test_calibrate import _refit_files

    _, rows, base, src = _refit_files(tmp_path)
    _, meta = read_profile(src)
    anchor = meta["calibration"]["anchors"][1]
    if value is ...:
        del anchor[field]
    else:
        anchor[field] = value
    bad = tmp_path / "damaged.parquet"
    write_profile(rows, bad, meta)
    out = tmp_path / "refit.parquet"
    r = cli("calibrate", "--model", "llama-3.1-8b", "--base", str(base), "--anchors-from",
            str(bad), "-o", str(out))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("error: ") and "damaged.parquet" in r.stderr, r.stderr
    assert needle in r.stderr, r.stderr
    assert not out.exists()


@pytest.mark.parametrize("extra,want", [((), 1.0), (("--prefill", "scale"), 0.9)])
def test_calibrate_prefill_option_on_a_moe_model(tmp_path, extra, want):
    """On DeepSeek-V2-Lite the same anchors leave the prefill rows at the base's unless
    ``--prefill scale`` applies their 0.9."""
    from tests.backends.test_calibrate import _refit_files

    _, _, base, src = _refit_files(tmp_path, "deepseek-v2-lite")
    out = tmp_path / "refit.parquet"
    r = cli("calibrate", "--model", "deepseek-v2-lite", "--base", str(base), "--anchors-from",
            str(src), *extra, "-o", str(out))
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["factors"]["prefill"] == pytest.approx(want)
    assert d["factors"]["verify_graph"] == pytest.approx(1.2)
    assert d["prefill"] == {"measured": pytest.approx(0.9), "applied": want != 1.0}


def test_calibrate_default_base_is_the_shipped_profile(tmp_path):
    """Without --base the shipped profile of the model on --gpu is the base: -o naming it is
    refused as the base itself; a GPU name nothing is shipped for is refused."""
    from backends.shipped import default_profile

    shipped = default_profile("llama-3.1-8b", "H200")
    r = cli("calibrate", "--model", "llama-3.1-8b", "-o", str(shipped))
    assert r.returncode == 2 and "is the base profile" in r.stderr, r.stderr
    r = cli("calibrate", "--model", "llama-3.1-8b", "--gpu", "B300", "-o", str(tmp_path / "x.parquet"))
    assert r.returncode == 2 and "no profile shipped for llama-3.1-8b on B300" in r.stderr, r.stderr
    assert not (tmp_path / "x.parquet").exists()
