#!/bin/bash
# One tree against another on the lent GPU (shared/gpu/README.md), alternating, in one call:
#   git archive <commit> | tar -x -C .bench/before; cp <fashion-mnist *.gz> .bench/data;
#   cp -r /usr/share/games/fortunes .bench/; then, with .whl and .bench carried:
#   ROUNDS="1 2 3" bash benchmarks/before_after.sh
# "before" is .bench/before, "after" the working tree. Prints each run's summary and JSON line.
mkdir -p /tmp/ocl && echo /usr/lib/libnvidia-opencl.so.1 > /tmp/ocl/nvidia.icd && cp /etc/OpenCL/vendors/*.icd /tmp/ocl/ 2>/dev/null
export OCL_ICD_VENDORS=/tmp/ocl CLNET_DEVICE=nvidia CLNET_QUIET=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export CLNET_DATA=$PWD/.bench/data
mkdir -p /usr/share/games/fortunes && cp -r .bench/fortunes/* /usr/share/games/fortunes/ 2>/dev/null
ROOT=$PWD
run() {  # tree, label, command...
  local tree=$1 label=$2; shift 2
  local dir=$ROOT; [ "$tree" = before ] && dir=$ROOT/.bench/before
  echo "=== $tree $label"
  (cd "$dir" && PYTHONPATH=/tmp/site:$dir timeout 300 "$@" 2>&1 | grep -E '^\{|us/step|^\| ms per' | tail -4)
}
for round in ${ROUNDS:-1}; do
  for tree in before after; do
    run $tree step_profile python3 -m benchmarks.step_profile --batch 1024 --epochs 2 --top 0
    run $tree mlp128 python3 -m benchmarks.mlp --framework clnet --batch 128 --epochs 3
    run $tree cnn python3 -m benchmarks.cnn --framework clnet --batch 128 --epochs 2 --samples 12800
    run $tree gpt python3 -m benchmarks.tiny_gpt_torch --torch-device cuda --steps 90 --epochs 3
  done
done
