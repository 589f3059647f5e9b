"""Benchmark: a synthetic trace of 1,000,000 requests with per-step lists, written and streamed back.

Three phases, each in its own process so that each peak memory (ru_maxrss) is its own:

1. write: ``traces.synth.synth`` generates and writes the trace in blocks (target: peak < 1 GB);
2. stream: ``iter_trace_batches`` streams it back and ``write_trace`` re-writes the batches with
   the same metadata; the copy must be byte-identical to the original (the round trip is exact)
   (target: peak < 1 GB);
3. arrays: ``read_trace_arrays`` loads it whole as compact arrays, as the engine does (reported).

    python benchmarks/bench_trace_roundtrip.py [-n 1000000] [--acceptance SPEC] [--keep DIR]

Lengths are resampled from the shipped Azure conversation head; acceptance defaults to the
shipped Spec-Bench EAGLE answers, so it runs without ../shared.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SAMPLES = ROOT / "traces" / "samples"
GB = 1024 ** 3


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024   # Linux: KiB


def phase_write(path: str, n: int, acceptance: str, seed: int) -> dict:
    from traces.synth import synth

    t0 = time.perf_counter()
    res = synth(path, n=n, rate=50.0,
                lengths=f"empirical:azure:{SAMPLES / 'azure2023_conv_head2000.csv'}",
                acceptance=acceptance, seed=seed)
    return {"seconds": time.perf_counter() - t0, "rows": res.rows, "steps": res.steps,
            "bytes": Path(path).stat().st_size, "peak_rss": peak_rss_bytes()}


def phase_stream(path: str, copy: str) -> dict:
    import pyarrow.parquet as pq

    from traces import iter_trace_batches, write_trace
    from traces.schema import decode_metadata

    meta = decode_metadata(pq.ParquetFile(path).schema_arrow.metadata)
    meta.pop("specsched.format_version", None)
    rows = steps = 0
    t0 = time.perf_counter()

    def batches():
        nonlocal rows, steps
        for b in iter_trace_batches(path):
            rows += b.num_rows
            steps += len(b.column("draft_tokens").values)
            yield b

    write_trace(batches(), copy, metadata=meta)
    seconds = time.perf_counter() - t0
    identical = Path(path).read_bytes() == Path(copy).read_bytes()
    return {"seconds": seconds, "rows": rows, "steps": steps, "identical": identical,
            "peak_rss": peak_rss_bytes()}


def phase_arrays(path: str) -> dict:
    from traces import read_trace_arrays

    t0 = time.perf_counter()
    ta = read_trace_arrays(path)
    seconds = time.perf_counter() - t0
    nbytes = (ta.arrival_s.nbytes + ta.prompt_tokens.nbytes + ta.output_tokens.nbytes
              + ta.step_offsets.nbytes + ta.draft_tokens.nbytes + ta.accepted_tokens.nbytes)
    return {"seconds": seconds, "rows": len(ta), "steps": ta.n_steps, "array_bytes": nbytes,
            "peak_rss": peak_rss_bytes()}


def child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True,
                         text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=1_000_000)
    ap.add_argument("--acceptance",
                    default=f"specbench:{SAMPLES / 'specbench_vicuna7b_eagle_lengths.jsonl'}")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", default=None, help="write the files here instead of a temp folder")
    ap.add_argument("--phase", choices=["write", "stream", "arrays"], help=argparse.SUPPRESS)
    ap.add_argument("--path", help=argparse.SUPPRESS)
    ap.add_argument("--copy", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.phase == "write":
        print(json.dumps(phase_write(args.path, args.n, args.acceptance, args.seed)))
        return 0
    if args.phase == "stream":
        print(json.dumps(phase_stream(args.path, args.copy)))
        return 0
    if args.phase == "arrays":
        print(json.dumps(phase_arrays(args.path)))
        return 0

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        path, copy = str(folder / "synth_1m.parquet"), str(folder / "synth_1m_copy.parquet")
        w = child(["--phase", "write", "--path", path, "-n", str(args.n), "--acceptance",
                   args.acceptance, "--seed", str(args.seed)])
        s = child(["--phase", "stream", "--path", path, "--copy", copy])
        r = child(["--phase", "arrays", "--path", path])
    ok = lambda b: "PASS" if b else "FAIL"   # noqa: E731
    print(f"requests         {w['rows']:,}")
    print(f"verify steps     {w['steps']:,}")
    print(f"file size        {w['bytes'] / 1e6:.1f} MB")
    print(f"write (synth)    {w['seconds']:.1f} s, peak RSS {w['peak_rss'] / 2**20:.0f} MiB "
          f"(target < 1 GiB: {ok(w['peak_rss'] < GB)})")
    print(f"stream + rewrite {s['seconds']:.1f} s, peak RSS {s['peak_rss'] / 2**20:.0f} MiB "
          f"(target < 1 GiB: {ok(s['peak_rss'] < GB)}); rows {s['rows']:,}, steps {s['steps']:,}")
    print(f"round trip       re-written file byte-identical: {ok(s['identical'])}")
    print(f"read_trace_arrays {r['seconds']:.1f} s, peak RSS {r['peak_rss'] / 2**20:.0f} MiB, "
          f"arrays {r['array_bytes'] / 2**20:.0f} MiB (reported, no target)")
    return 0 if (w["peak_rss"] < GB and s["peak_rss"] < GB and s["identical"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
