"""The NCCL data plane's libraries, the choice between it and host staging, and the submission of
collectives on CUDA memory to it (``enqueue_device``).

The core opens libcudart and libnccl at run time (native/gpu/gpu_library.h), once per process, from
the candidates listed here: a library the process has mapped already (a CUDA build of torch maps
both) wins, then ``HOROVOD_SPARK_NCCL_LIBRARY``, the ``nvidia-nccl-cu12`` / ``nvidia-cuda-runtime-cu12``
packages' copies, and the system's. ``unavailable_reason()`` says why NCCL cannot run here ("" when
it can): the missing library or GPU, and the fix.
"""
import importlib.util
import os
import threading

from horovod_spark.common import _core, config

_KINDS = {"allreduce": config.GPU_ALLREDUCE, "allgather": config.GPU_ALLGATHER, "broadcast": config.GPU_BROADCAST,
          "alltoall": config.GPU_ALLTOALL, "reducescatter": config.GPU_REDUCESCATTER}
# (Spelled out, so that each variable's reader can be found in the code.)
_OWN_MODE = {"allreduce": lambda: config.GPU_ALLREDUCE.get(), "allgather": lambda: config.GPU_ALLGATHER.get(),
             "broadcast": lambda: config.GPU_BROADCAST.get(), "alltoall": lambda: config.GPU_ALLTOALL.get(),
             "reducescatter": lambda: config.GPU_REDUCESCATTER.get()}
_lock = threading.Lock()
_reason = None


def _package_library(package, filename):
    """``filename`` in the lib directory of an installed ``nvidia.<package>`` wheel, or None."""
    try:
        spec = importlib.util.find_spec("nvidia.%s" % package)
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(root, "lib", filename)
        if os.path.isfile(path):
            return path
    return None


def library_candidates():
    """(libcudart candidates, libnccl candidates), in the order the core tries them."""
    cudart = ["libcudart.so.12"]
    packaged = _package_library("cuda_runtime", "libcudart.so.12")
    if packaged:
        cudart.append(packaged)
    cudart += ["libcudart.so.13", "libcudart.so"]
    nccl = []
    explicit = config.NCCL_LIBRARY.get()
    if explicit:
        nccl.append(explicit)
    nccl.append("libnccl.so.2")
    packaged = _package_library("nccl", "libnccl.so.2")
    if packaged:
        nccl.insert(len(nccl) - 1, packaged)
    return cudart, nccl


def unavailable_reason():
    """"" when the NCCL data plane can run in this process (libraries loaded, a GPU visible), else
    why not and what to do. The first call opens the libraries; later calls repeat its answer."""
    global _reason
    with _lock:
        if _reason is None:
            _reason = _core.gpu_load(*library_candidates())
        return _reason


def available():
    """True when the NCCL data plane can run here (see ``unavailable_reason``)."""
    return unavailable_reason() == ""


def libraries_loaded():
    """True when libcudart and libnccl both opened, whether or not a GPU is visible."""
    unavailable_reason()
    info = _core.gpu_info()
    return bool(info and info["nccl_path"] and info["cudart_path"])


def info():
    """What was loaded: paths, NCCL version (e.g. 22703 for 2.27.3) and the device count."""
    unavailable_reason()
    return _core.gpu_info()


def variable(kind):
    """The variable that chooses for ``kind`` alone (HOROVOD_GPU_ALLREDUCE ...)."""
    return _KINDS[kind]


def mode(kind):
    """"nccl", "host" or "auto" for collectives of ``kind`` ("allreduce" ... "reducescatter") on
    CUDA tensors: the kind's own variable (HOROVOD_GPU_ALLREDUCE ...), else HOROVOD_GPU_OPERATIONS."""
    own = _OWN_MODE[kind]()
    return own if own is not None else config.GPU_OPERATIONS.get()


def supports(dtype_code, op_code, prescale, postscale, reduces):
    """Whether NCCL runs this reduction (no Adasum, int16, uint16 or bool reductions; scale factors only for
    floating-point Sum/Average); data movement (``reduces=False``) always."""
    return _core.nccl_supports(int(dtype_code), int(op_code), float(prescale), float(postscale), bool(reduces))


def enqueue_device(op_type, name, in_ptr, out_ptr, dtype_code, shape, root, op_code, prescale, postscale,
                   process_set_id, splits, device, stream) -> int:
    """Submit a collective on CUDA memory (outputs preallocated) to the NCCL data plane; returns its
    handle. ``stream`` is the caller's ``cudaStream_t``: NCCL runs after the work queued there, and
    the stream waits for the collective. Refused unless the libraries loaded (``available()``)."""
    return _core.enqueue_device(op_type, name, in_ptr, out_ptr, dtype_code, shape, root, op_code, prescale,
                                postscale, process_set_id, splits, device, stream)
