"""The NCCL data plane's loader and build, on any machine: the core builds with and without the
NCCL/CUDA headers, and without libnccl, libcudart or a GPU it says which is missing and the fix.

The loader opens the libraries once per process, so each case runs in a fresh interpreter.
"""
import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPU_SOURCES = [os.path.join(ROOT, "native", "gpu", name) for name in ("gpu_library.cc", "nccl_plane.cc")]


def _in_fresh_process(code, env=None):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})))
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", "the loader wrote to stderr: %r" % done.stderr
    return json.loads(done.stdout)


def test_missing_libraries_are_named_with_the_fix():
    reason, info = _in_fresh_process(
        "import json; from horovod_spark.common import _core\n"
        "r = _core.gpu_load(['/nonexistent/libcudart.so.12'], ['/nonexistent/libnccl.so.2'])\n"
        "print(json.dumps([r, _core.gpu_info()]))")
    assert reason.startswith("NCCL data plane unavailable:")
    assert "The CUDA runtime library (libcudart) could not be loaded; tried:\n  /nonexistent/libcudart.so.12:" in reason
    assert "pip install nvidia-cuda-runtime-cu12" in reason
    assert "NVIDIA's NCCL library (libnccl.so.2) could not be loaded; tried:\n  /nonexistent/libnccl.so.2:" in reason
    assert "pip install nvidia-nccl-cu12" in reason and "HOROVOD_SPARK_NCCL_LIBRARY" in reason
    assert "staged through host memory (HOROVOD_GPU_OPERATIONS=HOST" in reason
    assert info == {"error": reason, "cudart_path": "", "nccl_path": "", "nccl_version": 0, "device_count": 0}


def test_the_default_candidates_give_a_true_answer_and_keep_it():
    first, again, info, devices = _in_fresh_process(
        "import json, torch; from horovod_spark.common import nccl\n"
        "print(json.dumps([nccl.unavailable_reason(), nccl.unavailable_reason(), nccl.info(),"
        " torch.cuda.device_count()]))")
    assert first == again
    assert info["error"] == first
    if first == "":  # a GPU machine with NCCL
        assert info["nccl_version"] >= 21200 and info["device_count"] == devices > 0
        return
    assert first.startswith("NCCL data plane unavailable:")
    # Whatever is missing is named; a machine with the CUDA runtime but no GPU says so.
    if info["cudart_path"] and devices == 0:
        assert "No CUDA device is visible to this process" in first
    if not info["cudart_path"]:
        assert "could not be loaded" in first and "libcudart" in first
    if not info["nccl_path"]:
        assert "libnccl.so.2" in first and "pip install nvidia-nccl-cu12" in first


def test_an_explicit_nccl_library_is_tried_first():
    cudart, candidates = _in_fresh_process(
        "import json; from horovod_spark.common import nccl\n"
        "print(json.dumps(nccl.library_candidates()))", env={"HOROVOD_SPARK_NCCL_LIBRARY": "/opt/nccl/libnccl.so.2"})
    assert candidates[0] == "/opt/nccl/libnccl.so.2" and candidates[-1] == "libnccl.so.2"
    assert cudart[0] == "libcudart.so.12"


def _compiler():
    return shutil.which(os.environ.get("CXX", "g++"))


def _syntax_check(extra):
    for source in GPU_SOURCES:
        done = subprocess.run([_compiler(), "-std=c++17", "-Wall", "-Werror", "-fsyntax-only",
                               "-I" + os.path.join(ROOT, "native")] + extra + [source],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr


@pytest.mark.skipif(_compiler() is None, reason="no C++ compiler (g++, or $CXX)")
def test_the_data_plane_compiles_without_any_cuda_or_nccl_header():
    _syntax_check([])


def _nccl_include():
    try:
        import nvidia.nccl
    except ImportError:
        return None
    return os.path.join(list(nvidia.nccl.__path__)[0], "include")


NCCL_INCLUDE = _nccl_include()
CUDA_INCLUDE = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "include")


@pytest.mark.skipif(_compiler() is None, reason="no C++ compiler (g++, or $CXX)")
@pytest.mark.skipif(NCCL_INCLUDE is None or not os.path.isfile(os.path.join(NCCL_INCLUDE, "nccl.h")),
                    reason="no nccl.h: the nvidia-nccl-cu12 package is not installed")
@pytest.mark.skipif(not os.path.isfile(os.path.join(CUDA_INCLUDE, "cuda_runtime_api.h")),
                    reason="no cuda_runtime_api.h under $CUDA_HOME/include (default /usr/local/cuda)")
def test_the_data_plane_declarations_match_the_real_headers():
    # HS_CHECK_GPU_ABI: gpu_abi.h static_asserts every value and size it declares against nccl.h.
    _syntax_check(["-DHS_CHECK_GPU_ABI", "-I" + NCCL_INCLUDE, "-I" + CUDA_INCLUDE])
