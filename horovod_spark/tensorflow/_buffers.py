"""TensorFlow tensors <-> the raw CPU buffers the native core reads and writes.

Measured on TF 2.21 (CPU, 100 MB float32; see docs/tensorflow_keras.md):
- ``np.asarray(eager_tensor)`` is a read-only view of the tensor's memory (about 1 us), while
  ``tensor.numpy()`` copies (about 28 ms), so inputs cross by view.
- ``tf.convert_to_tensor(ndarray)`` always copies in eager mode (about 36 ms), even for aligned
  arrays; DLPack import (``tf.experimental.dlpack.from_dlpack``) shares the array's memory
  (about 2 us), so eager results come back through DLPack.
- Inside ``tf.numpy_function`` inputs arrive as views and outputs that are 64-byte aligned are
  adopted without a copy, so result buffers we allocate are 64-byte aligned.
"""
import collections
import sys
import threading

import numpy as np
import tensorflow as tf

_CORE_DTYPES = {
    tf.uint8: "uint8",
    tf.int8: "int8",
    tf.uint16: "uint16",
    tf.int16: "int16",
    tf.int32: "int32",
    tf.int64: "int64",
    tf.float16: "float16",
    tf.bfloat16: "bfloat16",
    tf.float32: "float32",
    tf.float64: "float64",
    tf.bool: "bool",
}

# TensorFlow's allocator aligns to 64 bytes and so does every buffer TF adopts without copying.
ALIGNMENT = 64

# DLPack has no bfloat16 (TF rejects it); those results take one copy instead.
_NO_DLPACK = (tf.bfloat16,)


def core_dtype(dtype) -> str:
    """The core's name for a TF dtype; TypeError naming the supported ones otherwise."""
    try:
        return _CORE_DTYPES[tf.as_dtype(dtype)]
    except (KeyError, TypeError):
        supported = ", ".join(d.name for d in _CORE_DTYPES)
        raise TypeError("horovod_spark.tensorflow does not support tensors of dtype %s; supported dtypes: %s"
                        % (getattr(dtype, "name", dtype), supported)) from None


def as_tensor(value, what="tensor"):
    """``value`` as a dense tf.Tensor (variables are read; numpy arrays and Python numbers are
    converted, as TF ops do); a clear TypeError for anything else or an unsupported dtype."""
    if isinstance(value, tf.IndexedSlices):
        raise TypeError("%s: expected a dense tensor, got tf.IndexedSlices (use allreduce, which "
                        "gathers them, or convert with tf.convert_to_tensor)" % what)
    if isinstance(value, (tf.SparseTensor, tf.RaggedTensor)):
        raise TypeError("%s: expected a dense tensor, got %s" % (what, type(value).__name__))
    if value is None or isinstance(value, (dict, set)):
        raise TypeError("%s: expected a tensor, got %s" % (what, type(value).__name__))
    try:
        tensor = tf.convert_to_tensor(value)
    except (TypeError, ValueError) as exc:
        raise TypeError("%s: expected a tensor (or something tf.convert_to_tensor accepts), got %s: %s"
                        % (what, type(value).__name__, exc)) from None
    try:
        core_dtype(tensor.dtype)
    except TypeError as exc:
        raise TypeError("%s: %s" % (what, exc)) from None
    return tensor


def _aligned_view(raw, shape, np_dtype, nbytes):
    offset = (-raw.ctypes.data) % ALIGNMENT
    return raw[offset:offset + nbytes].view(np_dtype).reshape(shape)


def _nbytes(shape, np_dtype):
    return int(np.prod(shape, dtype=np.int64)) * np_dtype.itemsize


def empty_aligned(shape, np_dtype) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on a 64-byte boundary."""
    np_dtype = np.dtype(np_dtype)
    shape = tuple(int(d) for d in shape)
    nbytes = _nbytes(shape, np_dtype)
    return _aligned_view(np.empty(nbytes + ALIGNMENT, dtype=np.uint8), shape, np_dtype, nbytes)


class _ResultPool:
    """Recycles result buffers, so a training step does not first-touch (page-fault) fresh
    memory for every gradient: measured at about half the cost of a size-1 allreduce of 7 MB.

    TensorFlow adopts a result array by holding a Python reference to it (numpy_function
    outputs, DLPack capsules) for as long as the tensor lives. Every view numpy derives from a
    pooled buffer references the buffer's owning array (numpy points ``base`` at the owner), so
    an owner referenced by nobody but the pool has no live view and is free to reuse. TF may drop
    its reference a step late, hence several buffers per size.
    """

    PER_SIZE = 4
    MIN_BYTES = 64 << 10  # smaller buffers are cheap to allocate; not worth holding on to
    _FREE_REFS = 3  # the pool's list, the loop variable, getrefcount's argument

    def __init__(self):
        self._lock = threading.Lock()
        self._owners = collections.defaultdict(list)

    def empty(self, shape, np_dtype):
        np_dtype = np.dtype(np_dtype)
        shape = tuple(int(d) for d in shape)
        nbytes = _nbytes(shape, np_dtype)
        if nbytes < self.MIN_BYTES:
            return empty_aligned(shape, np_dtype)
        with self._lock:
            owners = self._owners[nbytes]
            for raw in owners:
                if sys.getrefcount(raw) <= self._FREE_REFS:
                    return _aligned_view(raw, shape, np_dtype, nbytes)
            raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
            if len(owners) < self.PER_SIZE:
                owners.append(raw)
            return _aligned_view(raw, shape, np_dtype, nbytes)


result_pool = _ResultPool()


def aligned(array: np.ndarray) -> np.ndarray:
    """``array`` itself when TF can adopt it without a copy, else an aligned copy."""
    if array.flags.c_contiguous and array.ctypes.data % ALIGNMENT == 0:
        return array
    out = empty_aligned(array.shape, array.dtype)
    np.copyto(out, array)
    return out


def host_view(tensor) -> np.ndarray:
    """A read-only view of an eager CPU tensor's memory (TF copies GPU tensors to host here)."""
    array = np.asarray(tensor)
    # (np.ascontiguousarray would turn a scalar into shape (1,).)
    return array if array.flags.c_contiguous else np.array(array, order="C")


def from_core(raw: np.ndarray, shape, dtype) -> np.ndarray:
    """View a core-allocated result (1-D uint8 array) as ``dtype`` and ``shape``, no copy."""
    np_dtype = tf.as_dtype(dtype).as_numpy_dtype
    return raw.view(np_dtype).reshape(tuple(int(d) for d in shape))


def to_eager(array: np.ndarray, dtype) -> tf.Tensor:
    """An eager tensor over ``array`` (shared, no copy, when aligned; the tensor keeps it alive)."""
    dtype = tf.as_dtype(dtype)
    if dtype in _NO_DLPACK:
        return tf.convert_to_tensor(array, dtype=dtype)
    return tf.experimental.dlpack.from_dlpack(aligned(array).__dlpack__())
