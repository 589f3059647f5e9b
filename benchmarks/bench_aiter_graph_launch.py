"""What a captured graph's launch costs the host, and why (GPU).

A replayed verify step's host time is mostly ``cudaGraphLaunch`` (see
``bench_aiter_host_overhead.py``), and it grows with the batch size although the graph's kernel
count does not.  This benchmark takes the verify graphs apart:

1. each graph's nodes, by type and kernel name (``CUDAGraph.debug_dump``), and its launch time
   with the GPU busy (a spin kernel queued first, so the launch never waits for the GPU);
2. graphs of 128 launches of one kernel family at the model's shapes (the QKV GEMM through
   cuBLAS and cuBLASLt, AITER's RMSNorm, a tiny elementwise kernel), so each family's launch
   cost per node can be read off.

    python benchmarks/bench_aiter_graph_launch.py --model llama-3.1-8b [--json out.json] [--dump DIR]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def launch_us(graph, reps: int = 200) -> float:
    """Median host time of ``graph.replay()`` with the GPU kept busy (about 1 ms queued first)."""
    import torch

    ts = []
    for _ in range(reps):
        torch.cuda._sleep(1_000_000)
        t0 = time.perf_counter()
        graph.replay()
        ts.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    return float(np.median(ts) * 1e6)


def dot_summary(path: Path) -> dict:
    """Node types, kernel names and edge count of a ``cudaGraphDebugDotPrint`` file."""
    text = path.read_text(errors="replace")
    types = collections.Counter()
    names = collections.Counter()
    for m in re.finditer(r'label="\{?\s*([A-Z_]+)', text):
        types[m.group(1)] += 1
    for m in re.finditer(r"name\s*\\?\|\s*([^|}\\\"]+)", text):
        n = m.group(1).strip()
        names[n[:90]] += 1
    clusters = len(re.findall(r"cluster", text, flags=re.I))
    return {"types": dict(types), "edges": text.count("->"), "kernels": dict(names.most_common(25)),
            "mentions_cluster": clusters, "bytes": len(text)}


def family_graph(fn, n: int = 128):
    """A graph of ``n`` calls of ``fn``."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            fn()
    torch.cuda.synchronize()
    return g


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--shapes", default="1x4,32x4,64x8,256x4", help="BSxWIDTH,... (on the ladder)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--dump", default=None, help="folder for the graphs' DOT files")
    args = ap.parse_args()

    import torch

    from backends.aiter import make_executor
    from backends.aiter.metadata import SPEC_CAPTURE_BS

    base = torch.cuda.CUDAGraph

    class DebugGraph(base):  # keeps the cudaGraph_t so that it can be printed
        def __new__(cls, *a, **k):
            try:
                return super().__new__(cls, keep_graph=True)
            except TypeError:  # a torch without keep_graph
                return super().__new__(cls)

        def __init__(self, *a, **k):
            try:
                super().__init__(keep_graph=True)
            except TypeError:
                super().__init__()
            self.enable_debug_mode()

    dump = Path(args.dump) if args.dump else Path("/tmp/graph_dots")
    dump.mkdir(parents=True, exist_ok=True)
    ex = make_executor(args.model, capture_bs=SPEC_CAPTURE_BS)
    runner = ex.runner
    out = {"graphs": [], "families": []}
    print("verify graphs: launch us (GPU busy) | nodes by type | edges")
    for spec in args.shapes.split(","):
        bs, w = (int(x) for x in spec.split("x"))
        key = ("verify", bs, w)
        torch.cuda.CUDAGraph = DebugGraph
        try:
            st = runner.capture(key)
        finally:
            torch.cuda.CUDAGraph = base
        path = dump / f"verify_{bs}x{w}.dot"
        st.graph.debug_dump(str(path))
        if not path.exists() and hasattr(st.graph, "raw_cuda_graph"):
            import ctypes

            rt = None
            for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
                try:
                    rt = ctypes.CDLL(name)
                    break
                except OSError:
                    continue
            if rt is not None:
                rt.cudaGraphDebugDotPrint(ctypes.c_void_p(st.graph.raw_cuda_graph()),
                                          str(path).encode(), ctypes.c_uint(1 << 0 | 1 << 1))
        if not path.exists():
            print(f"  {bs:>4}x{w}: no DOT file written; launch {launch_us(st.graph):.1f} us")
            runner.graphs.pop(key, None)
            continue
        summ = dot_summary(path)
        us = launch_us(st.graph)
        row = {"bs": bs, "width": w, "launch_us_gpu_busy": us, **summ}
        out["graphs"].append(row)
        print(f"  {bs:>4}x{w}: {us:7.1f} us | {summ['types']} | edges {summ['edges']} | "
              f"'cluster' x{summ['mentions_cluster']}")
        for name, n in list(summ["kernels"].items())[:12]:
            print(f"        {n:>4} x {name}")
        runner.graphs.pop(key, None)

    g = runner.geometry
    h = g["hidden"]
    qkv_out = (g["heads"] + 2 * g["kv_heads"]) * g["head_dim"]
    dev = "cuda"
    wq = torch.randn(qkv_out, h, device=dev, dtype=torch.bfloat16)
    norm_w = torch.ones(h, device=dev, dtype=torch.bfloat16)
    tiny = torch.zeros(16, device=dev)
    print("graphs of 128 launches of one family: launch us per graph (GPU busy), us per node")
    fams = []
    for m in (4, 64, 128, 256, 512, 1024):
        x = torch.randn(m, h, device=dev, dtype=torch.bfloat16)
        y = torch.empty(m, qkv_out, device=dev, dtype=torch.bfloat16)
        for lib in ("cublas", "cublaslt"):
            fams.append((f"qkv gemm M={m} ({lib})", lib,
                         lambda x=x, y=y: torch.matmul(x, wq.t(), out=y)))
        fams.append((f"aiter rmsnorm M={m}", None,
                     lambda x=x: runner.kernels.rms_norm(x, norm_w, 1e-5)))
    fams.append(("tiny add_", None, lambda: tiny.add_(1)))
    prev = torch.backends.cuda.preferred_blas_library()
    for name, lib, fn in fams:
        if lib is not None:
            torch.backends.cuda.preferred_blas_library(lib)
        try:
            gr = family_graph(fn)
            gr_us = launch_us(gr, reps=100)
        finally:
            torch.backends.cuda.preferred_blas_library(prev)
        out["families"].append({"family": name, "launch_us_128": gr_us, "us_per_node": gr_us / 128})
        print(f"  {name:<34} {gr_us:8.1f} us  ({gr_us / 128:.3f} us/node)")
        del gr
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
