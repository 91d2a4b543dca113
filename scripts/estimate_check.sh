#!/usr/bin/env bash
# On a GPU model the committed calibration does not cover: grade solution files from a learner's kit
# (no solutions/, so the bar is the ESTIMATE from the calibrated roofline fraction), then calibrate this
# GPU into $OUT/calibration.json (a copy of the committed file plus this GPU).
set -u
export PYTHONUNBUFFERED=1 KCOURSE_HOME=/tmp/ke-home KCOURSE_CACHE=/tmp/ke-cache
out=${OUT:-/tmp/ke-out}; mkdir -p "$out"; repo=$PWD
nvidia-smi -L
python3 -m grader release /tmp/kit
for ex in "reduction:reduction/reduction.cu" "softmax:softmax/softmax.py" "matmul:matmul/matmul.cu"; do
  (cd /tmp/kit && python3 -m grader grade ${ex%%:*} --file $repo/solutions/${ex#*:} | grep -E "speed|=>")
done
cp calibration/calibration.json "$out/calibration.json"
KCOURSE_CALIBRATION=$out/calibration.json python3 -m grader calibrate | tail -9
