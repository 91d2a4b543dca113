#!/usr/bin/env bash
# The whole GPU tier in one run, then where the FA2 backward's grade spends its time and the heavy exercises'
# one-shot grades; for scripts/device_bg.sh (a run longer than one device call), which sets BG:
#   bash scripts/device_bg.sh start 540 bash scripts/device_tier.sh     (carry .whl and .tk)
#   bash scripts/device_bg.sh wait 570                                  (again, each within 30 s of the last)
# It needs about 950-1,150 s of device time on a fresh machine (sessions 64-65, children started fresh).
# Files back in $OUT: log.txt, junit.xml, lock.jsonl, phases.jsonl, lock_report.txt.
set -u
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv
env KCOURSE_TEST_BUILD_CACHE=/tmp/kc KCOURSE_GPU_LOCK_LOG="$BG/lock.jsonl" KCOURSE_TEST_PHASES_LOG="$BG/phases.jsonl" \
  timeout -s INT -k 30 "${TIER_LIMIT_S:-1150}" python3 -m pytest -m "gpu and not slow and not bench" -n 12 \
  --dist worksteal -q -p no:cacheprovider -rfE --durations=40 --junitxml="$BG/junit.xml"
python3 scripts/gpu_lock_report.py "$BG/lock.jsonl" "$BG/phases.jsonl" >"$BG/lock_report.txt" 2>&1
# Where the FA2 backward's grade spends its time (in one process, cold then warm), then one-shot grades as a learner
# runs them: the FA2 backward warm (the timeline's grades warmed its caches), the others cold then warm.
timeout 420 python3 scripts/feedback_bench.py --steps flash_attention_v2_backward triton
for exercise in "flash_attention_v2_backward --lang triton" "flash_attention_v2 --lang triton" \
  "flash_attention_v2 --lang triton" "matmul_triton" "matmul_triton"; do
  started=$(date +%s)
  # shellcheck disable=SC2086  # the exercise and its --lang are separate words
  python3 -m grader grade $exercise --source solutions -v 2>&1 | grep -E "^phases|=> " | cut -c1-300
  echo "TOOK $(($(date +%s) - started)) s: $exercise"
done
