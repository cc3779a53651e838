#!/usr/bin/env bash
# The whole test suite: creates or reuses .venv/, builds the core, runs the linters
# (scripts/lint.sh) and pytest (listing the slowest tests). Beside that main pass, in the
# background, it creates or reuses .venv-legacy/ (the older stack: pyspark 3.5, pyarrow 14, numpy
# 1.26, Petastorm; see scripts/venv_legacy.sh) and runs there again the tests marked legacy_stack
# (data, estimators, Petastorm): the main pass leaves the cores idle most of its time (Spark and
# rank start-up, waits on timeouts), so the two together take little longer than the main pass
# alone. The older stack's output is printed after the main pass's. Arguments go
# to both pytest runs. HOROVOD_SPARK_SKIP_LEGACY=1 skips the second. Last, when no arguments
# narrowed the run, scripts/run_sanitizers.sh builds the core with ASan+UBSan and with TSan and runs
# its multi-rank C++ tests under each (HOROVOD_SPARK_SKIP_SANITIZERS=1 skips that).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
# "on" or "off": a flag read by horovod_spark/common/config.py's own parser, so it takes the same
# words as every other flag and a value outside them stops the run here, named.
flag() {
  python -c 'import sys
from horovod_spark.common import config
try:
    variable = config.VARIABLES[sys.argv[1]]
    print(variable.kind.show(variable.get()))
except config.ConfigError as exc:
    sys.exit(str(exc))' "$1"
}
skip_legacy=$(flag HOROVOD_SPARK_SKIP_LEGACY)
skip_sanitizers=$(flag HOROVOD_SPARK_SKIP_SANITIZERS)
legacy_log=$(mktemp)
legacy_pid=""
# The older stack's pass, its own process group so that an early exit of this script stops it.
stop_legacy() {
  if [[ -n $legacy_pid ]]; then kill -- -"$legacy_pid" 2>/dev/null || true; fi
  rm -rf "$legacy_log" "$legacy_log.tmp"
}
trap stop_legacy EXIT
if [[ $skip_legacy == off ]]; then
  set -m
  (
    set -euo pipefail
    source "$(dirname "${BASH_SOURCE[0]}")/venv_legacy.sh"
    echo "== older stack ($("$HOROVOD_SPARK_LEGACY_PYTHON" -c 'import pyspark, pyarrow, petastorm; print("pyspark", pyspark.__version__, "pyarrow", pyarrow.__version__, "petastorm", petastorm.__version__)')): tests marked legacy_stack"
    status=0
    PYSPARK_PYTHON="$HOROVOD_SPARK_LEGACY_PYTHON" PYSPARK_DRIVER_PYTHON="$HOROVOD_SPARK_LEGACY_PYTHON" \
      "$HOROVOD_SPARK_LEGACY_PYTHON" -m pytest -q -p no:cacheprovider --basetemp "$legacy_log.tmp" -m legacy_stack tests "$@" \
      || status=$?
    # 5: the arguments selected no legacy_stack test, which is not a failure of this run.
    if [[ $status -eq 5 ]]; then
      echo "no legacy_stack test among the selected tests"
      status=0
    fi
    exit $status
  ) >"$legacy_log" 2>&1 </dev/null &
  legacy_pid=$!
  set +m
fi
bash scripts/lint.sh
status=0
python -m pytest -q --durations=15 tests "$@" || status=$?
# Whatever the main pass gave, the older stack's pass ends and its output is shown.
if [[ $skip_legacy == on ]]; then
  echo "HOROVOD_SPARK_SKIP_LEGACY=$HOROVOD_SPARK_SKIP_LEGACY: the older-stack (legacy_stack) tests were not run"
else
  legacy_status=0
  wait "$legacy_pid" || legacy_status=$?
  legacy_pid=""
  cat "$legacy_log"
  if [[ $status -eq 0 ]]; then status=$legacy_status; fi
fi
if [[ $status -eq 0 && $skip_sanitizers == off && $# -eq 0 ]]; then
  echo "== the native core under ASan+UBSan and TSan (scripts/run_sanitizers.sh)"
  bash scripts/run_sanitizers.sh || status=$?
fi
exit $status
