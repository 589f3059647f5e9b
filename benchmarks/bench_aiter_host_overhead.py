"""Host overhead of one replayed verify step of the live AITER executor (GPU).

Per step: build the batch's metadata on the host, copy it into the graph's static buffer (one
host-to-device copy) and launch the graph replay -- timed with ``time.perf_counter`` from the
first to the last of these, without waiting for the GPU (the wait is not host work).  KV lengths
change every step, as in a real run.  Target: median at most 50 us.

The host waits for each step before the next, as the live executor does, in two ways: spinning
on the step's event (the live executor's default) and blocking in ``cudaEventSynchronize``.  The
parts are timed apart: the metadata, and the graph launch with the GPU idle and with the GPU still
busy (a launch that is slower behind queued work is waiting for the GPU, not working).

    python benchmarks/bench_aiter_host_overhead.py --model llama-3.1-8b
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def python_loop_us() -> float:
    """A fixed pure-Python workload (median of 200), to compare hosts' single-core speed."""
    ts = []
    for _ in range(200):
        t0 = time.perf_counter()
        acc = 0
        for i in range(10_000):
            acc += i
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts) * 1e6)


def cpu_ticks() -> np.ndarray:
    """The whole machine's CPU time from /proc/stat (user nice system idle iowait irq softirq
    steal), in ticks; zeros where there is no /proc/stat."""
    try:
        with open("/proc/stat") as f:
            return np.array(f.readline().split()[1:9], dtype=np.int64)
    except OSError:
        return np.zeros(8, np.int64)


def host_interference(t0: np.ndarray, r0, t1: np.ndarray, r1) -> dict:
    """What took CPU from the run between two readings: steal (the hypervisor ran someone else
    on our virtual CPUs), interrupts, and this process's involuntary context switches."""
    d = t1 - t0
    tot = max(int(d.sum()), 1)
    return {"steal_pct": 100.0 * d[7] / tot, "irq_softirq_pct": 100.0 * (d[5] + d[6]) / tot,
            "busy_pct": 100.0 * (tot - d[3] - d[4]) / tot,
            "involuntary_ctx_switches": r1.ru_nivcsw - r0.ru_nivcsw}


def cpu_reference_us(bs: int = 256, width: int = 4) -> float:
    """The metadata path (verify_launch + staging-buffer fill) of a bs-256 step, 3,000 times back
    to back with no GPU work between: the host's speed at it with warm caches (runs anywhere)."""
    from types import SimpleNamespace

    from backends.aiter.runner import Runner

    r = Runner.__new__(Runner)  # only what the metadata path reads
    r.fill, r._width_cache, r.page_size = 8, {}, 16
    r.capture_widths = tuple(range(1, 9))
    r.pool = SimpleNamespace(span=60_000)
    hn = np.zeros(4 * bs + 3, np.int32)
    st = SimpleNamespace(views=[(hn[0:bs], hn[bs:2 * bs + 1], hn[2 * bs + 1:3 * bs + 2],
                                 hn[3 * bs + 2:4 * bs + 3])], qo_sig=[None])
    base = np.random.default_rng(0).integers(1000, 2000, bs)
    widths = np.full(bs, width)
    ts = []
    for step in range(3000):
        kvs = base + step % 64
        t0 = time.perf_counter()
        launch, _ = r.verify_launch(widths, kvs, mode="uniform", padded_bs=bs, launch_width=width)
        r._fill_host(st, launch, 0)
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts[100:]) * 1e6)


def meta_then_launch(runner, st, widths, kvs, bs: int, width: int) -> tuple[float, float]:
    """One replayed step, spin-waited for: host seconds of its metadata path (launch arguments and
    the staging buffer) and of its graph launch."""
    from backends.aiter.runner import wait_event

    t0 = time.perf_counter()
    launch, _ = runner.verify_launch(widths, kvs, mode="uniform", padded_bs=bs, launch_width=width)
    runner._fill_host(st, launch, 0)
    t1 = time.perf_counter()
    st.graph.replay()
    t2 = time.perf_counter()
    st.e1.record()
    wait_event(st.e1)
    return t1 - t0, t2 - t1


def after_wait_probe(runner, steps: int, bs: int = 256, width: int = 4) -> dict:
    """The metadata path and the graph launch of a bs-256 step, timed right after the host waited
    about 1 ms in different ways: not at all (back to back), a pure-Python busy loop, a sleep,
    spinning on a CUDA event behind GPU work, and a blocking ``cudaEventSynchronize``.  If only
    the waits behind GPU work make the host slow, the driver's waiting is what costs; if every
    wait does, it is the core going cold (caches, frequency) while the host waits."""
    import torch

    from backends.aiter.runner import wait_event

    key = ("verify", bs, width)
    st = runner.capture(key)
    widths = np.full(bs, width)
    base = np.random.default_rng(1).integers(500, 1025, bs)

    def py_spin():
        t = time.perf_counter() + 1e-3
        while time.perf_counter() < t:
            pass

    def gpu(spin):
        def w():
            torch.cuda._sleep(2_000_000)
            st.e1.record()
            wait_event(st.e1, spin)
        return w

    waits = {"back_to_back": lambda: None, "python_spin_1ms": py_spin,
             "sleep_1ms": lambda: time.sleep(1e-3), "gpu_event_spin": gpu(True),
             "gpu_event_synchronize": gpu(False)}
    out = {}
    print(f"after-wait probe (bs {bs}, width {width}), median us: the metadata path with no GPU "
          f"work in the loop | metadata / graph launch when each step's replay is waited for too")
    for name, wait in waits.items():
        meta_only, meta, launch = [], [], []
        for step in range(steps):
            wait()
            t0 = time.perf_counter()
            la, _ = runner.verify_launch(widths, base + step % 64, mode="uniform", padded_bs=bs,
                                         launch_width=width)
            runner._fill_host(st, la, 0)
            meta_only.append(time.perf_counter() - t0)
        for step in range(steps // 3):
            wait()
            m, la = meta_then_launch(runner, st, widths, base + step % 64, bs, width)
            meta.append(m)
            launch.append(la)
        out[name] = {"metadata_only_us_median": float(np.median(meta_only) * 1e6),
                     "metadata_us_median": float(np.median(meta) * 1e6),
                     "graph_launch_us_median": float(np.median(launch) * 1e6)}
        r = out[name]
        print(f"  {name:<22} {r['metadata_only_us_median']:7.1f} | {r['metadata_us_median']:7.1f} / "
              f"{r['graph_launch_us_median']:7.1f}")
    runner.graphs.pop(key, None)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama-3.1-8b")
    ap.add_argument("--shapes", default="1x4x4096,32x4x4096,64x8x2048,256x4x1024",
                    help="BSxWIDTHxKV,... (batch size on the ladder)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    ap.add_argument("--keep-memsets", action="store_true",
                    help="leave cuBLAS's memset nodes in the graphs (backends/aiter/graphfix.py)")
    ap.add_argument("--pin", type=int, default=None, metavar="CPU",
                    help="pin this process to one CPU (sched_setaffinity) and torch to one thread")
    args = ap.parse_args()
    if args.pin is not None:
        os.sched_setaffinity(0, {args.pin})

    import torch

    from backends.aiter import make_executor
    from backends.aiter.metadata import SPEC_CAPTURE_BS

    from backends.aiter.runner import wait_event

    if args.pin is not None:
        torch.set_num_threads(1)
    print(f"cpus allowed: {len(os.sched_getaffinity(0))} of {os.cpu_count()}; torch threads "
          f"{torch.get_num_threads()}")
    ex = make_executor(args.model, capture_bs=SPEC_CAPTURE_BS)
    runner = ex.runner
    runner.replace_memsets = not args.keep_memsets
    rng = np.random.default_rng(0)
    results = []
    print("host us per replayed step (median, p10-p90), by how the host waits for the previous step")
    print(f"{'bs':>4} {'w':>2} {'kv':>6} | spin-wait            | blocking wait        | "
          f"metadata us | launch us idle / GPU busy | replay GPU ms")

    def steps(st, bs, w, base, spin):
        """``args.steps`` replayed steps; the host waits for each (spinning or blocking)."""
        runner.spin_wait = spin
        host, gpu = [], []
        widths = np.full(bs, w)
        for step in range(args.steps + 20):
            kvs = base + step % 64  # lengths change every step
            t0 = time.perf_counter()
            launch, _ = runner.verify_launch(widths, kvs, mode="uniform", padded_bs=bs, launch_width=w)
            runner.replay_step(st, launch)
            t1 = time.perf_counter()
            wait_event(st.e1, spin)
            if step >= 20:
                host.append(t1 - t0)
                gpu.append(st.e0.elapsed_time(st.e1) / 1e3)
        return np.asarray(host) * 1e6, np.asarray(gpu)

    for spec in args.shapes.split(","):
        bs, w, kv = (int(x) for x in spec.split("x"))
        key = ("verify", bs, w)
        st = runner.capture(key)
        widths = np.full(bs, w)
        base = rng.integers(max(1, kv // 2), kv + 1, bs)
        c0, u0 = cpu_ticks(), resource.getrusage(resource.RUSAGE_SELF)
        h_spin, gpu = steps(st, bs, w, base, True)
        c1, u1 = cpu_ticks(), resource.getrusage(resource.RUSAGE_SELF)
        h_block, _ = steps(st, bs, w, base, False)
        c2, u2 = cpu_ticks(), resource.getrusage(resource.RUSAGE_SELF)
        inter = {"spin": host_interference(c0, u0, c1, u1),
                 "blocking": host_interference(c1, u1, c2, u2)}
        runner.spin_wait = True
        # the parts (spin-waiting): metadata alone (no GPU work); the graph launch alone, with
        # the GPU idle and with the GPU still busy (a spin kernel queued first): a launch that
        # took longer with the GPU busy would be waiting for the GPU, not working
        meta, idle, busy = [], [], []
        for step in range(args.steps):
            m, la = meta_then_launch(runner, st, widths, base + step % 64, bs, w)
            torch.cuda._sleep(2_000_000)  # about 1 ms of GPU time
            t3 = time.perf_counter()
            st.graph.replay()
            t4 = time.perf_counter()
            st.e1.record()
            wait_event(st.e1)
            meta.append(m)
            idle.append(la)
            busy.append(t4 - t3)
        row = {"bs": bs, "width": w, "kv": kv,
               "host_us_median": float(np.median(h_spin)),
               "host_us_p10": float(np.percentile(h_spin, 10)),
               "host_us_p90": float(np.percentile(h_spin, 90)),
               "host_us_median_blocking_wait": float(np.median(h_block)),
               "host_us_p90_blocking_wait": float(np.percentile(h_block, 90)),
               "metadata_us_median": float(np.median(meta) * 1e6),
               "graph_launch_us_median": float(np.median(idle) * 1e6),
               "graph_launch_us_median_gpu_busy": float(np.median(busy) * 1e6),
               "replay_gpu_ms_median": float(np.median(gpu) * 1e3), "steps": args.steps,
               "interference": inter}
        results.append(row)
        print(f"{bs:>4} {w:>2} {kv:>6} | {row['host_us_median']:6.1f} ({row['host_us_p10']:5.1f}-"
              f"{row['host_us_p90']:5.1f}) | {row['host_us_median_blocking_wait']:6.1f} (p90 "
              f"{row['host_us_p90_blocking_wait']:6.1f}) | {row['metadata_us_median']:11.1f} | "
              f"{row['graph_launch_us_median']:9.1f} / {row['graph_launch_us_median_gpu_busy']:9.1f}   | "
              f"{row['replay_gpu_ms_median']:8.3f}")
        print("       " + "; ".join(f"{k}: steal {v['steal_pct']:.2f}%, irq {v['irq_softirq_pct']:.2f}%, "
                                    f"machine busy {v['busy_pct']:.1f}%, involuntary switches "
                                    f"{v['involuntary_ctx_switches']}" for k, v in inter.items()))
        runner.graphs.pop(key, None)
    results.append({"after_wait_probe": after_wait_probe(runner, args.steps)})
    # what a graph launch costs by itself, by node count (tiny kernels)
    x = torch.zeros(16, device="cuda")
    for nodes in (1, 100, 400):
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            x.add_(1)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            for _ in range(nodes):
                x.add_(1)
        ts = []
        for i in range(200):
            t0 = time.perf_counter(); g.replay(); ts.append(time.perf_counter() - t0)
            torch.cuda.synchronize()
        print(f"graph of {nodes:>3} tiny kernels: launch {np.median(ts) * 1e6:.1f} us host")
        results.append({"graph_nodes": nodes, "launch_us_median": float(np.median(ts) * 1e6)})
    from backends.jit import jit_status

    print(f"metadata filler: {jit_status()}")
    cpu = cpu_reference_us()
    print(f"CPU reference (the metadata path alone, bs 256, no GPU work between): {cpu:.1f} us; "
          f"pure-Python loop of 10k additions: {python_loop_us():.1f} us")
    results.append({"cpu_reference_metadata_bs256_us": cpu, "python_loop_10k_us": python_loop_us()})
    fix = runner.describe()["graph_memsets"]
    print(f"graphs' memset nodes: {fix}")
    results.append({"graph_memsets": fix})
    worst = max(r["host_us_median"] for r in results if "host_us_median" in r)
    print(f"worst median host overhead: {worst:.1f} us (target <= 50 us): {'OK' if worst <= 50 else 'MISSED'}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
