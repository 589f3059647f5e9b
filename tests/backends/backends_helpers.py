"""Helpers for the backends tests: small profiles built from the roofline formulas."""

from __future__ import annotations

from backends import roofline as R
from backends.models import load_model


def roofline_profile_rows(model="llama-3.1-8b", gpu="H200", *, skip_big=True, eager=True,
                          draft_eager=False):
    """Profile rows whose latencies are the roofline's (so the truth is known everywhere)."""
    m = load_model(model)
    rows = []

    def add(kind, graph, bs, w, kv, tok, lat):
        rows.append(dict(kind=kind, graph=graph, bs=bs, width=w, kv_len=kv, tokens=tok,
                         latency_s=float(lat), p10_s=float(lat) * 0.98, p90_s=float(lat) * 1.03,
                         reps=20))

    for bs in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        for w in (1, 2, 3, 4, 5, 6, 7, 8):
            for kv in (256, 1024, 4096, 16384, 65536):
                if skip_big and bs * kv > 256 * 16384:
                    continue  # what a sweep skips: the GPU could not hold it
                add("verify", True, bs, w, kv, bs * w, R.verify_time(m, gpu, bs, w, kv))
    if eager:
        for bs in (1, 8, 64, 256, 320, 512):
            for w in (1, 4, 8):
                for kv in (1024, 4096):
                    add("verify", False, bs, w, kv, bs * w,
                        R.verify_time(m, gpu, bs, w, kv, graph=False))
    for bs in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        for kv in (256, 1024, 4096, 16384, 65536):
            add("draft", True, bs, 1, kv, bs, R.draft_pass_time(m, gpu, bs, kv))
            if draft_eager:
                add("draft", False, bs, 1, kv, bs, R.draft_pass_time(m, gpu, bs, kv, graph=False))
    for t in (16, 128, 512, 2048, 8192, 16384):
        for p in (0, 1024, 8192, 32768):
            add("prefill", False, 1, 0, p, t, R.prefill_time(m, gpu, t, p))
    return m, rows


def benchmark_script(name: str):
    """A script of ``benchmarks/`` (``name`` without ``.py``) loaded as a module."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def shipped_table(model: str, tp: int | None = None):
    """The latency table of the shipped H200 profile of ``model`` (at ``tp``)."""
    from backends.profile import ProfileExecutor
    from backends.shipped import default_profile

    m = load_model(model, tp=tp)
    return ProfileExecutor(default_profile(m.name, "H200"), model=m).latency_table()
