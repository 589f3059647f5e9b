"""GPU spec sheets for the roofline backend: datasheet figures, kept apart from measured ones.

Every datasheet value carries its source.  Only the H200 has *measured* ceilings (taken on this
workplace's machines; see ``GPU.measured``).  The roofline never uses a datasheet peak directly:
it uses ``achievable_*`` figures, a stated fraction of the peak, justified in
``GPU.achievable_basis``.

Units: bytes, bytes per second, FLOP per second.  "GB" in a datasheet is 10**9 bytes for
bandwidth; memory capacity is the usable figure the runtime reports where it was read (H200,
H100), else the datasheet capacity read as GiB (HBM stacks come in powers of two; the runtime
keeps a little back, which ``models.kv_capacity_tokens`` covers with its context reserve).

Interconnect figures are *per GPU, per direction*: what one GPU can push into the fabric while it
receives as much.  Vendors quote bidirectional totals (NVLink 4: 900 GB/s = 450 GB/s each way;
MI300X: 7 Infinity Fabric links x 128 GB/s bidirectional = 448 GB/s each way).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from traces.errors import SpecschedError

__all__ = ["GPU", "GPUS", "get_gpu"]

_GIB = 1 << 30
_MIB = 1 << 20


@dataclass(frozen=True)
class GPU:
    """One accelerator's spec sheet.

    ``*_flops`` are dense (no sparsity) tensor-core peaks.  ``achievable_bw_frac`` and
    ``achievable_flops_frac`` turn the peaks into the ceilings the roofline uses; the reason for
    each is in ``achievable_basis``.  ``measured`` holds figures measured on real hardware (with
    how and where), never mixed into the datasheet fields.
    """

    name: str
    vendor: str
    memory_bytes: int
    hbm_bw: float
    bf16_flops: float
    fp8_flops: float
    l2_bytes: int
    llc_bytes: int
    link_bw: float
    interconnect: str
    achievable_bw_frac: float
    achievable_flops_frac: float
    achievable_link_frac: float
    allreduce_latency_s: float
    kernel_launch_s: float
    graph_launch_s: float
    achievable_basis: str
    sources: Mapping[str, str] = field(default_factory=dict)
    measured: Mapping[str, Any] = field(default_factory=dict)

    @property
    def achievable_bw(self) -> float:
        """HBM bytes per second the roofline assumes a kernel can stream."""
        return self.hbm_bw * self.achievable_bw_frac

    @property
    def achievable_bf16_flops(self) -> float:
        return self.bf16_flops * self.achievable_flops_frac

    @property
    def achievable_fp8_flops(self) -> float:
        return self.fp8_flops * self.achievable_flops_frac

    @property
    def achievable_link_bw(self) -> float:
        return self.link_bw * self.achievable_link_frac

    def achievable_flops(self, weight_bytes: int) -> float:
        """Tensor-core rate for GEMMs whose weights have ``weight_bytes`` per element (1 = fp8)."""
        return self.achievable_fp8_flops if weight_bytes == 1 else self.achievable_bf16_flops

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "vendor": self.vendor, "memory_bytes": self.memory_bytes,
            "hbm_bw": self.hbm_bw, "bf16_flops": self.bf16_flops, "fp8_flops": self.fp8_flops,
            "l2_bytes": self.l2_bytes, "llc_bytes": self.llc_bytes, "link_bw": self.link_bw,
            "interconnect": self.interconnect,
            "achievable_bw_frac": self.achievable_bw_frac,
            "achievable_flops_frac": self.achievable_flops_frac,
            "achievable_link_frac": self.achievable_link_frac,
            "allreduce_latency_s": self.allreduce_latency_s,
            "kernel_launch_s": self.kernel_launch_s, "graph_launch_s": self.graph_launch_s,
            "achievable_basis": self.achievable_basis,
            "sources": dict(self.sources), "measured": dict(self.measured),
        }


# Launch costs shared by all sheets (host side; documented in docs/backends.md):
#  - graph replay: ~5 us of host time to replay an (empty) CUDA graph, measured on the H200
#    (shared notes, aiter-on-nvidia.md); used for every graph-replayed pass.
#  - eager kernel launch: ~4 us per kernel; PyTorch's eager dispatch + cudaLaunchKernel is
#    typically 3-10 us per op.  This is an estimate, not a measurement here.
_GRAPH_LAUNCH_S = 5e-6
_KERNEL_LAUNCH_S = 4e-6
# One all-reduce of a small message across the GPUs of one host: ~10 us (NCCL/custom all-reduce
# latency floor for 8 GPUs; an estimate).  The bandwidth part is modelled as a ring.
_ALLREDUCE_LATENCY_S = 10e-6

_H200_BASIS = (
    "Measured on this workplace's H200 (2026-10-28 and 2026-11-04): a device-to-device copy moved "
    "~4.3 TB/s counting read+write (0.90 of the 4.8 TB/s datasheet) and an 8192^3 bf16 matmul ran "
    "at 769-798 TFLOP/s on random data (0.80 of 989 TFLOP/s). The roofline uses 0.90 of peak "
    "bandwidth and 0.80 of peak tensor FLOP/s. Link: 0.80 of the per-direction NVLink rate "
    "(an assumption: NCCL ring all-reduce bus bandwidth on 8-GPU NVSwitch hosts is typically "
    "below the link rate); not measured here."
)
_HOPPER_BASIS = (
    "Not measured here. Same Hopper chip as the H200, so the H200's measured fractions are used: "
    "0.90 of peak bandwidth, 0.80 of peak tensor FLOP/s, 0.80 of the per-direction NVLink rate."
)
_AMD_BASIS = (
    "Not measured anywhere in this project: the H200's measured fractions (0.90 bandwidth, "
    "0.80 FLOP/s, 0.80 link) are applied unchanged. Treat MI300X/MI355X roofline figures as "
    "optimistic until a profile is recorded on the chip."
)

_NV_H100 = "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM5 column), nvidia.com/en-us/data-center/h100/"
_NV_H200 = "NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column), nvidia.com/en-us/data-center/h200/"
_NV_HOPPER_WP = "NVIDIA H100 Tensor Core GPU Architecture whitepaper (50 MB L2 on H100 SXM5)"
_AMD_300 = "AMD Instinct MI300X accelerator datasheet, amd.com/en/products/accelerators/instinct/mi300/mi300x.html"
_AMD_355 = "AMD Instinct MI355X accelerator datasheet, amd.com/en/products/accelerators/instinct/mi350/mi355x.html"

GPUS: Mapping[str, GPU] = MappingProxyType({
    "H200": GPU(
        name="H200", vendor="NVIDIA",
        memory_bytes=143771 * _MIB, hbm_bw=4.8e12,
        bf16_flops=989.4e12, fp8_flops=1978.9e12,
        l2_bytes=50 * 10**6, llc_bytes=50 * 10**6,
        link_bw=450e9, interconnect="NVLink 4 (18 links, 900 GB/s bidirectional)",
        achievable_bw_frac=0.90, achievable_flops_frac=0.80, achievable_link_frac=0.80,
        allreduce_latency_s=_ALLREDUCE_LATENCY_S, kernel_launch_s=_KERNEL_LAUNCH_S,
        graph_launch_s=_GRAPH_LAUNCH_S, achievable_basis=_H200_BASIS,
        sources={
            "memory_bytes": "nvidia-smi on this workplace's H200: 143771 MiB (datasheet: 141 GB HBM3e)",
            "hbm_bw": _NV_H200 + ": 4.8 TB/s",
            "bf16_flops": _NV_H200 + ": BF16 1,979 TFLOPS with sparsity, i.e. 989.4 dense",
            "fp8_flops": _NV_H200 + ": FP8 3,958 TFLOPS with sparsity, i.e. 1,978.9 dense",
            "l2_bytes": _NV_HOPPER_WP + " (same die as H100; torch reports 60 MB on this workplace's H200, see measured)",
            "link_bw": _NV_H200 + ": NVLink 900 GB/s (bidirectional), 450 GB/s each way",
        },
        measured={
            "copy_bw_read_plus_write": {"value": 4.3e12, "how": "torch device-to-device copy, 8.6 GB in 2.0 ms, bytes read+written", "where": "workplace nvidia-h200, 2026-10-28 and 2026-11-04"},
            "bf16_matmul_flops": {"value": 788e12, "how": "8192^3 bf16 torch.matmul on random data, mean of 10 after 3 warm-ups (769-798 across machines; 894 on zeros)", "where": "workplace nvidia-h200, 2026-10-28 and 2026-11-04"},
            "l2_bytes_reported": {"value": 60 * 10**6, "how": "torch.cuda.get_device_properties", "where": "workplace nvidia-h200, 2026-10-28"},
            "memory_bytes": {"value": 143771 * _MIB, "how": "nvidia-smi", "where": "workplace nvidia-h200, 2026-10-27"},
            "graph_replay_host_s": {"value": 5e-6, "how": "replay of an empty CUDA graph", "where": "shared notes aiter-on-nvidia.md"},
        },
    ),
    "H100": GPU(
        name="H100", vendor="NVIDIA",
        memory_bytes=81559 * _MIB, hbm_bw=3.35e12,
        bf16_flops=989.4e12, fp8_flops=1978.9e12,
        l2_bytes=50 * 10**6, llc_bytes=50 * 10**6,
        link_bw=450e9, interconnect="NVLink 4 (18 links, 900 GB/s bidirectional)",
        achievable_bw_frac=0.90, achievable_flops_frac=0.80, achievable_link_frac=0.80,
        allreduce_latency_s=_ALLREDUCE_LATENCY_S, kernel_launch_s=_KERNEL_LAUNCH_S,
        graph_launch_s=_GRAPH_LAUNCH_S, achievable_basis=_HOPPER_BASIS,
        sources={
            "memory_bytes": "80 GB HBM3 (" + _NV_H100 + "); 81559 MiB as nvidia-smi reports an H100 80GB HBM3 (public output, not read here)",
            "hbm_bw": _NV_H100 + ": 3.35 TB/s",
            "bf16_flops": _NV_H100 + ": BF16 1,979 TFLOPS with sparsity, i.e. 989.4 dense",
            "fp8_flops": _NV_H100 + ": FP8 3,958 TFLOPS with sparsity, i.e. 1,978.9 dense",
            "l2_bytes": _NV_HOPPER_WP,
            "link_bw": _NV_H100 + ": NVLink 900 GB/s (bidirectional), 450 GB/s each way",
        },
    ),
    "MI300X": GPU(
        name="MI300X", vendor="AMD",
        memory_bytes=192 * _GIB, hbm_bw=5.3e12,
        bf16_flops=1307.4e12, fp8_flops=2614.9e12,
        l2_bytes=32 * _MIB, llc_bytes=256 * _MIB,
        link_bw=448e9, interconnect="Infinity Fabric (7 links x 128 GB/s bidirectional)",
        achievable_bw_frac=0.90, achievable_flops_frac=0.80, achievable_link_frac=0.80,
        allreduce_latency_s=_ALLREDUCE_LATENCY_S, kernel_launch_s=_KERNEL_LAUNCH_S,
        graph_launch_s=_GRAPH_LAUNCH_S, achievable_basis=_AMD_BASIS,
        sources={
            "memory_bytes": _AMD_300 + ": 192 GB HBM3 (read as GiB)",
            "hbm_bw": _AMD_300 + ": 5.3 TB/s peak",
            "bf16_flops": _AMD_300 + ": peak BF16 1,307.4 TFLOPS (dense)",
            "fp8_flops": _AMD_300 + ": peak FP8 2,614.9 TFLOPS (dense)",
            "l2_bytes": "AMD CDNA 3 architecture whitepaper: 4 MB L2 per XCD x 8 XCDs",
            "llc_bytes": _AMD_300 + ": 256 MB AMD Infinity Cache",
            "link_bw": _AMD_300 + ": 7 Infinity Fabric links, 128 GB/s each (bidirectional) = 448 GB/s each way",
        },
    ),
    "MI355X": GPU(
        name="MI355X", vendor="AMD",
        memory_bytes=288 * _GIB, hbm_bw=8.0e12,
        bf16_flops=2516.6e12, fp8_flops=5033.2e12,
        l2_bytes=32 * _MIB, llc_bytes=256 * _MIB,
        link_bw=537.6e9, interconnect="Infinity Fabric 4 (7 links x 153.6 GB/s bidirectional)",
        achievable_bw_frac=0.90, achievable_flops_frac=0.80, achievable_link_frac=0.80,
        allreduce_latency_s=_ALLREDUCE_LATENCY_S, kernel_launch_s=_KERNEL_LAUNCH_S,
        graph_launch_s=_GRAPH_LAUNCH_S, achievable_basis=_AMD_BASIS,
        sources={
            "memory_bytes": _AMD_355 + ": 288 GB HBM3E (read as GiB)",
            "hbm_bw": _AMD_355 + ": 8 TB/s peak",
            "bf16_flops": _AMD_355 + ": peak FP16/BF16 2.5 PFLOPS dense (2,516.6 TFLOPS)",
            "fp8_flops": _AMD_355 + ": peak FP8 5.0 PFLOPS dense (5,033.2 TFLOPS)",
            "l2_bytes": "AMD CDNA 4 architecture whitepaper: 4 MB L2 per XCD x 8 XCDs",
            "llc_bytes": _AMD_355 + ": 256 MB AMD Infinity Cache",
            "link_bw": _AMD_355 + ": 7 Infinity Fabric links, 153.6 GB/s each (bidirectional) = 537.6 GB/s each way",
        },
    ),
})


def get_gpu(gpu: "str | GPU") -> GPU:
    """A GPU sheet by name (case-insensitive), or the sheet itself."""
    if isinstance(gpu, GPU):
        return gpu
    for name, sheet in GPUS.items():
        if name.lower() == str(gpu).strip().lower():
            return sheet
    raise SpecschedError(f"unknown GPU {gpu!r}; known: {', '.join(GPUS)}")
