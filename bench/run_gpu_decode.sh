#!/usr/bin/env bash
# The GPU decode path on a machine with an NVIDIA GPU (docs/gpu.md): its tests, the same tests
# under compute-sanitizer (memcheck), and the decode benchmark against stoker's CPU path and
# torchvision's GPU decode, train and val. Every step runs even if one before it failed.
#
#   bash bench/run_gpu_decode.sh BIN_DIR IMAGES_DIR OUT_DIR
#
# BIN_DIR holds gpu_transform_test and gpu_decode_bench (build-cuda/src, build-cuda/bench); put
# the directory of libnvjpeg.so.13 on LD_LIBRARY_PATH if the RPATH does not reach it. Results:
# OUT_DIR/{tests,memcheck}.log, OUT_DIR/gpu-decode.jsonl (one JSON object per run).
set -uo pipefail
bin=$1 images=$2 out=$3
mkdir -p "$out"
step() { echo "== $*" >&2; }
step "device"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/device.txt"
nproc >>"$out/device.txt"
step "gpu_transform_test"
"$bin/gpu_transform_test" 2>&1 | tee "$out/tests.log" | grep -E "^\[  (PASSED|FAILED|SKIPPED)|FAILED|Failure" 
step "gpu_transform_test under compute-sanitizer memcheck (GPU tests only)"
timeout 150 compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 \
  "$bin/gpu_transform_test" --gtest_filter='GpuTransformTest.*' >"$out/memcheck.log" 2>&1
echo "memcheck exit $?" | tee -a "$out/memcheck.log"
tail -3 "$out/memcheck.log"
for mode in train val; do
  step "gpu_decode_bench $mode"
  "$bin/gpu_decode_bench" --images="$images" --mode=$mode --cpu_threads="$(nproc)" \
    >>"$out/gpu-decode.jsonl"
  step "torchvision GPU peer $mode"
  python3 "$(dirname "$0")/decode_peers/torchvision_gpu_peer.py" --images "$images" --mode $mode \
    >>"$out/gpu-decode.jsonl"
done
cat "$out/gpu-decode.jsonl"
