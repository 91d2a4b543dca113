#!/usr/bin/env bash
# One GPU session's queue, for a lent machine with a time limit per call: runs the task lines of $TASKS in
# order until $LANE_S seconds have passed, logging to $OUT/log.txt (the device tool brings $OUT back), and
# records each validated solution's figures in $OUT/calibration.json (merge them into calibration/ after).
# Task lines: "validate ID[:LANG]" (validate --repeat ${REPEAT:-10} --calibrate) or "sh COMMAND"; '#' skips.
# Usage (repository root, wheels from ../shared/device/prepare-wheels.sh in .whl/):
#   OUT=$OUT TASKS=queue.txt LANE_S=540 bash scripts/device_queue.sh
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 KCOURSE_HOME=/tmp/kh KCOURSE_CACHE=/tmp/kc
[ -d .tk ] && export KCOURSE_TK_ROOT=$PWD/.tk  # ThunderKittens headers copied into the ignored .tk/
out=${OUT:-/tmp/kcourse-out}; mkdir -p "$out"; log=$out/log.txt
export KCOURSE_CALIBRATION=$out/calibration.json
cp calibration/calibration.json "$KCOURSE_CALIBRATION"
start=$(date +%s); LANE_S=${LANE_S:-540}
nvidia-smi -L >>"$log"
while IFS= read -r line; do
  [[ -z "$line" || "$line" == \#* ]] && continue
  left=$(( LANE_S - ($(date +%s) - start) ))
  (( left < 20 )) && { echo "SKIPPED (time) $line" >>"$log"; continue; }
  t0=$(date +%s); echo "=== $line (left ${left}s)" >>"$log"
  case "$line" in
    validate\ *) v=${line#validate }; lang=(); [[ "$v" == *:* ]] && lang=(--lang "${v#*:}")
      timeout "$left" python3 -m grader validate --only "${v%%:*}" "${lang[@]}" --repeat "${REPEAT:-10}" --calibrate \
        >>"$log" 2>"$out/err_last.txt"; rc=$?; tail -5 "$out/err_last.txt" >>"$log" ;;
    sh\ *) timeout "$left" bash -c "${line#sh }" >>"$log" 2>&1; rc=$? ;;
    *) echo "unknown task line (want 'validate ID[:LANG]' or 'sh COMMAND')" >>"$log"; rc=2 ;;
  esac
  echo "DONE rc=$rc $(( $(date +%s) - t0 ))s :: $line" >>"$log"
done < "$TASKS"
echo "lane end $(( $(date +%s) - start ))s" >>"$log"
