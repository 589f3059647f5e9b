"""The live AITER executor: every batch the engine asks about is run and timed on the GPU."""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from backends.aiter import metadata as md
from backends.aiter.graph_capture import CAPTURE_MODES, capture_order
from backends.protocol import DraftBatch, DraftExtendBatch, PrefillBatch, VerifyBatch, VerifyTiming
from traces.errors import SpecschedError

__all__ = ["AiterExecutor", "make_executor", "comm_model_for", "CALL_KINDS"]

#: the executor calls whose wall time ``describe()["wall"]["by_call"]`` accounts
CALL_KINDS = ("verify", "draft", "draft_extend", "prefill")


def comm_model_for(gpu: str | None, latency_s: float | None = None, bus_bw: float | None = None):
    """The modelled all-reduce for ``gpu`` (``backends.hardware`` sheet values when present)."""
    from backends.aiter.model import CommModel

    base = CommModel()
    lat, bw = base.latency_s, base.bus_bw
    if gpu:
        try:
            from backends.hardware import get_gpu

            sheet = get_gpu(gpu)
            lat = float(sheet.allreduce_latency_s)
            bw = float(sheet.link_bw * sheet.achievable_link_frac)
        except Exception:  # noqa: BLE001 - no sheet: keep the defaults
            pass
    return CommModel(latency_s=float(latency_s if latency_s is not None else lat),
                     bus_bw=float(bus_bw if bus_bw is not None else bw))


class AiterExecutor:
    """Implements :class:`backends.protocol.Executor` by running each batch on the GPU.

    ``verify``: a captured graph keyed by (padded batch size, width) when the batch says
    ``graph`` (captured on first use), else an eager launch.  ``unsafe-derived`` batches run the
    uniform metadata of ``launch_width`` (what SGLang derives), so they time exactly what would
    run; ``misattributed_rows`` is always filled for them and, with ``check_unsafe=True``,
    ``max_abs_error`` compares layer 0's attention output under that metadata with the exact
    per-request metadata.  ``draft``: ``passes`` replays of a one-step draft graph, the KV
    growing by one each step.  ``draft_extend``: the draft model over ``width`` rows per request,
    a graph keyed by (padded batch size, width) or eager.  ``prefill``: eager, ragged.
    Tensor-parallel communication is modelled (``extra["comm_s"]``), everything else measured.
    :meth:`wall_account` says where the host's wall time went (``describe()["wall"]``).
    """

    name = "aiter"

    def __init__(self, runner: Any, *, model: Any, gpu: str | None, check_unsafe: bool = False,
                 setup_s: float | None = None) -> None:
        self.runner = runner
        self.model = model
        self.gpu = gpu
        self.check_unsafe = bool(check_unsafe)
        self.calls = {"verify": 0, "draft": 0, "draft_extend": 0, "prefill": 0, "graph": 0,
                      "eager": 0}
        #: wall-clock accounting (host perf_counter around each call; no added synchronisation)
        self.setup_s = setup_s
        self._first_call: float | None = None
        self._acc = {k: {"wall_s": 0.0, "gpu_s": 0.0, "comm_s": 0.0} for k in CALL_KINDS}
        self._setup_captures = (len(runner.capture_s), float(runner.wall_s["capture"]))

    def latency_table(self):
        return None

    def _start(self) -> float:
        """``perf_counter`` now, remembered as the first call's start when it is one."""
        t0 = time.perf_counter()
        if self._first_call is None:
            self._first_call = t0
        return t0

    def _book(self, kind: str, t0: float, timings: Sequence[Any] = ()) -> None:
        """Add a call of ``kind`` begun at ``t0`` and the GPU (events) and modelled
        communication seconds of its ``timings`` to the account."""
        a = self._acc[kind]
        a["wall_s"] += time.perf_counter() - t0
        for t in timings:
            a["gpu_s"] += float(t.gpu_s)
            a["comm_s"] += float(t.comm_s)

    def verify(self, batch: VerifyBatch) -> VerifyTiming:
        t0 = self._start()
        widths = np.asarray(batch.widths, dtype=np.int64)
        kv = np.asarray(batch.kv_lens, dtype=np.int64)
        graph = bool(batch.graph)
        pbs = int(batch.bs_padded) if graph else int(batch.bs_real)
        launch, key = self.runner.verify_launch(widths, kv, mode=batch.mode, padded_bs=pbs,
                                                launch_width=int(batch.launch_width))
        # an eager launch may meet a Triton specialisation not compiled yet: it is held
        # (queued timing), so a compile stall starves the hold and the run is repeated; only a
        # launch that cannot be held yet (the first of its kind) runs once untimed first
        t = self.runner.run(key, launch, graph=graph, warmup=None)[0]
        self.calls["verify"] += 1
        self.calls["graph" if graph else "eager"] += 1
        mis = err = None
        if batch.mode == "unsafe-derived":
            mis, err = self.unsafe_diagnostic(widths, kv, int(batch.launch_width))
        self._book("verify", t0, (t,))
        return VerifyTiming(latency_s=float(t.latency_s), max_abs_error=err, misattributed_rows=mis,
                            extra={"gpu_s": t.gpu_s, "comm_s": t.comm_s, "host_s": t.host_s,
                                   "graph": graph, "key": list(key[:3])})

    def unsafe_diagnostic(self, widths: np.ndarray, kv: np.ndarray,
                          launch_width: int) -> tuple[int, float | None]:
        """(misattributed rows, max |output error| or ``None``) of an unsafe-derived launch at
        ``launch_width``: the error only with ``check_unsafe`` and a mixed batch (layer 0's
        attention under the derived and the exact metadata)."""
        v = md.misattribution(widths, launch_width, kv)
        if v is None or not self.check_unsafe:
            return (0 if v is None else v.misattributed_rows), None
        from backends.aiter.uniformity import attention_error

        return v.misattributed_rows, attention_error(self.runner, widths, kv,
                                                     launch_width)["max_abs_error"]

    def draft(self, batch: DraftBatch) -> float:
        t0 = self._start()
        kv = np.asarray(batch.kv_lens, dtype=np.int64)
        graph = bool(batch.graph)
        pbs = int(batch.bs_padded) if graph else int(batch.bs_real)
        runs = [self.draft_pass_timing(kv + p, pbs, graph) for p in range(int(batch.passes))]
        self.calls["draft"] += 1
        self._book("draft", t0, runs)
        return sum(float(t.latency_s) for t in runs)

    def draft_extend(self, batch: DraftExtendBatch) -> float:
        if self.runner.draft is None:
            raise SpecschedError("the aiter runner was built without its draft model")
        t0 = self._start()
        graph = bool(batch.graph)
        pbs = int(batch.bs_padded) if graph else int(batch.bs_real)
        launch, key = self.runner.extend_launch(np.asarray(batch.kv_lens, dtype=np.int64), pbs,
                                                int(batch.width))
        t = self.runner.run(key, launch, graph=graph, warmup=None)[0]
        self.calls["draft_extend"] += 1
        self.calls["graph" if graph else "eager"] += 1
        self._book("draft_extend", t0, (t,))
        return float(t.latency_s)

    def draft_pass(self, kv_lens: np.ndarray, padded_bs: int, graph: bool) -> float:
        return float(self.draft_pass_timing(kv_lens, padded_bs, graph).latency_s)

    def draft_pass_timing(self, kv_lens: np.ndarray, padded_bs: int, graph: bool):
        """The :class:`~backends.aiter.timing.Timing` of one draft decode step."""
        launch, key = self.runner.draft_launch(kv_lens, padded_bs)
        return self.runner.run(key, launch, graph=graph, warmup=None)[0]

    def prefill(self, batch: PrefillBatch) -> float:
        t0 = self._start()
        self.calls["prefill"] += 1
        tokens = np.asarray(batch.tokens, dtype=np.int64)
        keep = tokens > 0
        if not np.any(keep):
            self._book("prefill", t0)
            return 1e-6
        # prefill is eager: a new token count can hit a Triton specialisation that is not
        # compiled yet (seen: 0.5-3.9 s stalls); held, such a stall starves the hold and the run
        # is repeated, so only the first prefill (no estimate to hold with yet) warms up untimed
        t = self.runner.prefill(tokens[keep], np.asarray(batch.prefix, dtype=np.int64)[keep],
                                warmup=None)[0]
        self._book("prefill", t0, (t,))
        return float(t.latency_s)

    def wall_account(self) -> dict[str, Any]:
        """Where the host's wall time went so far (``describe()["wall"]``; docs/aiter.md,
        *Wall time*): seconds, rounded to the microsecond, non-deterministic by nature.

        ``span_s`` runs from the first executor call to now; ``calls_s`` is the part spent
        inside executor calls, split into graph captures made during calls, untimed warm-up
        runs, re-runs after a short hold, timed runs (``gpu_s`` of it measured by events,
        ``hold_s`` asked of hold kernels) and ``executor_other_s`` (metadata, routing plans,
        buffers); ``engine_s = span_s - calls_s`` is the engine's own time between calls."""
        r = self.runner
        span = 0.0 if self._first_call is None else time.perf_counter() - self._first_call
        calls = sum(a["wall_s"] for a in self._acc.values())
        n0, s0 = self._setup_captures
        cap_s = float(r.wall_s["capture"]) - s0
        parts = {k: float(r.wall_s[k]) for k in ("warmup", "rerun", "timed")}
        other = calls - cap_s - sum(parts.values())
        ms = lambda x: round(float(x), 6)  # noqa: E731
        by_kind = {k: {"count": v["count"], "s": ms(v["s"])} for k, v in r.captures_by_kind().items()}
        return {
            "setup_s": None if self.setup_s is None else ms(self.setup_s),
            "span_s": ms(span),
            "calls_s": ms(calls),
            "engine_s": ms(max(span - calls, 0.0)),
            "captures": {"count": len(r.capture_s) - n0, "s": ms(cap_s),
                         "at_setup": {"count": n0, "s": ms(s0)}, "by_kind": by_kind,
                         "phase_s": {k: ms(v) for k, v in r.capture_phase_s.items()}},
            "warmup_s": ms(parts["warmup"]),
            "rerun_s": ms(parts["rerun"]),
            "timed_s": ms(parts["timed"]),
            "gpu_s": ms(sum(a["gpu_s"] for a in self._acc.values())),
            "hold_s": ms(r.hold_s),
            "executor_other_s": ms(other),
            "comm_s": ms(sum(a["comm_s"] for a in self._acc.values())),
            "by_call": {k: {"calls": self.calls[k], **{f: ms(v) for f, v in a.items()}}
                        for k, a in self._acc.items()},
        }

    def describe(self) -> dict[str, Any]:
        from backends.aiter import bridge

        k = self.runner.kernels
        r = self.runner.describe()
        tp = r["geometry"]["tp"]
        caveats = ["GEMMs run through torch (cuBLAS); attention, RMSNorm and rope+KV write are AITER's Triton kernels"]
        if r.get("draft_role"):
            rows = "each request's last row" if r["extend_logits"] == "last" else "every row"
            caveats.append(f"draft model: {r['draft_role']} (one layer + LM head); draft-extend "
                           f"logits for {rows}; every request extends by the batch's width "
                           "(SGLang's eager pass extends each by its accepted tokens + 1)")
        if tp > 1:
            caveats.append(f"tp {tp}: one GPU's shard is run; the all-reduces are modelled "
                           f"({r['comm_model']['latency_s'] * 1e6:.1f} us + bytes / "
                           f"{r['comm_model']['bus_bw'] / 1e9:.0f} GB/s), not measured")
        caveats.extend(self.timing_caveats())
        return {
            "backend": self.name,
            "model": getattr(self.model, "name", str(self.model)),
            "tp": tp,
            "gpu": gpu_info(),
            "versions": bridge.versions(),
            "kernels": dict(k.modules),
            "runtime": k.runtime,
            "runner": r,
            "calls": dict(self.calls),
            "wall": self.wall_account(),
            "caveats": caveats,
        }

    def timing_caveats(self) -> list[str]:
        """Warnings about the timings: launches that outran their hold on every attempt, and
        graphs captured during the run rather than at start-up (empty when neither)."""
        r = self.runner
        out = []
        late = len(r.capture_s) - self._setup_captures[0]
        if late > 0:
            out.append(f"{late} graphs were captured during the run, on first use, not at "
                       "start-up as SGLang captures them: the graph captured last sets how fast "
                       "every graph replays, so later steps may be timed in another state than "
                       "SGLang's (docs/aiter.md, Timing; backend.capture = all avoids it)")
        n = int(getattr(r, "starved_runs", 0))
        if n == 0:
            return out
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(getattr(r, "starved_by_kind", {}).items()))
        return out + [f"{n} timed launches ({kinds}) outran their hold on every attempt: the host "
                      "took longer to queue them than the hold lasted, so their times include "
                      "gaps where the GPU waited for the host (docs/aiter.md, Timing)"]


def gpu_info() -> dict[str, Any]:
    """Name, driver, memory and identity of the current GPU.

    ``uuid`` (the GPU's own) and ``host`` let a report say whether a profile and a live run were
    recorded on the same machine or on another one."""
    import socket
    import subprocess

    import torch

    if not torch.cuda.is_available():
        return {"name": "none", "driver": "", "memory_bytes": 0}
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    driver = ""
    try:
        res = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        driver = res.stdout.strip().splitlines()[0] if res.returncode == 0 and res.stdout.strip() else ""
    except Exception:  # noqa: BLE001 - ROCm or no nvidia-smi
        driver = ""
    return {"name": props.name, "driver": driver, "memory_bytes": int(props.total_memory),
            "multiprocessors": int(props.multi_processor_count),
            "capability": f"{props.major}.{props.minor}",
            "uuid": str(getattr(props, "uuid", "")), "host": socket.gethostname()}


def capture_all(runner: Any) -> None:
    """Capture every graph a runner can replay now, in SGLang's start-up order
    (:func:`capture_order`; ``capture="all"``)."""
    for key in capture_order(runner.capture_bs, runner.capture_widths,
                             draft=runner.draft is not None,
                             num_draft_tokens=runner.num_draft_tokens):
        runner.capture(key)


def check_capture(mode: str) -> str:
    """``mode`` if it is a capture mode, else an error naming the choices."""
    if mode not in CAPTURE_MODES:
        raise SpecschedError(f"aiter backend: capture {mode!r}: choose one of "
                             f"{', '.join(CAPTURE_MODES)}")
    return mode


def make_executor(model: Any, *, page_size: int = 16,
                  capture_bs: Sequence[int] = md.SPEC_CAPTURE_BS,
                  capture_widths: Sequence[int] = md.DEFAULT_CAPTURE_WIDTHS,
                  max_context: int = md.DEFAULT_MAX_CONTEXT,
                  mla_num_draft_tokens: int | None = None, **opts: Any) -> AiterExecutor:
    """The live AITER executor for ``model`` (a ``ModelShape``, preset name or config.json path).

    Options: ``gpu`` (spec sheet for the modelled all-reduce, default ``"H200"``),
    ``check_unsafe`` (measure the numerical error of unsafe-derived launches), ``dtype``
    (``"bfloat16"``), ``kv_pool_gib`` (physical KV pool; default: what fits), ``seed``,
    ``capture`` (``"lazy"``, the default here: graphs on first use; ``"all"``: the whole
    ladder x widths now, in SGLang's start-up order, as ``simulate`` does by default),
    ``num_draft_tokens`` (SGLang's start-up draft count: the padded rows' fill value and the
    draft-extend width captured with ``capture="all"``), ``extend_logits`` (``"last"``: a
    draft-extend pass computes logits for each request's last row, as SGLang's EAGLE worker;
    ``"all"``: every row, as its overlap worker), ``allreduce_latency_s`` / ``allreduce_bus_bw``
    (override the modelled all-reduce).  The draft model's kind is the model's ``draft_kind``.

    Raises :class:`SpecschedError` at once when no CUDA/ROCm GPU is usable.
    """
    from backends.aiter import bridge

    t0 = time.perf_counter()  # the executor's setup_s: weights, KV pool, start-up captures
    bridge.require_gpu()
    if not hasattr(model, "layers"):
        from backends.models import load_model

        model = load_model(model)
    if getattr(model, "attention", "mha") == "mla" or getattr(model, "experts", 0):
        # MLA (+ MoE) models: their own runner (backends/aiter/mla_runner.py)
        from backends.aiter.mla_runner import make_mla_executor

        return make_mla_executor(model, page_size=page_size, capture_bs=capture_bs,
                                 capture_widths=capture_widths, max_context=max_context,
                                 mla_num_draft_tokens=mla_num_draft_tokens, **opts)
    unknown = set(opts) - {"gpu", "check_unsafe", "dtype", "kv_pool_gib", "seed", "capture",
                           "num_draft_tokens", "allreduce_latency_s", "allreduce_bus_bw",
                           "extend_logits"}
    if unknown:
        raise SpecschedError(f"aiter backend: unknown option(s) {sorted(unknown)}")
    gpu = opts.get("gpu", "H200")
    comm = comm_model_for(gpu, opts.get("allreduce_latency_s"), opts.get("allreduce_bus_bw"))
    pool = opts.get("kv_pool_gib")
    from backends.aiter.runner import Runner

    runner = Runner(model, page_size=page_size, max_context=max_context, capture_bs=capture_bs,
                    capture_widths=capture_widths,
                    num_draft_tokens=opts.get("num_draft_tokens") or mla_num_draft_tokens,
                    dtype=opts.get("dtype", "bfloat16"),
                    kv_pool_bytes=None if pool is None else int(float(pool) * (1 << 30)),
                    seed=int(opts.get("seed", 0)), comm=comm,
                    extend_logits=opts.get("extend_logits", "last"))
    if check_capture(opts.get("capture", "lazy")) == "all":
        capture_all(runner)
    return AiterExecutor(runner, model=model, gpu=gpu, check_unsafe=bool(opts.get("check_unsafe", False)),
                         setup_s=time.perf_counter() - t0)
