#!/usr/bin/env bash
# Set up kernel-course in .venv: PyTorch (kept if the system already has one, e.g. a CUDA build),
# then this kit and its dependencies (triton, click, jinja2, nbformat, ninja, pytest).
#   bash scripts/setup.sh [EXTRAS]   EXTRAS: pyproject's optional groups to add, e.g. `test,docs` (.ci/run's), in the
#                                    same pip run (a second run would resolve and build the kit again: 20 s)
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv --system-site-packages .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install -q torch==2.13.0
.venv/bin/python -m pip install -q -e ".${1:+[$1]}"
echo "kernel-course is set up in .venv: run .venv/bin/kcourse --help"
