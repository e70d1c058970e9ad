#!/usr/bin/env bash
# Fresh machine -> virtual environment with zipcoll and Open MPI from pip -> one benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[dev]"
export PATH="$PWD/.venv/bin:$PATH"
source scripts/mpienv.sh
mpiexec -n 2 zipcoll-bench allreduce -m 1M:64M --algorithm ring -f "$@"
echo "# Next (README, Use): source .venv/bin/activate; source scripts/mpienv.sh; mpiexec -n 4 python script.py"
