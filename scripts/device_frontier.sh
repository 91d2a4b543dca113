#!/usr/bin/env bash
# Issue 42's frontier on a GPU, in one run (scripts/device_bg.sh sets BG; about 300-400 s on a fresh machine):
#   bash scripts/device_bg.sh start 540 bash scripts/device_frontier.sh        (carry .whl)
# the Triton FA2 forward's and backward's tile configurations beside torch's SDPA, in TFLOP/s and % of SDPA
# (scripts/design_bench.py flash, flash-backward). Its output is log.txt in $OUT.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv
timeout 400 python3 scripts/design_bench.py flash-backward
timeout 400 python3 scripts/design_bench.py flash
