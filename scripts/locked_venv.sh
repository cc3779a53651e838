#!/usr/bin/env bash
# Sourced by scripts/venv.sh, scripts/venv_legacy.sh and scripts/build_wheels.sh: locked_venv DIR LOCK
# [PYTHON] makes DIR a venv of PYTHON (default python3) that holds exactly what LOCK names
# (pip --require-hashes: every package pinned, every file checked).
# It reuses DIR while DIR/.lock-<hash of LOCK> exists, and otherwise builds it anew from nothing,
# so that a package dropped from the lock, or a version changed in it, never lingers.
locked_venv() {
  local dir="$1" lock="$2" python="${3:-python3}"
  local stamp
  stamp=$(sha256sum "$lock" | cut -c1-16)
  if [[ -x "$dir/bin/python" && -f "$dir/.lock-$stamp" ]]; then
    return 0
  fi
  echo "setting up $(basename "$dir")/ from $(basename "$lock") (a few minutes, once)" >&2
  rm -rf "$dir"
  "$python" -m venv "$dir"
  # The lock pins pip itself; hashes make pip refuse any file that differs from the one locked.
  if ! "$dir/bin/python" -m pip install --quiet --require-hashes -r "$lock" 2>"$dir.pip.log"; then
    grep -v "is ignored: it is neither a file nor a directory" "$dir.pip.log" >&2
    echo "installing $lock into $dir failed (full log: $dir.pip.log)" >&2
    return 1
  fi
  rm -f "$dir.pip.log"
  touch "$dir/.lock-$stamp"
}
