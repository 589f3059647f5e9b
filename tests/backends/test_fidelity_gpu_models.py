"""A fidelity report says when the profile and the live run are of two GPU models."""

from backends_helpers import bare_report

from analysis.fidelity.render import render_markdown
from analysis.fidelity.report import gpu_models


def _summary(name):
    return {"backend_detail": {"gpu": {"name": name, "uuid": "x"}}}


def test_gpu_models_by_sheet():
    h200 = {"gpu": {"name": "NVIDIA H200"}}
    assert gpu_models(h200, _summary("NVIDIA H100 80GB HBM3")) == {
        "profile": "NVIDIA H200", "reference": "NVIDIA H100 80GB HBM3"}
    assert gpu_models(h200, _summary("NVIDIA H200")) is None
    # a calibrated profile names the GPU it was calibrated on; a PCIe card is another part
    h100 = {"gpu": {"name": "NVIDIA H100 80GB HBM3"}}
    assert gpu_models(h100, _summary("NVIDIA H100 80GB HBM3")) is None
    assert gpu_models(h100, _summary("NVIDIA H100 PCIe")) is not None
    # no sheet: by name; a side without a name says nothing
    assert gpu_models({"gpu": {"name": "Tesla T4"}}, _summary("Tesla T4")) is None
    assert gpu_models({"gpu": {"name": "Tesla T4"}}, _summary("NVIDIA L4")) is not None
    assert gpu_models({}, _summary("NVIDIA H100 80GB HBM3")) is None
    assert gpu_models(h200, {"backend_detail": {}}) is None


def test_the_report_says_so():
    report = bare_report(gpu_models={"profile": "NVIDIA H200",
                                     "reference": "NVIDIA H100 80GB HBM3"})
    md = render_markdown(report, reference="aiter")
    assert ("GPU models differ: the profile is of an NVIDIA H200, the aiter run ran on an "
            "NVIDIA H100 80GB HBM3.") in md
    del report["gpu_models"]
    assert "GPU models differ" not in render_markdown(report, reference="aiter")
