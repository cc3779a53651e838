#!/usr/bin/env bash
# Every GPU check in one go, for one short run on a GPU machine: builds the native core in place,
# prints `horovod-spark-run --check-build`, runs tests/gpu/ (plus the CPU-side GPU tests: flags,
# staging path, device choice) and benchmarks/gpu.py.
#
#   scripts/run_gpu_checks.sh [--no-build] [PYTHON]
#
# PYTHON: an interpreter with torch built with CUDA (and pyspark, pytest, pytest-timeout; TensorFlow
# with CUDA for its GPU tests); default .venv/bin/python when present, else python3. The locked
# .venv has CPU builds of torch and TensorFlow, so on a GPU machine give the interpreter that has
# the CUDA builds. --no-build keeps an existing horovod_spark/common/_core*.so.
#
# NCCL: a CUDA build of torch brings nvidia-nccl-cu12, so the build checks the core's NCCL
# declarations against its nccl.h and the NCCL data plane loads its libnccl.so.2. NCCL refuses two
# ranks on one GPU, so on a one-GPU machine tests/gpu/test_torch_nccl.py runs NCCL with one rank,
# and the two-rank tests (test_torch_cuda.py, the shared-GPU cases) take the host-staged path.
#
# Without a CUDA device everything still runs: the GPU tests skip, each with its reason, and the
# benchmark says it skipped; the script then ends with "GPU checks: SKIPPED (no CUDA device)" and
# exit code 0. It exits non-zero when a test or the benchmark fails.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
build=1
if [[ "${1:-}" == "--no-build" ]]; then build=0; shift; fi
py="${1:-}"
if [[ -z "$py" ]]; then
  if [[ -x .venv/bin/python ]]; then py=.venv/bin/python; else py=python3; fi
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export PYSPARK_PYTHON="$py" PYSPARK_DRIVER_PYTHON="$py"

echo "== interpreter: $py"
"$py" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "devices", torch.cuda.device_count())'
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true

if [[ $build -eq 1 || -z "$(ls horovod_spark/common/_core*.so 2>/dev/null)" ]]; then
  echo "== building the native core"
  jobs=$(nproc 2>/dev/null || echo 2)
  "$py" setup.py build_ext --inplace -j "$jobs" >/tmp/horovod_spark_gpu_build.log 2>&1 \
    || { cat /tmp/horovod_spark_gpu_build.log; exit 1; }
fi

echo "== horovod-spark-run --check-build"
"$py" -m horovod_spark.launcher --check-build

echo "== tests"
status=0
"$py" -m pytest -q -rs -p no:cacheprovider tests/gpu tests/frameworks/test_gpu_flags.py \
  tests/frameworks/test_torch_staging.py tests/estimator/test_rank_device.py \
  tests/frameworks/test_torch_nccl_choice.py tests/native/test_gpu_loader.py || status=$?

echo "== benchmarks/gpu.py"
bench_out=$("$py" benchmarks/gpu.py) || status=$?
echo "$bench_out"

if [[ $status -ne 0 ]]; then
  echo "GPU checks: FAILED (exit $status)"
  exit $status
fi
if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "GPU checks: SKIPPED (no CUDA device): the CPU-side tests passed, the GPU tests and the benchmark skipped"
  exit 0
fi
echo "GPU checks: PASSED"
