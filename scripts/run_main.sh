#!/usr/bin/env bash
# The main job: creates or reuses .venv/, builds the core, trains on 2 local ranks, prints metrics.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
exec horovod-spark-run -np 2 python examples/torch_digits.py "$@"
