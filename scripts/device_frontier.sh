#!/usr/bin/env bash
# Issue 42's frontier on a GPU, in one run (scripts/device_bg.sh sets BG; about 300-400 s on a fresh machine):
#   bash scripts/device_bg.sh start 540 bash scripts/device_frontier.sh        (carry .whl)
# the CUDA FA2 forward's kernel beside scripts/fa2_forward_cuda.cu's builds (scripts/design_bench.py flash-cuda, about
# 90 s), then the Triton FA2 backward's and forward's tile configurations (flash-backward, flash), each beside torch's
# SDPA, in TFLOP/s and % of SDPA. Its output is log.txt in $OUT.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv
timeout 300 python3 scripts/design_bench.py flash-cuda
timeout 400 python3 scripts/design_bench.py flash-backward
timeout 400 python3 scripts/design_bench.py flash
