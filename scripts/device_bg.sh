#!/usr/bin/env bash
# A run longer than one device call (at most 600 s), on the same machine held warm across calls (call again within
# its 30-s idle release): started in the background, then waited on, call after call.
#   bash scripts/device_bg.sh start SECONDS COMMAND...   start COMMAND (setsid: it outlives the call), wait SECONDS
#   bash scripts/device_bg.sh wait SECONDS                wait again; when it has ended, its files come back in $OUT
# COMMAND runs in the repository root with the wheels of .whl/ on PYTHONPATH and BG=/tmp/kcourse-bg, its folder:
# it writes there what should come back (a junit file, the GPU lock's log; at most 7 files). Its output goes to
# $BG/log.txt; each call prints how far it got and brings back what is there so far (a run the session's device
# time cuts off still leaves the logs of the last call). The GPU tier in one run, then the heavy grades
# (docs/testing.md): bash scripts/device_bg.sh start 540 bash scripts/device_tier.sh
set -u
verb=$1 wait_s=$2; shift 2
export BG=/tmp/kcourse-bg
if [ "$verb" = start ]; then
  rm -rf "$BG"; mkdir -p "$BG"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
  printf '%q ' "$@" >"$BG/command"
  (export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1; [ -d .tk ] && export KCOURSE_TK_ROOT=$PWD/.tk
   date +%s >"$BG/t0"; setsid nohup bash -c "$(cat "$BG/command") >$BG/log.txt 2>&1; echo \$? >$BG/rc; date +%s >$BG/t1" \
     </dev/null >/dev/null 2>&1 &)
  sleep 2
fi
end=$(( $(date +%s) + wait_s ))
while [ ! -f "$BG/rc" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 2; done
for f in "$BG"/*; do case "$f" in */t0|*/t1|*/rc|*/command) ;; *) cp "$f" "${OUT:-/tmp}/" ;; esac; done
if [ ! -f "$BG/rc" ]; then
  echo "still running after $(( $(date +%s) - $(cat "$BG/t0") )) s: call 'wait' again within 30 s"; tail -c 1500 "$BG/log.txt"
  exit 0
fi
echo "ended: rc $(cat "$BG/rc") in $(( $(cat "$BG/t1") - $(cat "$BG/t0") )) s"; tail -60 "$BG/log.txt"
