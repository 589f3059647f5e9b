#!/usr/bin/env bash
# One GPU session: the AITER GPU tests, then `specsched fidelity` (live aiter vs the shipped
# profile) on a shipped sample trace.  Run from the repository root on a GPU machine:
#
#   bash benchmarks/gpu_fidelity_session.sh STAGE... OUT_DIR
#
# Stages: tests | conv400 (first 400 requests of azure_conv_eagle_2k) | code (the whole
# azure_code_sps_2k sample).  Wheels in .whl/ (amd-aiter, simpy) are installed into /tmp/site.
set -uo pipefail
out="${@: -1}"
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1 && [ ! -d /tmp/site/aiter ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fid() {  # fid NAME SECONDS ARGS...
  local name=$1 secs=$2; shift 2
  local t0=$SECONDS
  timeout "$secs" python3 -m specsched fidelity --model llama-3.1-8b --out "/tmp/fid_$name" "$@" \
    > "$out/fidelity_$name.md" 2> "$out/fidelity_$name.err"
  echo "fidelity $name rc=$? in $((SECONDS - t0)) s"
  cp "/tmp/fid_$name/fidelity.json" "$out/fidelity_$name.json" 2>/dev/null
  cp "/tmp/fid_$name/reference/summary.json" "$out/live_summary_$name.json" 2>/dev/null
  cp "/tmp/fid_$name/reference/steps.parquet" "$out/live_steps_$name.parquet" 2>/dev/null
  tail -30 "$out/fidelity_$name.md"; tail -5 "$out/fidelity_$name.err"
}
for s in "${@:1:$#-1}"; do
  case "$s" in
    tests) timeout 200 python3 -m pytest tests/aiter/test_aiter_gpu.py -q -rs -p no:cacheprovider 2>&1 | tee "$out/gpu_tests.log" | tail -15 ;;
    conv400) fid conv400 230 --trace traces/samples/azure_conv_eagle_2k.parquet --limit 400 ;;
    code) fid code 330 --trace traces/samples/azure_code_sps_2k.parquet --limit "${CODE_LIMIT:-2000}" ;;
  esac
done
