#!/usr/bin/env bash
# Issue 42's table of feedback times (scripts/feedback_bench.py --table), one shard per GPU of the machine, side by
# side: a machine of several GPUs measures the catalog in a fraction of one GPU's time, each grade on a GPU of its
# own. For scripts/device_bg.sh (a run longer than one device call), which sets BG:
#   bash scripts/device_bg.sh start 540 bash scripts/device_table.sh [--no-edit] [--shard-of=K/M] [EXERCISE ...]
#   bash scripts/device_bg.sh wait 570                                  (again, each within 30 s of the last)
# --shard-of=K/M: this machine's part K of M of the catalog (over several sessions), itself cut in one slice per
# GPU. Files back in $OUT: table_<gpu>.md per GPU (rows as they come: a run cut short keeps those done) and
# table_errors.txt.
set -u
gpus=$(nvidia-smi -L | wc -l)
part=1/1 args=()
for a in "$@"; do case "$a" in --shard-of=*) part=${a#--shard-of=} ;; *) args+=("$a") ;; esac; done
k=${part%/*} m=${part#*/}
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
for ((g = 0; g < gpus; g++)); do
  # slice g + 1 of gpus of part k of m is slice (k - 1) * gpus + g + 1 of m * gpus
  CUDA_VISIBLE_DEVICES=$g python3 scripts/feedback_bench.py --table --shard=$(((k - 1) * gpus + g + 1))/$((m * gpus)) \
    ${args[@]+"${args[@]}"} >"$BG/table_$g.md" 2>>"$BG/table_errors.txt" &
done
wait
cat "$BG"/table_*.md
