#!/usr/bin/env bash
# The main job: creates or reuses .venv/, builds the core, then fits a TorchEstimator on a local[2]
# SparkSession (digits as a DataFrame, 2 ranks), prints per-epoch metrics and the test accuracy.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
exec python examples/torch_estimator_digits.py "$@"
