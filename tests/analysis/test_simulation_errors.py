"""plan, sweep and uniformity never hide a simulation that failed: its own message, exit 2.
"no rate meets the SLO" is only for simulations that ran and missed."""

from __future__ import annotations

import json

import pytest

from specsched.cli import cli, run_cli

KV_MESSAGE = "the KV budget (1000 tokens) is smaller than one request needs"


def run(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as e:
        run_cli(cli, [str(a) for a in args])
    out, err = capsys.readouterr()
    return e.value.code, out, err


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    from traces.synth import synth

    path = tmp_path_factory.mktemp("err") / "t.parquet"
    synth(path, n=60, rate=4, prompt="fixed:1200", output="fixed:40",
          acceptance="geometric:k=4,alpha=0.7", seed=0)
    return path


def test_plan_ends_with_the_simulations_error(trace, capsys):
    code, out, err = run(capsys, "plan", "--trace", trace, "--slo", "ttft_p90<=2s", "--jobs", "1",
                         "--set", "engine.kv_capacity_tokens=1000")
    assert code == 2, out + err
    assert KV_MESSAGE in err and err.startswith("error: ") and "Traceback" not in err
    assert "no rate meets the SLO" not in out
    code, out, err = run(capsys, "plan", "--trace", trace, "--slo", "ttft_p90<=2s", "--jobs", "1",
                         "--search", "engine.kv_capacity_tokens=0,1000", "--json")
    assert code == 2 and "[engine.kv_capacity_tokens=1000] " in err and KV_MESSAGE in err, err


def test_plan_with_the_live_backend_and_no_gpu_says_so(trace, capsys):
    try:
        import torch

        if torch.cuda.is_available():
            pytest.skip("a GPU is present: the aiter backend would run")
    except ImportError:
        pass
    code, out, err = run(capsys, "plan", "--trace", trace, "--slo", "ttft_p90<=2s",
                         "--backend", "aiter")
    assert code == 2 and "needs a CUDA or ROCm GPU" in err, out + err
    assert "no rate meets the SLO" not in out


def test_plan_says_no_rate_only_when_the_simulations_missed(trace, capsys):
    # 1200 prompt tokens take more than 1 ms to prefill at any rate: every simulation misses
    code, out, err = run(capsys, "plan", "--trace", trace, "--slo", "ttft_p90<=1ms", "--jobs", "1")
    assert code == 0, err
    assert "no rate meets the SLO" in out and "cannot be met by load alone" in out


def test_sweep_reports_each_failed_point_with_its_message(trace, tmp_path, capsys):
    grid = tmp_path / "grid.toml"
    grid.write_text(f'[sweep]\ntrace = "{trace}"\n[axes]\n'
                    f'"engine.kv_capacity_tokens" = [0, 1000]\n')
    code, out, err = run(capsys, "sweep", grid, "-o", tmp_path / "out", "--jobs", "1")
    assert code == 2
    assert "1 run, 0 already done, 1 failed" in out
    assert f"failed kv_capacity_tokens=1000: {trace}: {KV_MESSAGE}" in err
    assert "error: 1 of 2 points failed" in err
    points = {p["name"]: p for p in json.loads((tmp_path / "out" / "manifest.json").read_text())
              ["points"]}
    bad = points["kv_capacity_tokens=1000"]
    assert bad["status"] == "failed" and bad["error"].startswith(f"{trace}: {KV_MESSAGE}")
    assert points["kv_capacity_tokens=0"]["status"] == "done"


def test_uniformity_ends_with_the_simulations_error(trace, capsys):
    code, out, err = run(capsys, "uniformity", "--trace", trace, "--policies", "pad", "--jobs",
                         "1", "--set", "engine.kv_capacity_tokens=1000")
    assert code == 2 and KV_MESSAGE in err and out == "", out + err
