#!/usr/bin/env bash
# Refreshes the lock files from the ranges: requirements.in -> requirements.lock (the main stack,
# .venv/) and requirements-legacy.in -> requirements-legacy.lock (the older stack, .venv-legacy/).
# Every package, transitive ones included, gets an exact version and its hashes (pip-tools'
# pip-compile, resolving with this machine's pip configuration, which is where the CPU build of
# torch comes from). Run it after editing a .in file, then run the test command:
#   bash scripts/lock.sh            # keep the locked versions that still satisfy the ranges
#   bash scripts/lock.sh --upgrade  # take the newest versions the ranges allow
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/venv.sh"
cd "$root"
# requirements-build / requirements-wheel-tools: what scripts/build_wheels.sh builds the wheels with.
for stack in requirements requirements-legacy requirements-build requirements-wheel-tools; do
  CUSTOM_COMPILE_COMMAND="bash scripts/lock.sh" "$root/.venv/bin/pip-compile" --quiet \
    --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links \
    --output-file "$stack.lock" "$@" "$stack.in"
done
