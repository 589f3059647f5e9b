"""Does one of AITER's Triton MLA kernels run on this GPU, and what does an MLA verify cost?

AITER's MLA decode kernels used by SGLang's MLA verify path (``mla_decode_fwd``) are HIP/ASM
kernels (ROCm only).  AITER also ships a Triton MLA decode (``aiter.ops.triton.mla_decode_rope.
decode_attention_fwd_grouped_rope``: absorbed latent attention, one query row per launch row,
token-level ``kv_indptr``/``kv_indices`` like the MLA metadata).  This probe runs it through the
bridge on DeepSeek-V3's per-GPU shapes at tp 8 (16 heads, kv_lora_rank 512, rope 64), a verify of
``width`` rows per request laid out as ``bs * width`` decode rows (row j of a request sees its
cached tokens plus drafts ``<= j``), checks it against a float32 reference and times it.  It is a
probe, not the executor's MLA path: the ROCm kernel reads a request's KV once for all its rows.

    python benchmarks/bench_aiter_mla_probe.py
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIG = {"fwd_grouped_kernel_stage1_rope": {"BLOCK_N": 32, "BLOCK_H": 16, "num_stages": 1},
          "fwd_kernel_stage2": {"num_stages": 2}}


def run(bs: int, width: int, kv: int, heads: int, lora: int, rope: int, splits: int, device, dtype,
        check: bool, reps: int):
    import torch

    from backends.aiter import bridge

    k = bridge.load_kernels()
    if k.mla_decode is None:
        raise RuntimeError("aiter.ops.triton.mla_decode_rope is not importable")
    g = torch.Generator(device=device).manual_seed(0)
    from backends.aiter.mla_kernels import contiguous_decode_rows

    rows = bs * width
    # request r owns tokens [r*(kv+width), (r+1)*(kv+width)) of the latent cache
    _, indptr, indices = contiguous_decode_rows(bs, width, kv)
    tokens = bs * (kv + width)
    kbuf = torch.empty((tokens, 1, lora + rope), device=device, dtype=dtype).normal_(0, 1, generator=g)
    vbuf = kbuf[..., :lora]
    q = torch.empty((rows, heads, lora + rope), device=device, dtype=dtype).normal_(0, 1, generator=g)
    o = torch.empty((rows, heads, lora), device=device, dtype=dtype)
    logits = torch.empty((rows, heads, splits, lora + 1), device=device, dtype=torch.float32)
    kvi = torch.as_tensor(indptr, dtype=torch.int32, device=device)
    kvx = torch.as_tensor(indices, dtype=torch.int32, device=device)
    scale = 1.0 / np.sqrt(192)  # qk_nope + qk_rope head dim of DeepSeek-V3

    def call():
        cfg = {kk: dict(vv) for kk, vv in CONFIG.items()}
        k.mla_decode(q, kbuf, vbuf, o, kvi, kvx, None, lora, rope, None, None, logits, splits, scale,
                     0.0, False, False, cfg)

    call()
    err = None
    if check:
        ref = torch.empty((rows, heads, lora), dtype=torch.float32, device=device)
        for r in range(rows):
            kk = kbuf[kvx[indptr[r]:indptr[r + 1]].long(), 0].float()
            s = (q[r].float() @ kk.T) * scale
            ref[r] = torch.softmax(s, -1) @ kk[:, :lora]
        err = float((o.float() - ref).abs().max())
    t = None
    if device.type == "cuda":
        import torch

        call()
        times = []
        for _ in range(reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record(); call(); e1.record(); e1.synchronize()
            times.append(e0.elapsed_time(e1) / 1e3)
        t = float(np.median(times))
    read = tokens * (lora + rope) * kbuf.element_size()
    return {"bs": bs, "width": width, "kv": kv, "heads": heads, "max_abs_error": err,
            "latency_s": t, "kv_bytes_once": read,
            "effective_tb_s_if_read_once": None if not t else read / t / 1e12}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="1x4x4096,32x2x4096,64x4x2048")
    ap.add_argument("--json", default=None)
    ap.add_argument("--tiny", action="store_true", help="tiny shapes (CPU / Triton interpreter)")
    args = ap.parse_args()
    import torch

    from backends.aiter import bridge

    cpu = bridge.runtime() == "interpreter"
    device = torch.device("cpu" if cpu else "cuda")
    dtype = torch.float16 if cpu else torch.bfloat16
    res = []
    if args.tiny or cpu:
        res.append(run(2, 2, 20, 16, 64, 16, 2, device, dtype, True, 1))
    else:
        res.append(run(2, 4, 300, 16, 512, 64, 4, device, dtype, True, 3))
        for spec in args.shapes.split(","):
            bs, w, kv = (int(x) for x in spec.split("x"))
            res.append(run(bs, w, kv, 16, 512, 64, 16, device, dtype, False, 10))
    for r in res:
        print(json.dumps(r))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
