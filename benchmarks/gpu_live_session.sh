#!/usr/bin/env bash
# GPU jobs for one device session, each pinned to one GPU so that two run side by side on a
# two-GPU machine.  Run from the repository root:
#
#   bash benchmarks/gpu_live_session.sh GPU OUT_DIR JOB...
#
# Jobs (each in its own process, under its own time limit, logged to OUT_DIR/gpuGPU.log):
#   tests        the AITER GPU tests
#   host         benchmarks/bench_aiter_host_overhead.py     -> host_overhead.json
#   replay       benchmarks/bench_aiter_replay_vs_kernels.py -> replay_vs_kernels.json
#   stability    benchmarks/bench_aiter_eager_stability.py   -> eager_stability.json
#   profile8b    `specsched profile` for Llama-3.1-8B: the ladder x widths 1-8 x KV to 32k, eager
#                verify widths up to 21 (k=20 proposers), a dense prefill grid -> llama-3.1-8b__H200.parquet
#   live-conv:N  live `simulate --backend aiter` of the first N requests of the conversation sample
#   live-code    live `simulate --backend aiter` of the whole code sample
# Live runs are packed as OUT_DIR/live_<name>.tar.gz (summary.json, steps.parquet, ...), to be
# compared on any machine with `specsched fidelity --reference-run`.
# DEADLINE (seconds from the start, default 570) bounds every job.
set -uo pipefail
gpu=$1; out=$2; shift 2
mkdir -p "$out"
export CUDA_VISIBLE_DEVICES=$gpu PYTHONUNBUFFERED=1
# wheels in .whl/ (amd-aiter, simpy): install them once, before starting jobs on two GPUs
if ls .whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site/aiter ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
log="$out/gpu$gpu.log"
deadline=${DEADLINE:-570}
job() {  # job NAME SECONDS COMMAND...
  local name=$1 secs=$2; shift 2
  local left=$((deadline - SECONDS)); [ "$secs" -gt "$left" ] && secs=$left
  if [ "$secs" -le 5 ]; then echo "=== $name skipped: no time left ===" | tee -a "$log"; return; fi
  echo "=== $name (gpu $gpu, $(date +%T), limit ${secs}s) ===" | tee -a "$log"
  local t0=$SECONDS
  timeout "$secs" "$@" >>"$log" 2>&1
  echo "=== $name rc=$? in $((SECONDS - t0))s ===" | tee -a "$log"
}
live() {  # live NAME SECONDS TRACE [LIMIT]
  local name=$1 secs=$2 trace=$3 lim=${4:-}
  job "live-$name" "$secs" python3 -m specsched simulate --trace "$trace" --backend aiter \
    --model llama-3.1-8b ${lim:+--limit $lim} --no-report --out "/tmp/live_$name"
  [ -d "/tmp/live_$name" ] && tar -czf "$out/live_$name.tar.gz" -C /tmp "live_$name"
}
for j in "$@"; do
  case "$j" in
    tests) job tests 200 python3 -m pytest tests/aiter/test_aiter_gpu.py -q -rs -p no:cacheprovider ;;
    host) job host 150 python3 benchmarks/bench_aiter_host_overhead.py --json "$out/host_overhead.json" ;;
    replay) job replay 150 python3 benchmarks/bench_aiter_replay_vs_kernels.py --json "$out/replay_vs_kernels.json" ;;
    stability) job stability 150 python3 benchmarks/bench_aiter_eager_stability.py --json "$out/eager_stability.json" ;;
    profile8b) job profile8b 560 python3 -m specsched profile --model llama-3.1-8b --progress \
        --bs 1,2,4,8,16,24,32,48,64,96,128,160,192,256 --kv-lens 128,512,2048,4096,8192,16384,32768 \
        --eager-widths 1,2,4,8,12,16,21 --eager-reps 5 \
        --prefill-tokens 32,64,128,256,512,768,1024,1536,2048,3072,4096,6144,8192 \
        -o "$out/llama-3.1-8b__H200.parquet" ;;
    live-conv:*) n=${j#live-conv:}; live "conv$n" 580 traces/samples/azure_conv_eagle_2k.parquet "$n" ;;
    live-code) live code 580 traces/samples/azure_code_sps_2k.parquet ;;
    *) echo "unknown job $j" | tee -a "$log" ;;
  esac
done
