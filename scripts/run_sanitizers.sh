#!/usr/bin/env bash
# Builds the native core and its multi-rank C++ tests twice, with AddressSanitizer +
# UndefinedBehaviorSanitizer and with ThreadSanitizer, into build/sanitizers/<variant>/ (objects
# are reused while their sources and headers are unchanged), and runs the tests under each:
#   test_engine   real Engines as threads over loopback TCP and shared memory: every collective,
#                 fusion, the response cache and the coordinator's cached lane, process sets,
#                 join, several submitting threads with the timeline toggled, autotune, mismatches, a rank
#                 that shuts down or stalls, the peer port's admission under a flood; and (scenario
#                 death) rank processes of which one dies;
#   test_collectives --quick, test_reduce   the collective algorithms (ranks as threads that read
#                 each other's buffers in place) and the reduction kernels on their own.
# Variant asan-python (not run by default: minutes more) also runs the Python tests of the core
# with an ASan/UBSan build of the extension (see python_tests below).
# Any sanitizer report fails the run (halt_on_error, non-zero exit codes). Prints each part's time.
# Usage: scripts/run_sanitizers.sh [asan|tsan|asan-python ...]   (default: asan tsan). CXX picks the
# compiler, PYTHON the interpreter for asan-python (default .venv/bin/python).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
variants=("$@")
((${#variants[@]})) || variants=(asan tsan)
CXX="${CXX:-g++}"
jobs="${SANITIZER_JOBS:-$(nproc)}"

declare -A flags=(
  [asan]="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
  # -Wno-tsan: TSan cannot model the seq_cst fences of the shared-memory doorbell and rings. They
  # order memory between rank processes, which TSan does not watch anyway (in test_engine each
  # rank maps the segment at its own address, so no access of one rank aliases another's).
  [tsan]="-fsanitize=thread -Wno-tsan"
)
flags[asan-python]="${flags[asan]}"
# Reports end the run at once with a non-zero status; leaks are reported at exit.
export ASAN_OPTIONS="halt_on_error=1:exitcode=86:detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:exitcode=87"
export TSAN_OPTIONS="halt_on_error=1:exitcode=88:second_deadlock_stack=1"

now() { echo "$EPOCHREALTIME"; }
elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f s", b - a }'; }

# Newer kernels randomise mmap more than the TSan of older compilers accepts ("unexpected memory
# mapping"); running without address-space randomisation avoids that.
tsan_prefix=()
if setarch "$(uname -m)" -R true 2>/dev/null; then tsan_prefix=(setarch "$(uname -m)" -R); fi

build() {  # $1 = variant, $2 = what to make, $3 = extra flags; make tracks dependencies (-MMD)
  local out="build/sanitizers/$1"
  mkdir -p "$out"
  make --no-print-directory -s -j "$jobs" -f - OUT="$out" CXX="$CXX" \
    CXXFLAGS="-std=c++17 -O1 -g -pthread -Wall -Inative -Itests/native ${flags[$1]} ${3:-}" "$2" <<'MAKE'
core := $(wildcard native/common/*.cc native/collectives/*.cc native/engine/*.cc native/transport/*.cc native/gpu/*.cc)
kernels := $(wildcard native/common/*.cc native/collectives/*.cc)
engine_tests := tests/native/test_engine.cc $(wildcard tests/native/engine_*.cc)
obj = $(patsubst %.cc,$(OUT)/%.o,$(1))
tests: $(OUT)/test_engine $(OUT)/test_collectives $(OUT)/test_reduce
$(OUT)/test_engine: $(call obj,$(engine_tests) $(core))
	$(CXX) $(CXXFLAGS) $^ -o $@ -lrt -ldl
$(OUT)/test_collectives: $(call obj,tests/native/test_collectives.cc $(kernels))
	$(CXX) $(CXXFLAGS) $^ -o $@
$(OUT)/test_reduce: $(call obj,tests/native/test_reduce.cc $(kernels))
	$(CXX) $(CXXFLAGS) $^ -o $@
$(OUT)/_core.so: $(call obj,$(core) $(wildcard native/python/*.cc))
	$(CXX) $(CXXFLAGS) -shared $^ -o $@ -lrt -ldl
$(OUT)/%.o: %.cc
	@mkdir -p $(dir $@)
	$(CXX) $(CXXFLAGS) -MMD -MP -c $< -o $@
-include $(shell find $(OUT) -name '*.d' 2>/dev/null)
MAKE
}

status=0
run() {  # $1 = variant, $2... = command; logs to build/sanitizers/<variant>/<name>.log
  local variant=$1 name
  shift
  name="$(basename "$1")${2:+ $2}"
  local log="$root/build/sanitizers/$variant/${name// /_}.log" t
  t=$(now)
  local prefix=()
  [[ $variant == tsan ]] && prefix=("${tsan_prefix[@]}")
  if "${prefix[@]}" "$@" >"$log" 2>&1; then
    echo "  $variant $name: ok ($(elapsed "$t"), $(tail -n 1 "$log"))"
  else
    local rc=$?
    echo "  $variant $name: FAILED with exit status $rc ($(elapsed "$t")); log $log:"
    grep -E -A 40 'ERROR: |WARNING: ThreadSanitizer|runtime error|FAIL' "$log" | head -n 120 || tail -n 60 "$log"
    status=1
  fi
}

# The Python tests of the core (tests/**/test_core_*.py: real rank processes through the binding)
# with an ASan/UBSan build of the extension in a copy of the package. CPython itself is not
# instrumented, so the runtime is preloaded, with libstdc++ (ASan must see __cxa_throw at start),
# and leak detection is off (the interpreter's own allocations at exit would all count).
python_tests() {
  local out="build/sanitizers/asan-python" py="${PYTHON:-}" ext pyinc t
  [[ -n "$py" ]] || { [[ -x .venv/bin/python ]] && py="$root/.venv/bin/python" || py="$(command -v python3)"; }
  ext=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  pyinc="-I$("$py" -c 'import pybind11; print(pybind11.get_include())') -I$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')"
  t=$(now)
  build asan-python "$out/_core.so" "-fPIC -fvisibility=hidden $pyinc"
  rm -rf "$out/pkg" && mkdir -p "$out/pkg" && cp -r horovod_spark "$out/pkg/"
  find "$out/pkg" \( -name '_core*.so' -o -name __pycache__ \) -prune -exec rm -rf {} +
  cp "$out/_core.so" "$out/pkg/horovod_spark/common/_core$ext"
  echo "asan-python: built in $(elapsed "$t")"
  mapfile -t py_tests < <(find "$root/tests" -name 'test_core_*.py' | sort)
  (
    cd "$out"  # not the repository: python -m would put its horovod_spark first on sys.path
    export PYTHONPATH="$root/$out/pkg:$root/tests${PYTHONPATH:+:$PYTHONPATH}" ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
    export LD_PRELOAD="$("$CXX" -print-file-name=libasan.so) $("$CXX" -print-file-name=libstdc++.so)"
    export PYSPARK_PYTHON="$py" PYSPARK_DRIVER_PYTHON="$py"
    run asan-python "$py" -m pytest -q -p no:cacheprovider "${py_tests[@]}"
    exit $status
  )
}

total=$(now)
for v in "${variants[@]}"; do
  [[ -n "${flags[$v]:-}" ]] || { echo "unknown variant '$v' (asan, tsan, asan-python)" >&2; exit 2; }
  if [[ $v == asan-python ]]; then
    python_tests || status=1
    continue
  fi
  t=$(now)
  build "$v" tests
  echo "$v: built in $(elapsed "$t")"
  dir="build/sanitizers/$v"
  t=$(now)
  run "$v" "$dir/test_reduce"
  run "$v" "$dir/test_collectives" --quick
  for scenario in collectives hierarchical cached_lane join process_sets threads failures links admission autotune device death; do
    run "$v" "$dir/test_engine" "$scenario"
  done
  echo "$v: tests ran in $(elapsed "$t")"
done
echo "sanitizers: $( ((status == 0)) && echo passed || echo FAILED) in $(elapsed "$total")"
exit $status
