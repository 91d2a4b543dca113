#!/usr/bin/env bash
# One GPU session's queue, for a lent machine with a time limit per call: runs the task lines of $TASKS in
# order until $LANE_S seconds have passed, logging to $OUT/log.txt (the device tool brings $OUT back), and
# records each validated solution's figures in $OUT/calibration*.json (merge them into calibration/ after).
# On a machine of several GPUs, one lane per GPU takes the next line as it frees up (CUDA_VISIBLE_DEVICES
# pins it; its records, calibration and log are its own, the build cache is shared: builds lock it).
# A line still running when the lane's time is up gets SIGINT, as Ctrl-C would (pytest then prints the failures so far
# and where it stopped; a plain kill lost them), and SIGKILL 20 s later.
# Task lines: "validate ID[:LANG]" (validate --repeat ${REPEAT:-10} --calibrate) or "sh COMMAND"; '#' skips.
# Usage (repository root, wheels from ../shared/device/prepare-wheels.sh in .whl/):
#   OUT=$OUT TASKS=queue.txt LANE_S=540 bash scripts/device_queue.sh      # LANES=1 to use one GPU only
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 KCOURSE_CACHE=/tmp/kc
[ -d .tk ] && export KCOURSE_TK_ROOT=$PWD/.tk  # ThunderKittens headers copied into the ignored .tk/
out=${OUT:-/tmp/kcourse-out}; mkdir -p "$out"
start=$(date +%s); LANE_S=${LANE_S:-540}
LANES=${LANES:-$(nvidia-smi -L | wc -l)}; (( LANES < 1 )) && LANES=1
nvidia-smi -L >"$out/log.txt"
grep -vE '^[[:space:]]*(#|$)' "$TASKS" >/tmp/queue.tasks; echo 0 >/tmp/queue.next

next_task() {  # the next line of the queue, or nothing when it is empty (lanes take lines under a lock)
  exec 9>/tmp/queue.lock; flock 9
  local i; i=$(cat /tmp/queue.next); echo $((i + 1)) >/tmp/queue.next
  sed -n "$((i + 1))p" /tmp/queue.tasks; flock -u 9
}

lane() {  # $1: the GPU this lane owns
  local gpu=$1 log=$out/log$1.txt line left t0 rc v
  export CUDA_VISIBLE_DEVICES=$gpu KCOURSE_HOME=/tmp/kh$gpu KCOURSE_CALIBRATION=$out/calibration$gpu.json
  cp calibration/calibration.json "$KCOURSE_CALIBRATION"
  while line=$(next_task) && [[ -n "$line" ]]; do
    left=$(( LANE_S - ($(date +%s) - start) ))
    (( left < 20 )) && { echo "SKIPPED (time) $line" >>"$log"; continue; }
    t0=$(date +%s); echo "=== [gpu $gpu] $line (left ${left}s)" >>"$log"
    case "$line" in
      validate\ *) v=${line#validate }; local lang=(); [[ "$v" == *:* ]] && lang=(--lang "${v#*:}")
        timeout -s INT -k 20 "$left" python3 -m grader validate --only "${v%%:*}" "${lang[@]}" --repeat "${REPEAT:-10}" --calibrate \
          >>"$log" 2>"$out/err$gpu.txt"; rc=$?; tail -5 "$out/err$gpu.txt" >>"$log" ;;
      sh\ *) timeout -s INT -k 20 "$left" bash -c "${line#sh }" >>"$log" 2>&1; rc=$? ;;
      *) echo "unknown task line (want 'validate ID[:LANG]' or 'sh COMMAND')" >>"$log"; rc=2 ;;
    esac
    echo "DONE rc=$rc $(( $(date +%s) - t0 ))s :: [gpu $gpu] $line" >>"$log"
  done
  echo "lane $gpu end $(( $(date +%s) - start ))s" >>"$log"
}

for ((g = 0; g < LANES; g++)); do lane "$g" & done
wait
for ((g = 0; g < LANES; g++)); do cat "$out/log$g.txt" >>"$out/log.txt"; rm -f "$out/log$g.txt" "$out/err$g.txt"; done
