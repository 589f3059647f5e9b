"""Put an attention occupancy measured on a GPU into a profile recorded without it.

A profile's ``attention`` metadata (``backends.aiter.occupancy``) is what lets its lookups place a
batch with mixed KV lengths at its straggler-aware KV; a profile recorded before a kernel's
occupancy was measured has none and looks every batch up at its mean KV. The occupancy is a
property of the compiled kernel on a GPU model, so one measured for the same kernel, head layout
and GPU model (a ``benchmarks/bench_aiter_straggler.py`` JSON's ``summary.occupancy``, or another
profile's metadata) can be given to it: the profile's rows are unchanged, its ``attention`` is
the measured one and a note says where it came from. Refused when the source's kernel, heads per
GPU or GPU model differ from the profile's.

    python benchmarks/profile_attention.py backends/profiles/deepseek-v3__H200.parquet \\
        --from benchmarks/results/h200-2026-12-03/straggler_mla.json --model deepseek-v2-lite
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.profile import read_profile, write_profile  # noqa: E402
from traces.errors import SpecschedError  # noqa: E402


def source_occupancy(path: str, model: str | None) -> tuple[dict, dict, str]:
    """(occupancy, the source's model fields, a description) of a straggler JSON or a profile."""
    if path.endswith(".parquet"):
        _, meta = read_profile(path)
        if not meta.get("attention"):
            raise SpecschedError("this profile carries no attention occupancy", path=path)
        gpu = (meta.get("gpu") or {})
        return meta["attention"], meta["model"], f"{path} (GPU {gpu.get('uuid', '?')})"
    from backends.models import load_model

    d = json.loads(Path(path).read_text())
    occ = (d.get("summary") or {}).get("occupancy")
    if not occ:
        raise SpecschedError("no summary.occupancy (not a bench_aiter_straggler.py JSON?)",
                             path=path)
    if not model:
        raise SpecschedError("a straggler JSON does not name its model: give --model", path=path)
    m = load_model(model)
    return occ, {"heads": m.heads, "tp": m.tp, "attention": m.attention,
                 "kv_lora_rank": m.kv_lora_rank}, f"{path} ({model})"


def heads_per_gpu(model: dict) -> int:
    return int(model["heads"]) // int(model.get("tp") or 1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    ap.add_argument("--from", dest="source", required=True,
                    help="a bench_aiter_straggler.py JSON or a profile with attention metadata")
    ap.add_argument("--model", help="the straggler JSON's model (as --model of the bench)")
    ap.add_argument("-o", "--out", help="where to write (default: the profile itself)")
    a = ap.parse_args(argv)
    try:
        table, meta = read_profile(a.profile)
        occ, src_model, desc = source_occupancy(a.source, a.model)
        model = meta["model"]
        mla = model.get("attention") == "mla"
        if (occ.get("kernel") == "mla_decode") != mla:
            raise SpecschedError(f"the source's kernel ({occ.get('kernel', 'unified_attention')}) "
                                 f"is not this profile's ({'MLA' if mla else 'dense'})",
                                 path=a.source)
        if heads_per_gpu(src_model) != heads_per_gpu(model):
            raise SpecschedError(f"the source has {heads_per_gpu(src_model)} heads a GPU, the "
                                 f"profile {heads_per_gpu(model)}", path=a.source)
        lora = model.get("kv_lora_rank")
        if mla and src_model.get("kv_lora_rank", lora) != lora:
            raise SpecschedError("the source's latent width differs from the profile's",
                                 path=a.source)
        if int(occ["sms"]) != int(meta["gpu"].get("multiprocessors", occ["sms"])):
            raise SpecschedError(f"the source's GPU has {occ['sms']} SMs, the profile's "
                                 f"{meta['gpu'].get('multiprocessors')}", path=a.source)
        notes = list(meta.get("notes") or [])
        notes.append(f"attention occupancy {occ['slots_per_sm']} per SM copied from {desc}: "
                     "the same kernel, heads a GPU and GPU model; the rows are unchanged")
        out = write_profile(table, a.out or a.profile, {**meta, "attention": occ, "notes": notes},
                            inputs=(a.source,))
    except SpecschedError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {out}: attention {occ['slots_per_sm']} per SM ({desc})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
