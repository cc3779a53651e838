#!/usr/bin/env bash
# Exits non-zero, naming each file, when a C++ file of the native core (native/, tests/native/) is
# not formatted as .clang-format says. Fix with: clang-format -i <file>.
# The formatter is $CLANG_FORMAT, else .venv/bin/clang-format, else clang-format on PATH; versions
# format differently, so use the one the requirements pin.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
cf="${CLANG_FORMAT:-}"
if [[ -z "$cf" ]]; then
  if [[ -x .venv/bin/clang-format ]]; then cf=.venv/bin/clang-format; else cf=$(command -v clang-format || true); fi
fi
if [[ -z "$cf" ]]; then
  echo "check_format.sh: clang-format not found; install the requirements (pip install clang-format) or set CLANG_FORMAT" >&2
  exit 2
fi
mapfile -t files < <(find native tests/native -type f \( -name '*.cc' -o -name '*.h' \) | sort)
bad=()
for f in "${files[@]}"; do
  if ! "$cf" --style=file --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if ((${#bad[@]})); then
  echo "not formatted ($("$cf" --version)); run: $cf -i ${bad[*]}" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "clang-format: ${#files[@]} native files formatted"
