#!/usr/bin/env bash
# Issue 38 on a GPU machine: the box's attacks and hardening tests, every kind of exercise validated boxed
# (solutions pass, stubs fail; the torch operator built cold inside the box), one-shot grade times boxed
# against unboxed (KCOURSE_UNBOXED=1), and the sanitizer's and the capstone's GPU tests, boxed too.
# Usage (repository root): bash scripts/box_check.sh   (files land in $OUT when set)
set -u
export PYTHONUNBUFFERED=1 KCOURSE_HOME=${KCOURSE_HOME:-/tmp/kcourse-home} KCOURSE_CACHE=$(mktemp -d)  # cold builds
out=${OUT:-/tmp/kcourse-out}; mkdir -p "$out"
k="python3 -m grader"
only="--only vector_add --only softmax --only reduction --only gelu_op --only stream_overlap"
python3 -c "from grader.child import box; print('box:', box.available())"
python3 - <<'PY'
import time, pathlib, tempfile, torch
from grader.child import box
torch.zeros(1, device="cuda")  # a CUDA context, as the warm child has
t = time.perf_counter()
box.enter(box.policy(pathlib.Path(tempfile.mkdtemp()), pathlib.Path("x.py"), pathlib.Path.cwd()))
print(f"enter after CUDA init: {1e3 * (time.perf_counter() - t):.1f} ms; matmul after:",
      float((torch.ones(64, 64, device="cuda") @ torch.ones(64, 64, device="cuda")).sum()))
PY
$k validate --source solutions $only 2>&1 | tee "$out/validate_solutions.txt" | tail -15
$k validate --source stubs $only 2>&1 | tail -8
for x in "softmax" "reduction" "gelu_op"; do
  for mode in boxed unboxed boxed unboxed; do
    [ $mode = unboxed ] && export KCOURSE_UNBOXED=1 || unset KCOURSE_UNBOXED
    TIMEFORMAT=%R; took=$( { time $k grade $x --source solutions > "$out/grade_${x}_$mode.txt" 2>&1; } 2>&1 )
    echo "$x $mode $took s: $(tail -1 "$out/grade_${x}_$mode.txt" | cut -c1-90)"
  done
done
unset KCOURSE_UNBOXED
timeout 200 python3 -m pytest -q -p no:cacheprovider -m gpu tests/test_sanitizer.py tests/test_capstone.py 2>&1 | tail -4
timeout 300 python3 -m pytest -q -p no:cacheprovider tests/test_box.py tests/test_hardening.py 2>&1 | tail -8
