#!/usr/bin/env bash
# One GPU session of the AITER executor's checks, benchmarks and profiles, in stages.
#
#   bash benchmarks/bench_aiter_session.sh STAGE... [OUT_DIR]
#
# Stages: info, smoke, tests, host, replay, coarse8b, profile8b, profile70b, mla, simulate.
# Every stage runs in its own process under a time limit and logs to OUT_DIR/session.log;
# profiles go to OUT_DIR/*.parquet, benchmark figures to OUT_DIR/*.json.  Run from the
# repository root on a machine with a CUDA or ROCm GPU.  Wheels in .whl/ (amd-aiter, simpy) are
# installed into /tmp/site first when present.
set -uo pipefail
OUT_DIR="${OUT:-${OUT_DIR:-runs/aiter_session}}"
mkdir -p "$OUT_DIR"
LOG="$OUT_DIR/session.log"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site/aiter ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >>"$LOG" 2>&1
fi
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"

stage() {  # stage NAME SECONDS COMMAND...
  local name=$1 secs=$2; shift 2
  echo "=== $name ($(date +%T), limit ${secs}s) ===" | tee -a "$LOG"
  local t0=$SECONDS
  timeout "$secs" "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  echo "=== $name rc=$rc in $((SECONDS - t0))s ===" | tee -a "$LOG"
  if [ "$rc" != 0 ] && [ -n "${STOP_ON_FAIL:-}" ]; then echo "stopping: $name failed" | tee -a "$LOG"; exit "$rc"; fi
}

for s in "$@"; do
  case "$s" in
    info)
      stage info 30 bash -c 'nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv; python3 -c "import torch,triton,numpy,sys;print(sys.version);print(torch.__version__,torch.version.cuda,triton.__version__,numpy.__version__)"; python3 -c "import numba; print(\"numba\", numba.__version__)" || true' ;;
    smoke)
      stage smoke 120 python3 - <<'EOF'
import time, numpy as np
t = time.time()
from backends.aiter import bridge
k = bridge.load_kernels(); print("kernels", k.runtime, k.arch, bridge.versions())
from backends.models import ModelShape
from backends.aiter import make_executor
from backends.protocol import VerifyBatch
m = ModelShape(name="smoke", layers=2, hidden=1024, heads=8, kv_heads=2, head_dim=128, intermediate=2048, vocab=4096)
ex = make_executor(m, capture_bs=[1, 2, 4], max_context=8192, kv_pool_gib=1)
v = VerifyBatch(bs_real=3, bs_padded=4, widths=np.array([4, 4, 4]), kv_lens=np.array([100, 300, 50]), launch_width=4, mode="uniform", graph=True)
print("graph verify", [round(ex.verify(v).latency_s * 1e6, 1) for _ in range(5)], "us")
v = VerifyBatch(bs_real=3, bs_padded=3, widths=np.array([4, 4, 4]), kv_lens=np.array([100, 300, 50]), launch_width=4, mode="uniform", graph=False)
print("eager verify", [round(ex.verify(v).latency_s * 1e6, 1) for _ in range(3)], "us")
print("smoke ok in", round(time.time() - t, 1), "s")
EOF
      ;;
    tests)
      stage tests 240 python3 -m pytest tests/aiter/test_aiter_gpu.py -q -rs -p no:cacheprovider ;;
    host)
      stage host 150 python3 benchmarks/bench_aiter_host_overhead.py --json "$OUT_DIR/host_overhead.json" ;;
    replay)
      stage replay 180 python3 benchmarks/bench_aiter_replay_vs_kernels.py --json "$OUT_DIR/replay_vs_kernels.json" ;;
    coarse8b)
      stage coarse8b 240 python3 -m specsched profile --model llama-3.1-8b --bs 1,8,64,256 --widths 1,4,8 \
        --kv-lens 512,4096,32768 --eager-bs 1,64,384 --eager-widths 1,4 --eager-kv-lens 1024 \
        --prefill-tokens 256,4096 --prefill-prefix 0,8192 --reps 3 --warmup 1 --eager-reps 2 --progress \
        -o "$OUT_DIR/coarse-llama-3.1-8b__H200.parquet" ;;
    profile8b)
      stage profile8b 560 python3 -m specsched profile --model llama-3.1-8b --progress \
        --bs "${BS8:-1,2,4,8,16,32,64,128,192,256}" --kv-lens "${KV8:-128,512,2048,4096,8192,16384,32768}" \
        -o "$OUT_DIR/llama-3.1-8b__H200.parquet" ;;
    profile70b)
      stage profile70b 560 python3 -m specsched profile --model llama-3.1-70b --tp 8 --progress \
        --bs "${BS70:-1,2,4,8,16,32,64,128,192,256}" --kv-lens "${KV70:-128,512,2048,4096,8192,16384,32768}" \
        -o "$OUT_DIR/llama-3.1-70b__H200.parquet" ;;
    mla)
      stage mla 120 python3 benchmarks/bench_aiter_mla_probe.py ;;
    simulate)
      stage simulate 240 bash -c 'python3 - <<EOF
import pyarrow.parquet as pq
t = pq.read_table("traces/samples/azure_conv_eagle_2k.parquet")
pq.write_table(t.slice(0, 40).replace_schema_metadata(t.schema.metadata), "/tmp/trace40.parquet")
EOF
python3 -m specsched simulate --trace /tmp/trace40.parquet --backend aiter --policy split --no-report --json --out /tmp/sim_aiter' ;;
    *) echo "unknown stage $s" | tee -a "$LOG" ;;
  esac
done
