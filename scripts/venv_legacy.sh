#!/usr/bin/env bash
# Sourced by scripts/run_tests.sh (and usable on its own): create or reuse .venv-legacy/, the older
# stack of requirements-legacy.txt (pyspark 3.5, pyarrow 14, numpy 1.26, Petastorm), and install
# horovod_spark into it. Stamps of the inputs let a second run skip pip and the C++ build.
#
# The native core is plain C++ with no framework or Arrow headers, but its extension module is
# built in place (horovod_spark/common/_core*.so) and shared with .venv/; both venvs use the same
# Python (3.11), so one build serves both and this script only builds it when it is missing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
legacy="$root/.venv-legacy"
if [[ ! -x "$legacy/bin/python" ]]; then
  python3 -m venv "$legacy"
fi
legacy_py="$legacy/bin/python"
legacy_req_stamp=$(sha256sum requirements-legacy.txt | cut -c1-16)
if [[ ! -f "$legacy/.req-$legacy_req_stamp" ]]; then
  "$legacy_py" -m pip install --quiet --upgrade pip
  "$legacy_py" -m pip install --quiet -r requirements-legacy.txt
  rm -f "$legacy"/.req-*; touch "$legacy/.req-$legacy_req_stamp"
fi
legacy_src_stamp=$(cat setup.py $(find native -type f | sort) | sha256sum | cut -c1-16)
if ! ls horovod_spark/common/_core*.so >/dev/null 2>&1; then
  "$legacy_py" setup.py build_ext --inplace -j 2 >/tmp/horovod_spark_legacy_build.log 2>&1 \
    || { cat /tmp/horovod_spark_legacy_build.log; exit 1; }
fi
if [[ ! -f "$legacy/.native-$legacy_src_stamp" ]]; then
  # Editable: the venv imports this checkout, so the main and the legacy suite test the same code.
  "$legacy_py" -m pip install --quiet --no-build-isolation --no-deps -e . >/dev/null
  rm -f "$legacy"/.native-*; touch "$legacy/.native-$legacy_src_stamp"
fi
export HOROVOD_SPARK_LEGACY_PYTHON="$legacy_py"
