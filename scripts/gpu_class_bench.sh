#!/usr/bin/env bash
# A class graded through `kcourse grade-batch --scheduler` the way a cluster runs it: a Dask scheduler and one
# `dask worker --resources GPU=1` per GPU, each a separate process, then scripts/class_bench.py against them;
# once with one worker, once with one per GPU. Prints each run's time and grades per minute.
#   bash scripts/gpu_class_bench.sh [LEARNERS=20] [PYTHON=python3]
# Needs the `cluster` extra (dask[distributed]) and at least 2 GPUs for the second run.
set -u
learners=${1:-20}
py=${2:-python3}
port=8786
address=tcp://127.0.0.1:$port
gpus=$($py -c "import torch; print(torch.cuda.device_count())")
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null; }
trap cleanup EXIT

start_worker() {  # one worker on GPU $1, one task at a time
  CUDA_VISIBLE_DEVICES=$1 $py -m distributed.cli.dask_worker $address --nthreads 1 --resources GPU=1 \
    --name gpu$1 --no-dashboard > /tmp/kcourse-worker-$1.log 2>&1 &
  pids+=($!)
}

bench() {  # LEARNERS: a fresh gradebook each time
  $py scripts/class_bench.py --learners "$1" --exercises vector_add reduction --scheduler $address --timeout 10
}

$py -m distributed.cli.dask_scheduler --port $port --no-dashboard > /tmp/kcourse-scheduler.log 2>&1 &
pids+=($!)
for ((gpu = 0; gpu < gpus; gpu++)); do start_worker $gpu; done
sleep 10
echo "warm-up on every GPU (builds, Triton compiles, each GPU's ceilings):"
bench 2
if ((gpus > 1)); then
  for ((i = 1; i < gpus; i++)); do kill "${pids[$((i + 1))]}"; done  # the workers of GPU 1 and up
  sleep 6
fi
echo "one worker:"
bench "$learners"
if ((gpus > 1)); then
  for ((gpu = 1; gpu < gpus; gpu++)); do start_worker $gpu; done
  sleep 10
  echo "$gpus workers:"
  bench "$learners"
fi
