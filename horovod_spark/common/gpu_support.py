"""What this installation can do with GPUs, as ``cuda_built()``, ``nccl_built()`` and
``gpu_available()`` report it.

Meanings (the same in ``horovod_spark.common.basics``, ``.torch``, ``.tensorflow``, ``.keras`` and
``horovod-spark-run --check-build``):

- ``cuda_built()``: collectives accept CUDA tensors of the framework: it was built with CUDA, and
  they are staged through pinned host memory to the CPU core (torch: ``horovod_spark/torch/_staging.py``;
  TensorFlow: TF's own copies into and out of the host op). Says nothing about a device being
  present; that is ``gpu_available()``.
- ``gpu_available()``: ``cuda_built()`` and this process sees at least one CUDA device.
- ``nccl_built()``: collectives on torch's CUDA tensors can run over NCCL: torch was built with CUDA
  and the core's NCCL data plane opened libcudart and libnccl.so.2 (``horovod_spark.common.nccl``;
  the core itself needs neither to build or import). TensorFlow's GPU tensors always take host
  staging, so it is False for "tensorflow".
- ``nccl_available()``: ``nccl_built()`` and a CUDA device is visible, so NCCL can run here now.
  Whether a collective uses it is ``HOROVOD_GPU_OPERATIONS``'s choice (``horovod_spark.torch._nccl``).

Functions taking ``framework`` accept "torch" or "tensorflow"; None means any installed one. Each
imports only the framework it is asked about (``horovod_spark.tensorflow`` never imports torch).
"""
import importlib
import importlib.util
import sys

FRAMEWORKS = ("torch", "tensorflow")


def _framework(name):
    """The framework's module, or None when it is not installed (or fails to import)."""
    module = sys.modules.get(name)
    if module is not None:
        return module
    if importlib.util.find_spec(name) is None:
        return None
    try:
        return importlib.import_module(name)
    except Exception:  # a broken install answers "no CUDA", it does not break a capability query
        return None


def _names(framework):
    if framework is None:
        return FRAMEWORKS
    if framework not in FRAMEWORKS:
        raise ValueError("framework must be one of %s or None, got %r" % (", ".join(FRAMEWORKS), framework))
    return (framework,)


def _cuda_built_one(name):
    module = _framework(name)
    if module is None:
        return False
    if name == "torch":
        return getattr(module.version, "cuda", None) is not None
    return bool(module.test.is_built_with_cuda())


def installed(name) -> bool:
    """True when framework ``name`` ("torch" or "tensorflow") imports."""
    return _framework(_names(name)[0]) is not None


def device_count(name) -> int:
    """How many CUDA devices framework ``name`` sees in this process (0 without CUDA support)."""
    return _device_count_one(_names(name)[0])


def _device_count_one(name):
    if not _cuda_built_one(name):
        return 0
    module = _framework(name)
    if name == "torch":
        return module.cuda.device_count() if module.cuda.is_available() else 0
    return len(module.config.list_physical_devices("GPU"))


def cuda_built(framework=None) -> bool:
    """True when collectives accept the framework's CUDA tensors (see the module doc)."""
    return any(_cuda_built_one(name) for name in _names(framework))


def gpu_available(framework=None) -> bool:
    """True when ``cuda_built(framework)`` and this process sees a CUDA device."""
    return any(_device_count_one(name) > 0 for name in _names(framework))


def _nccl_loaded(need_device):
    from horovod_spark.common import nccl  # (imports the core only when asked)
    return nccl.available() if need_device else nccl.libraries_loaded()


def nccl_built(framework=None) -> bool:
    """True when collectives on the framework's CUDA tensors can run over NCCL (see the module doc)."""
    return "torch" in _names(framework) and _cuda_built_one("torch") and _nccl_loaded(False)


def nccl_available(framework=None) -> bool:
    """True when ``nccl_built(framework)`` and a CUDA device is visible (see the module doc)."""
    return "torch" in _names(framework) and _cuda_built_one("torch") and _nccl_loaded(True)
