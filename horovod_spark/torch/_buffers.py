"""Torch tensors <-> the raw buffers the native core takes (pointer, dtype name, shape).

The core reads and writes host memory directly through ``data_ptr()``, so a contiguous CPU
tensor crosses without a copy (CUDA tensors cross through ``_staging``); results the core
allocates come back as a uint8 numpy array that the returned tensor views in place.
"""
import numpy as np
import torch

from horovod_spark.common.ops import DTYPES as _ops_dtype_codes

_CORE_DTYPES = {
    torch.uint8: "uint8",
    torch.int8: "int8",
    torch.uint16: "uint16",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.float16: "float16",
    torch.bfloat16: "bfloat16",
    torch.float32: "float32",
    torch.float64: "float64",
    torch.bool: "bool",
}

SUPPORTED_DTYPES = tuple(_CORE_DTYPES)
CORE_DTYPE_CODES = {dtype: _ops_dtype_codes[name] for dtype, name in _CORE_DTYPES.items()}


def core_dtype(tensor):
    """The core's name for ``tensor``'s dtype; TypeError naming the supported ones otherwise."""
    try:
        return _CORE_DTYPES[tensor.dtype]
    except KeyError:
        supported = ", ".join(str(d) for d in SUPPORTED_DTYPES)
        raise TypeError("horovod_spark.torch does not support tensors of dtype %s; supported dtypes: %s"
                        % (tensor.dtype, supported)) from None


def _check_device(tensor):
    if tensor.device.type == "cpu":
        return
    from horovod_spark.torch import _staging
    if tensor.device.type == "cuda" and _staging.available():
        return  # staged through pinned host memory (horovod_spark/torch/_staging.py)
    raise ValueError("horovod_spark.torch collectives take CPU and CUDA tensors; got a tensor on %s, which this "
                     "build cannot reach. Move it with tensor.cpu() first." % (tensor.device,))


def check_same_device(tensors):
    """The one device of ``tensors`` (a grouped op's members); ValueError naming them otherwise."""
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise ValueError("a grouped collective takes tensors on one device; got tensors on %s. Move them to one "
                         "device first." % ", ".join(sorted(str(d) for d in devices)))
    return next(iter(devices))


def check_tensor(tensor):
    """Validate ``tensor`` for the core; returns its core dtype name."""
    # The common case first, with no device object built (tensor.device costs 0.2 us a call,
    # and DistributedOptimizer calls this once per gradient per step).
    if isinstance(tensor, torch.Tensor) and tensor.is_cpu and not tensor.is_sparse:
        dtype = _CORE_DTYPES.get(tensor.dtype)
        if dtype is not None:
            return dtype
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("expected a torch.Tensor, got %s" % type(tensor).__name__)
    if tensor.is_sparse:
        raise ValueError("sparse tensors are not supported here; use sparse_allreduce_async or "
                         "convert with tensor.to_dense()")
    dtype = core_dtype(tensor)
    _check_device(tensor)
    return dtype


def contiguous(tensor):
    """``tensor`` itself when the core can use its memory as is, else a contiguous copy."""
    return tensor if tensor.is_contiguous() else tensor.contiguous()


def describe(tensor):
    """(ptr, shape) of a contiguous tensor, as the core's functions take them."""
    return tensor.data_ptr(), tuple(tensor.shape)


def from_core(raw, shape, dtype):
    """View a core-allocated result (1-D uint8 numpy array) as a CPU tensor of ``dtype`` and ``shape``.

    No copy: the tensor shares, and keeps alive, the array's memory.
    """
    if not isinstance(raw, np.ndarray):
        raw = np.frombuffer(raw, dtype=np.uint8)
    if not raw.flags.writeable:
        # torch.from_numpy warns on read-only arrays; a copy is the only safe way to hand the
        # caller a tensor they may modify.
        raw = raw.copy()
    # view, not reshape: the array is contiguous, and view skips reshape's copy-or-not decision.
    return torch.from_numpy(raw).view(dtype).view(tuple(shape))
