#!/usr/bin/env bash
# Installs the MPI libraries that benchmarks/allreduce.py compares the core with, besides the Open MPI
# of the project's own .venv/: MPICH into .bench-envs/mpich/ and Intel MPI into .bench-envs/intelmpi/,
# each a venv of its own (two MPIs in one environment would shadow each other's mpirun and libmpi).
# Each holds exactly what its lock in benchmarks/peers/ names (pip --require-hashes) and is reused
# while that lock is unchanged.
#   bash scripts/mpi_peers.sh                   # create or reuse both environments
#   bash scripts/mpi_peers.sh mpich             # only the named ones (mpich, intelmpi)
#   bash scripts/mpi_peers.sh --lock [--upgrade]  # recompile the locks from their .in files
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
source "$root/scripts/locked_venv.sh"
peers=(mpich intelmpi)

if [[ "${1:-}" == "--lock" ]]; then
  shift
  for peer in "${peers[@]}"; do
    CUSTOM_COMPILE_COMMAND="bash scripts/mpi_peers.sh --lock" "$root/.venv/bin/pip-compile" --quiet \
      --generate-hashes --allow-unsafe --strip-extras --no-emit-index-url --no-emit-find-links \
      --output-file "benchmarks/peers/requirements-$peer.lock" "$@" "benchmarks/peers/requirements-$peer.in"
  done
  exit 0
fi

# The interpreter the locks were compiled for: the one the project's .venv/ was made from.
if [[ -x "$root/.venv/bin/python" ]]; then
  python="$("$root/.venv/bin/python" -c 'import sys; print(sys._base_executable)')"
else
  python="${PYTHON:-python3}"
fi
wanted=("$@")
((${#wanted[@]})) || wanted=("${peers[@]}")
mkdir -p "$root/.bench-envs"
for peer in "${wanted[@]}"; do
  if [[ ! -f "benchmarks/peers/requirements-$peer.lock" ]]; then
    echo "mpi_peers.sh: unknown peer '$peer'; choose from: ${peers[*]}" >&2
    exit 2
  fi
  locked_venv "$root/.bench-envs/$peer" "$root/benchmarks/peers/requirements-$peer.lock" "$python"
  # The MPI's own launcher, and the library mpi4py loads, must be this environment's.
  PATH="$root/.bench-envs/$peer/bin:$PATH" "$root/.bench-envs/$peer/bin/python" -c \
    'from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0].strip())' \
    | sed "s|^|$peer: |"
done
