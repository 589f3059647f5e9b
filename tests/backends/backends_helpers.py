"""Helpers for the backends tests: small profiles built from the roofline formulas, a tiny model
and a round-numbered GPU for closed forms, small requests tables and a report dict with only what
rendering needs."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa

from backends import roofline as R
from backends.hardware import GPUS
from backends.models import ModelShape, load_model


def tiny_model(**kw) -> ModelShape:
    """A two-layer model small enough to work a roofline pass out by hand (``kw`` overrides)."""
    base = dict(name="tiny", layers=2, hidden=64, heads=2, kv_heads=1, head_dim=32,
                intermediate=128, vocab=256)
    base.update(kw)
    return ModelShape(**base)


def round_gpu(**kw):
    """An H200 with round numbers (1e12 B/s, every achievable fraction 1) for closed forms."""
    base = dict(hbm_bw=1e12, bf16_flops=1e14, fp8_flops=2e14, achievable_bw_frac=1.0,
                achievable_flops_frac=1.0, achievable_link_frac=1.0, link_bw=1e11,
                allreduce_latency_s=1e-5, kernel_launch_s=1e-6, graph_launch_s=5e-6)
    base.update(kw)
    return replace(GPUS["H200"], **base)


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


def requests_table(rows):
    """A requests table from (id, arrival, first token, finish, output tokens) rows, each
    admitted on arrival."""
    ids, arr, first, fin, out = zip(*rows)
    return pa.table({"request_id": list(ids), "arrival_s": list(arr), "admit_s": list(arr),
                     "first_token_s": list(first), "finish_s": list(fin),
                     "output_tokens": list(out)})


def bare_report(**extra):
    """A fidelity report dict with no steps, equal whole runs and no checks, plus ``extra``:
    enough for ``render_markdown``."""
    return {"steps": {"steps": 0, "off_grid_steps": 0, "on_grid_steps": 0,
                      "out_of_grid_steps": 0, "mape_off_grid_pct": None, "mape_all_pct": None,
                      "by_kind": {}, "off_grid_axes": {}, "by_shape": [], "worst": []},
            "runs": {m: {q: {"reference": 1.0, "profile": 1.0, "diff_pct": 0.0}
                         for q in ("p50", "p90", "p99")} for m in ("ttft_s", "tpot_s", "e2e_s")},
            "checks": {}, "not_captured": [], **extra}
