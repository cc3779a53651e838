#!/usr/bin/env bash
# Linters, run by scripts/run_tests.sh before the tests (and usable on their own once .venv/
# exists: bash scripts/lint.sh): ruff over the Python code (rules in pyproject.toml)
# and clang-format over the C++ core and its tests (style in .clang-format). Exits non-zero, naming
# the files, when either finds something.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
export PATH="$root/.venv/bin:$PATH"
status=0
ruff check --quiet . || { echo "ruff found problems (fix: ruff check --fix ., or by hand)"; status=1; }
bash scripts/check_format.sh || status=1
[[ $status -eq 0 ]] && echo "lint: ruff and clang-format clean"
exit $status
