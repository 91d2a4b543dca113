#!/usr/bin/env bash
# On a machine with several GPUs: grade a small class with one worker per GPU, then with one worker,
# and show which GPU graded whom. Usage: bash scripts/batch_check.sh
set -u
export PYTHONUNBUFFERED=1 KCOURSE_HOME=/tmp/kb-home KCOURSE_CACHE=/tmp/kb-cache
nvidia-smi -L
for who in ada bo cy di; do mkdir -p /tmp/class/$who; cp solutions/reduction/reduction.cu solutions/softmax/softmax.py /tmp/class/$who/; done
cp tests/fixtures/submissions/reduction_never_ends.cu /tmp/class/bo/reduction.cu
for workers in "--workers 1" ""; do
  start=$(date +%s)
  python3 -m grader grade-batch /tmp/class --only reduction --only softmax --timeout 60 --out /tmp/book $workers | tail -10
  echo "grade-batch ${workers:-(one worker per GPU)}: $(( $(date +%s) - start )) s"
done
python3 - <<'PY'
import json
for row in json.load(open("/tmp/book/gradebook.json")):
    device = (row["result"] or {}).get("device", {})
    print(row["learner"], row["exercise"], row["status"], "GPU", device.get("visible_devices"))
PY
