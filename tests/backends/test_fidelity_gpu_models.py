"""A fidelity report says when the profile and the live run are of two GPU models."""

from analysis.fidelity.render import render_markdown
from analysis.fidelity.report import gpu_models


def _summary(name):
    return {"backend_detail": {"gpu": {"name": name, "uuid": "x"}}}


def test_gpu_models_by_sheet():
    h200 = {"gpu": {"name": "NVIDIA H200"}}
    assert gpu_models(h200, _summary("NVIDIA H100 80GB HBM3")) == {
        "profile": "NVIDIA H200", "reference": "NVIDIA H100 80GB HBM3"}
    assert gpu_models(h200, _summary("NVIDIA H200")) is None
    # a calibrated profile names the GPU it was calibrated on
    assert gpu_models({"gpu": {"name": "NVIDIA H100 80GB HBM3"}},
                      _summary("NVIDIA H100 PCIe")) is None
    # no sheet: by name; a side without a name says nothing
    assert gpu_models({"gpu": {"name": "Tesla T4"}}, _summary("Tesla T4")) is None
    assert gpu_models({"gpu": {"name": "Tesla T4"}}, _summary("NVIDIA L4")) is not None
    assert gpu_models({}, _summary("NVIDIA H100 80GB HBM3")) is None
    assert gpu_models(h200, {"backend_detail": {}}) is None


def test_the_report_says_so():
    report = {"steps": {"steps": 0, "off_grid_steps": 0, "on_grid_steps": 0,
                        "out_of_grid_steps": 0, "mape_off_grid_pct": None, "mape_all_pct": None,
                        "by_kind": {}, "off_grid_axes": {}, "by_shape": [], "worst": []},
              "runs": {m: {q: {"reference": 1.0, "profile": 1.0, "diff_pct": 0.0}
                           for q in ("p50", "p90", "p99")} for m in ("ttft_s", "tpot_s", "e2e_s")},
              "checks": {}, "not_captured": [],
              "gpu_models": {"profile": "NVIDIA H200", "reference": "NVIDIA H100 80GB HBM3"}}
    md = render_markdown(report, reference="aiter")
    assert ("GPU models differ: the profile is of an NVIDIA H200, the aiter run ran on an "
            "NVIDIA H100 80GB HBM3.") in md
    del report["gpu_models"]
    assert "GPU models differ" not in render_markdown(report, reference="aiter")
