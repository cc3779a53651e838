#!/usr/bin/env bash
# The whole test suite: creates or reuses .venv/, builds the core, runs the linters
# (scripts/lint.sh) and pytest (listing the slowest tests); then creates or reuses .venv-legacy/
# (the older stack: pyspark 3.5, pyarrow 14, numpy 1.26, Petastorm; see scripts/venv_legacy.sh)
# and runs there again the tests marked legacy_stack (data, estimators, Petastorm). Arguments go
# to both pytest runs. HOROVOD_SPARK_SKIP_LEGACY=1 skips the second.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
bash scripts/lint.sh
python -m pytest -q --durations=15 tests "$@"
if [[ "${HOROVOD_SPARK_SKIP_LEGACY:-0}" == "1" ]]; then
  echo "HOROVOD_SPARK_SKIP_LEGACY=1: the older-stack (legacy_stack) tests were not run"
  exit 0
fi
source "$(dirname "${BASH_SOURCE[0]}")/venv_legacy.sh"
echo "== older stack ($("$HOROVOD_SPARK_LEGACY_PYTHON" -c 'import pyspark, pyarrow, petastorm; print("pyspark", pyspark.__version__, "pyarrow", pyarrow.__version__, "petastorm", petastorm.__version__)')): tests marked legacy_stack"
status=0
PYSPARK_PYTHON="$HOROVOD_SPARK_LEGACY_PYTHON" PYSPARK_DRIVER_PYTHON="$HOROVOD_SPARK_LEGACY_PYTHON" \
  "$HOROVOD_SPARK_LEGACY_PYTHON" -m pytest -q -m legacy_stack tests "$@" || status=$?
# 5: the arguments selected no legacy_stack test, which is not a failure of this run.
if [[ $status -eq 5 ]]; then
  echo "no legacy_stack test among the selected tests"
  exit 0
fi
exit $status
