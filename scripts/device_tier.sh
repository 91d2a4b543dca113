#!/usr/bin/env bash
# The whole GPU tier in one run, then issue 42's FA2 frontier and the learner's loop after a kernel edit (the FA2
# backward's row of its table on request); for scripts/device_bg.sh (a run longer than one device call), which sets BG:
#   bash scripts/device_bg.sh start 540 bash scripts/device_tier.sh     (carry .whl and .tk)
#   bash scripts/device_bg.sh wait 570                                  (again, each within 30 s of the last)
# The tier took 944-1,060 s on a fresh H100 (sessions 64 and 67), 681 s after compiling first (session 70); the
# frontier (now first the CUDA FA2 forward's builds, about 90 s) and the edit loop after it about 800 s more: a
# session's device time may end before the rest.
# Files back in $OUT: log.txt, junit.xml, lock.jsonl, phases.jsonl, lock_report.txt, probe.jsonl (each timing probe's
# bursts as the host accounted for them, hostload.burst_trace: where a disagreement's wall clock went). A slice of the
# tier and some of what follows: TIER_TESTS="tests/test_a.py tests/test_b.py" TIER_AFTER="frontier edits" (of:
# frontier edits table beside steps; default the first two: the table's FA2 backward row was session 70's, beside and
# steps session 69's).
set -u
after() { [[ " ${TIER_AFTER:-frontier edits} " == *" $1 "* ]]; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv
env KCOURSE_TEST_BUILD_CACHE=/tmp/kc KCOURSE_GPU_LOCK_LOG="$BG/lock.jsonl" KCOURSE_TEST_PHASES_LOG="$BG/phases.jsonl" \
  KCOURSE_PROBE_TRACE="$BG/probe.jsonl" \
  timeout -s INT -k 30 "${TIER_LIMIT_S:-1150}" python3 -m pytest ${TIER_TESTS:-} -m "gpu and not slow and not bench" -n 12 \
  --dist worksteal -q -p no:cacheprovider -rfE --durations=40 --junitxml="$BG/junit.xml"
python3 scripts/gpu_lock_report.py "$BG/lock.jsonl" "$BG/phases.jsonl" >"$BG/lock_report.txt" 2>&1
# The GPU process's references beside its draws (heavy.BESIDE_ENV), an experiment: warm grades, alternating (about
# 100 s; session 69 measured it, no clear gain: not run unless TIER_AFTER names it).
after beside && for beside in 0 1 0 1; do
  started=$(date +%s)
  KCOURSE_REFERENCES_BESIDE=$beside python3 -m grader grade flash_attention_v2_backward --source solutions -v 2>&1 |
    grep -E "^phases|=> " | cut -c1-700
  echo "TOOK $(($(date +%s) - started)) s: references beside the draws: $beside"
done
# Issue 42's frontier: the FA2 forward's and backward's configurations beside SDPA (about 300-400 s)
after frontier && bash scripts/device_frontier.sh
# The learner's loop: the FA2 backward's grade after a kernel edit, compiling first on threads, on one, and not first;
# then warm grades of the unchanged file with the pass and without (about 360 s)
after edits && timeout 900 python3 scripts/feedback_bench.py --edits flash_attention_v2_backward:triton
# Where the FA2 backward's grade spends its time (in one process, cold then warm; its phases now say what the GPU
# process spent on inputs and references), then its row of issue 42's table: one-shot cold and warm, after a kernel
# edit, and kcourse watch's save -> verdict.
after steps && timeout 420 python3 scripts/feedback_bench.py --steps flash_attention_v2_backward triton
after table && timeout 600 python3 scripts/feedback_bench.py --table flash_attention_v2_backward:triton
