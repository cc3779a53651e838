#!/usr/bin/env bash
# The whole test suite: creates or reuses .venv/, builds the core, runs pytest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
exec python -m pytest -q tests "$@"
