#!/usr/bin/env bash
# Sourced by the README's commands: create or reuse .venv/ with exactly the versions (and hashes) of
# requirements.lock, then build the native core in place.
# The venv is made anew whenever requirements.lock changes, so that it never holds a package or a
# version the lock does not name; a stamp of the lock (and one of the native sources) lets a second
# run skip pip and the C++ build when nothing changed. scripts/lock.sh refreshes the lock.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source "$root/scripts/locked_venv.sh"
locked_venv "$root/.venv" "$root/requirements.lock"
py="$root/.venv/bin/python"
src_stamp=$(cat setup.py $(find native -type f | sort) | sha256sum | cut -c1-16)
if [[ ! -f .venv/.installed ]]; then
  # Once per venv: the editable install (console script, package metadata) builds the core in place.
  "$py" -m pip install --quiet --no-build-isolation --no-deps -e . >/tmp/horovod_spark_build.log 2>&1 \
    || { cat /tmp/horovod_spark_build.log; exit 1; }
  touch .venv/.installed
  if ls horovod_spark/common/_core*.so >/dev/null 2>&1; then touch .venv/.native-$src_stamp; fi
fi
if [[ ! -f .venv/.native-$src_stamp ]] || ! ls horovod_spark/common/_core*.so >/dev/null 2>&1; then
  "$py" setup.py build_ext --inplace -j 2 >/tmp/horovod_spark_build.log 2>&1 || { cat /tmp/horovod_spark_build.log; exit 1; }
  rm -f .venv/.native-*; touch .venv/.native-$src_stamp
fi
export PATH="$root/.venv/bin:$PATH"
export PYSPARK_PYTHON="$py"
export PYSPARK_DRIVER_PYTHON="$py"
