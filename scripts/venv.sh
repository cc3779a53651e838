#!/usr/bin/env bash
# Sourced by the README's commands: create or reuse .venv/, install requirements, build the native core.
# A stamp of the inputs lets a second run skip pip and the C++ build when nothing changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [[ ! -x .venv/bin/python ]]; then
  python3 -m venv .venv
fi
py="$root/.venv/bin/python"
req_stamp=$(sha256sum requirements.txt | cut -c1-16)
if [[ ! -f .venv/.req-$req_stamp ]]; then
  "$py" -m pip install --quiet --upgrade pip
  "$py" -m pip install --quiet -r requirements.txt
  rm -f .venv/.req-*; touch .venv/.req-$req_stamp
fi
src_stamp=$(cat setup.py $(find native -type f | sort) | sha256sum | cut -c1-16)
if [[ ! -f .venv/.native-$src_stamp ]] || ! ls horovod_spark/common/_core*.so >/dev/null 2>&1; then
  "$py" setup.py build_ext --inplace -j 2 >/tmp/horovod_spark_build.log 2>&1 || { cat /tmp/horovod_spark_build.log; exit 1; }
  "$py" -m pip install --quiet --no-build-isolation --no-deps -e . >/dev/null
  rm -f .venv/.native-*; touch .venv/.native-$src_stamp
fi
export PATH="$root/.venv/bin:$PATH"
export PYSPARK_PYTHON="$py"
export PYSPARK_DRIVER_PYTHON="$py"
