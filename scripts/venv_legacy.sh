#!/usr/bin/env bash
# Sourced by scripts/run_tests.sh (and usable on its own): create or reuse .venv-legacy/, the older
# stack of requirements-legacy.lock (pyspark 3.5, pyarrow 14, numpy 1.26, Petastorm: exact versions
# with hashes, compiled from requirements-legacy.in by scripts/lock.sh), and install horovod_spark into it.
#
# The native core is plain C++ with no framework or Arrow headers, built in place as
# horovod_spark/common/_core*.so by scripts/venv.sh; both venvs run the same Python (3.11), so that
# one build serves both. This script builds it only when it is missing, and puts the checkout on
# the venv's path with a .pth file (what an editable install amounts to) rather than
# `pip install -e .`, which would compile the core a second time and rewrite the shared .so.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
legacy="$root/.venv-legacy"
source "$root/scripts/locked_venv.sh"
locked_venv "$legacy" "$root/requirements-legacy.lock"
legacy_py="$legacy/bin/python"
if ! ls horovod_spark/common/_core*.so >/dev/null 2>&1; then
  "$legacy_py" setup.py build_ext --inplace -j 2 >/tmp/horovod_spark_legacy_build.log 2>&1 \
    || { cat /tmp/horovod_spark_legacy_build.log; exit 1; }
fi
legacy_site=$("$legacy_py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$root" > "$legacy_site/horovod_spark_checkout.pth"
export HOROVOD_SPARK_LEGACY_PYTHON="$legacy_py"
