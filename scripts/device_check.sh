#!/usr/bin/env bash
# One call on a GPU machine, end to end: environment (+ training run), calibration of every solution,
# every exercise graded as a learner would (with the solution files as the submission), reports with
# plots, profile (+ ncu) and tune, a release graded against the calibration, and a class batch.
# Usage (repository root): bash scripts/device_check.sh   (files land in $OUT when set)
set -u
export PYTHONUNBUFFERED=1 KCOURSE_HOME=${KCOURSE_HOME:-/tmp/kcourse-home} KCOURSE_CACHE=${KCOURSE_CACHE:-/tmp/kcourse-cache}
out=${OUT:-/tmp/kcourse-out}; mkdir -p "$out"
export KCOURSE_CALIBRATION=$out/calibration.json
k="python3 -m grader"
repo=$PWD
$k env-check 2>&1 | tee "$out/env.txt"
$k calibrate 2>&1 | tee "$out/calibrate.txt"
for ex in "week1 vector_add:vector_add/vector_add.cu" "week2 reduction:reduction/reduction.cu" "week2 matmul:matmul/matmul.cu" \
          "week3 gelu_op:gelu_op/gelu_op.cu" "week4 vector_add:vector_add/vector_add.py" "week5 softmax:softmax/softmax.py"; do
  $k grade ${ex%%:*} --file solutions/${ex#*:} 2>&1 | tee -a "$out/grades.txt"
done
$k tune softmax 2>&1 | tee "$out/tune.txt"; $k tune vector_add --lang triton --file solutions/vector_add/vector_add.py 2>&1 | tee -a "$out/tune.txt"
$k profile softmax --file solutions/softmax/softmax.py --ncu 2>&1 | tee "$out/profile.txt"
$k notebook day4 --out /tmp/nb/replace_op.ipynb && $k grade softmax --file /tmp/nb/replace_op.ipynb | tail -3
for r in day1 day2 day4 day5 week2 week11 final; do $k report $r; done
cp $KCOURSE_HOME/reports/{day1_env_check.md,final_report.md,day5_tuning.md,roofline.png} "$out/" 2>/dev/null
$k release /tmp/kit && (cd /tmp/kit && KCOURSE_HOME=/tmp/kit-home python3 -m grader grade week2 reduction --file $repo/solutions/reduction/reduction.cu 2>&1 | tee "$out/release_grade.txt")
mkdir -p /tmp/class/ada /tmp/class/bo && cp solutions/reduction/reduction.cu /tmp/class/ada/ && cp tests/fixtures/submissions/reduction_illegal_access.cu /tmp/class/bo/reduction.cu
$k grade-batch /tmp/class --only reduction --out "$out/gradebook" 2>&1 | tee "$out/batch.txt"
