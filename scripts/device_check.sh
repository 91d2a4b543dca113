#!/usr/bin/env bash
# One call on a GPU machine: environment, every solution and stub, build times, GPU tests.
# Usage (repository root): bash scripts/device_check.sh  [writes logs under $OUT when set]
set -u
export PYTHONUNBUFFERED=1 KCOURSE_HOME=${KCOURSE_HOME:-/tmp/kcourse-home} KCOURSE_CACHE=${KCOURSE_CACHE:-/tmp/kcourse-cache}
out=${OUT:-/tmp/kcourse-out}; mkdir -p "$out"
python3 -m grader env-check | tee "$out/env.txt"
for ex in "reduction" "matmul" "vector_add --lang cuda" "vector_add --lang triton" "softmax" "gelu_op"; do
  python3 -m grader grade $ex --source solutions 2>&1 | tee -a "$out/solutions.txt"
done
python3 -m grader validate --source stubs 2>&1 | tee "$out/stubs.txt"
