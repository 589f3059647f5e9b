"""Make captured graphs cheap to launch: 32-bit memset nodes become kernel nodes.

At batch sizes from about 64 up, cuBLASLt picks cooperative GEMM kernels for the 8B model's MLP
and LM head, and before each of them zeroes a 4-byte semaphore in its workspace with
``cudaMemsetAsync``.  Captured, that is a memset node between kernel nodes, and each costs the
host about 1.4 us of ``cudaGraphLaunch`` (measured on an H200, CUDA 13: a 325-node verify graph
with 33 memsets launches in 61 us, a 357-node one with one memset in 13 us;
``benchmarks/bench_aiter_graph_launch.py``), apparently because a graph of kernel nodes only is
launched as a whole while memsets split it.  :func:`memsets_to_kernels` replaces each such node,
before the graph is instantiated, with a kernel node that writes the same value to the same
words and has the same dependencies; the GPU does the same work.

Driver API through ctypes (``libcuda.so.1``); the kernel is a few lines of PTX loaded with
``cuModuleLoadData``.  Memsets of whole aligned 32-bit words are replaced (cuBLASLt's are 4
bytes of 1-byte elements); others are left.
"""

from __future__ import annotations

import ctypes
from typing import Any

__all__ = ["memsets_to_kernels"]

_PTX = """
.version 7.8
.target {target}
.address_size 64
.visible .entry specsched_set_u32(.param .u64 dst, .param .u32 value, .param .u32 n)
{{
  .reg .pred %p;
  .reg .b32 %r<6>;
  .reg .b64 %rd<4>;
  ld.param.u64 %rd1, [dst];
  ld.param.u32 %r1, [value];
  ld.param.u32 %r2, [n];
  mov.u32 %r3, %ctaid.x;
  mov.u32 %r4, %ntid.x;
  mov.u32 %r5, %tid.x;
  mad.lo.s32 %r3, %r3, %r4, %r5;
  setp.ge.u32 %p, %r3, %r2;
  @%p bra DONE;
  cvta.to.global.u64 %rd2, %rd1;
  mul.wide.u32 %rd3, %r3, 4;
  add.s64 %rd2, %rd2, %rd3;
  st.global.u32 [%rd2], %r1;
DONE:
  ret;
}}
"""

_MEMSET = 2  # CU_GRAPH_NODE_TYPE_MEMSET
_BLOCK = 128


class _MemsetParams(ctypes.Structure):
    _fields_ = [("dst", ctypes.c_uint64), ("pitch", ctypes.c_size_t), ("value", ctypes.c_uint),
                ("elementSize", ctypes.c_uint), ("width", ctypes.c_size_t),
                ("height", ctypes.c_size_t)]


class _KernelParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS (v1)
    _fields_ = [("func", ctypes.c_void_p),
                ("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("kernelParams", ctypes.POINTER(ctypes.c_void_p)),
                ("extra", ctypes.POINTER(ctypes.c_void_p))]


_lib = None
_funcs: dict[str, int] = {}


def _cuda():
    global _lib
    if _lib is None:
        _lib = ctypes.CDLL("libcuda.so.1")
    return _lib


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what} failed (CUresult {rc})")


def _set_u32_kernel(target: str) -> int:
    """The CUfunction of the PTX kernel for ``target`` (e.g. ``sm_90``), loaded once per process
    into the current CUDA context (the runner's one device; a second device in the same process
    would need its own module)."""
    if target not in _funcs:
        lib = _cuda()
        mod = ctypes.c_void_p()
        _check(lib.cuModuleLoadData(ctypes.byref(mod), _PTX.format(target=target).encode() + b"\0"),
               "cuModuleLoadData")
        fn = ctypes.c_void_p()
        _check(lib.cuModuleGetFunction(ctypes.byref(fn), mod, b"specsched_set_u32"),
               "cuModuleGetFunction")
        _funcs[target] = fn.value
    return _funcs[target]


def _nodes(lib, getter, *args) -> list[int]:
    n = ctypes.c_size_t(0)
    _check(getter(*args, None, ctypes.byref(n)), getter.__name__)
    if n.value == 0:
        return []
    arr = (ctypes.c_void_p * n.value)()
    _check(getter(*args, arr, ctypes.byref(n)), getter.__name__)
    return [arr[i] for i in range(n.value)]


def _as_words(p: _MemsetParams) -> tuple[int, int] | None:
    """A memset as (32-bit words, word value), or None when it is not whole aligned words of
    one contiguous range (1-, 2- or 4-byte elements; the value repeated to fill a word)."""
    es = int(p.elementSize)
    if es not in (1, 2, 4) or p.dst % 4:
        return None
    row = int(p.width) * es
    height = max(int(p.height), 1)
    if height > 1 and int(p.pitch) != row:
        return None
    nbytes = row * height
    if nbytes % 4 or nbytes == 0:
        return None
    v = int(p.value) & ((1 << (8 * es)) - 1)
    word = {1: v * 0x01010101, 2: v * 0x00010001, 4: v}[es]
    return nbytes // 4, word


def memsets_to_kernels(graph: int, target: str) -> dict[str, Any]:
    """Replace the 4-byte memset nodes of the uninstantiated CUDA graph ``graph`` (a
    ``cudaGraph_t`` as an int) with equivalent kernel nodes.  Returns counts.  A node is only
    removed once its replacement and all its edges are in place, so a failure part-way leaves a
    graph that still does everything (at worst both the memset and the kernel write the zeros)."""
    lib = _cuda()
    fn = _set_u32_kernel(target)
    g = ctypes.c_void_p(graph)
    replaced = kept = 0
    for node in _nodes(lib, lib.cuGraphGetNodes, g):
        t = ctypes.c_int(-1)
        _check(lib.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(t)), "cuGraphNodeGetType")
        if t.value != _MEMSET:
            continue
        p = _MemsetParams()
        _check(lib.cuGraphMemsetNodeGetParams(ctypes.c_void_p(node), ctypes.byref(p)),
               "cuGraphMemsetNodeGetParams")
        words = _as_words(p)
        if words is None:
            kept += 1
            continue
        count, word = words
        deps = _nodes(lib, lib.cuGraphNodeGetDependencies, ctypes.c_void_p(node))
        outs = _nodes(lib, lib.cuGraphNodeGetDependentNodes, ctypes.c_void_p(node))
        dst, value, n = ctypes.c_uint64(p.dst), ctypes.c_uint32(word), ctypes.c_uint32(count)
        argv = (ctypes.c_void_p * 3)(ctypes.cast(ctypes.byref(dst), ctypes.c_void_p),
                                     ctypes.cast(ctypes.byref(value), ctypes.c_void_p),
                                     ctypes.cast(ctypes.byref(n), ctypes.c_void_p))
        kp = _KernelParams(func=fn, gridDimX=(count + _BLOCK - 1) // _BLOCK, gridDimY=1, gridDimZ=1,
                           blockDimX=_BLOCK, blockDimY=1, blockDimZ=1, sharedMemBytes=0,
                           kernelParams=ctypes.cast(argv, ctypes.POINTER(ctypes.c_void_p)),
                           extra=None)
        new = ctypes.c_void_p()
        dep_arr = (ctypes.c_void_p * max(len(deps), 1))(*deps)
        _check(lib.cuGraphAddKernelNode(ctypes.byref(new), g, dep_arr, ctypes.c_size_t(len(deps)),
                                        ctypes.byref(kp)), "cuGraphAddKernelNode")
        for o in outs:
            _check(lib.cuGraphAddDependencies(g, ctypes.byref(new), ctypes.byref(ctypes.c_void_p(o)),
                                              ctypes.c_size_t(1)), "cuGraphAddDependencies")
        _check(lib.cuGraphDestroyNode(ctypes.c_void_p(node)), "cuGraphDestroyNode")
        replaced += 1
    return {"memsets_replaced": replaced, "memsets_kept": kept}
