"""The collectives of ``horovod_spark.tensorflow``, with ``horovod.tensorflow``'s signatures.

Every op works eagerly and inside ``tf.function`` and returns new tensors; ``device_dense`` and
``device_sparse`` are accepted for compatibility (collectives run on CPU buffers here).
"""
import tensorflow as tf

from horovod_spark.common.ops import check_reducescatter_op
from horovod_spark.common.process_sets import global_process_set
from horovod_spark.tensorflow import _names, _primitives
from horovod_spark.tensorflow._buffers import as_tensor
from horovod_spark.tensorflow._indexed_slices import allreduce_slices
from horovod_spark.tensorflow._op_args import Average, Sum, reduce_op, resolve_op  # noqa: F401 (Sum: as Horovod's)
from horovod_spark.tensorflow.compression import Compression


def _dense_allreduce(tensor, core_name, compression, op, prescale_factor, postscale_factor, process_set):
    compressed, ctx = compression.compress(tensor)
    reduced = _primitives.allreduce([compressed], [core_name], op, prescale_factor, postscale_factor,
                                    process_set)[0]
    return compression.decompress(reduced, ctx)


def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """Reduce ``tensor`` over the process set (op=None: Average) into a new tensor.

    A ``tf.IndexedSlices`` is reduced by allgathering its values and indices (op Average or Sum),
    and stays IndexedSlices; ``compression`` applies to dense tensors.
    """
    op = resolve_op(op, average)
    core_name = _names.op_name("allreduce", name, ignore_name_scope)
    if isinstance(tensor, tf.IndexedSlices):
        return allreduce_slices(tensor, core_name, op, prescale_factor, postscale_factor, process_set)
    tensor = as_tensor(tensor, "allreduce")
    return _dense_allreduce(tensor, core_name, compression, op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="", compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """Reduce a list of tensors; the dense ones are negotiated and fused as one unit."""
    op = resolve_op(op, average)
    tensors = list(tensors)
    if not tensors:
        return []
    base = _names.op_name("grouped_allreduce", name, ignore_name_scope)
    count = len(tensors)
    names = ["%s.%dof%d" % (base, i, count) for i in range(count)]
    results = [None] * count
    dense = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    for i in range(count):
        if i not in dense:
            results[i] = allreduce_slices(tensors[i], names[i], op, prescale_factor, postscale_factor, process_set)
    if dense:
        compressed, ctxs = zip(*(compression.compress(as_tensor(tensors[i], "grouped_allreduce")) for i in dense))
        reduced = _primitives.allreduce(list(compressed), [names[i] for i in dense], op, prescale_factor,
                                        postscale_factor, process_set, groups=[list(range(len(dense)))])
        for i, r, ctx in zip(dense, reduced, ctxs):
            results[i] = compression.decompress(r, ctx)
    return results


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenate every rank's ``tensor`` along dim 0 (its size may differ per rank)."""
    tensor = as_tensor(tensor, "allgather")
    return _primitives.allgather([tensor], [_names.op_name("allgather", name, ignore_name_scope)], process_set)[0]


def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set):
    """``allgather`` over a list, in one collective call."""
    tensors = [as_tensor(t, "grouped_allgather") for t in tensors]
    if not tensors:
        return []
    base = _names.op_name("grouped_allgather", name, ignore_name_scope)
    names = ["%s.%dof%d" % (base, i, len(tensors)) for i in range(len(tensors))]
    return _primitives.allgather(tensors, names, process_set)


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Return the root's ``tensor`` on every rank (``root_rank``: a global rank, as in Horovod)."""
    tensor = as_tensor(tensor, "broadcast")
    core_name = _names.op_name("broadcast", name, ignore_name_scope)
    return _primitives.broadcast([tensor], [core_name], root_rank, process_set)[0]


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Send ``splits[r]`` rows of ``tensor`` (dim 0, in rank order) to each rank r.

    Returns the rows every rank sent here, concatenated in rank order; with ``splits`` given,
    ``(output, received_splits)``, the second saying how many came from each rank (int32), as
    Horovod does. ``splits=None`` splits dim 0 evenly.
    """
    tensor = as_tensor(tensor, "alltoall")
    if splits is not None:
        splits = as_tensor(splits, "alltoall splits")
        if splits.dtype not in (tf.int32, tf.int64):
            raise TypeError("alltoall splits must be int32 or int64, got %s" % splits.dtype.name)
    core_name = _names.op_name("alltoall", name, ignore_name_scope)
    output, received_splits = _primitives.alltoall(tensor, core_name, splits, process_set)
    return (output, received_splits) if splits is not None else output


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduce ``tensor`` over the process set and return this rank's block of dim 0 (the first
    ``dim0 % size`` ranks get one extra row)."""
    op = reduce_op(Average if op is None else op)
    check_reducescatter_op(op)
    tensor = as_tensor(tensor, "reducescatter")
    compressed, ctx = compression.compress(tensor)
    core_name = _names.op_name("reducescatter", name, ignore_name_scope)
    out = _primitives.reducescatter([compressed], [core_name], op, prescale_factor, postscale_factor,
                                    process_set)[0]
    return compression.decompress(out, ctx)


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0,
                          name=None, ignore_name_scope=False):
    """``reducescatter`` over a list, in one collective call."""
    op = reduce_op(Average if op is None else op)
    check_reducescatter_op(op)
    tensors = [as_tensor(t, "grouped_reducescatter") for t in tensors]
    if not tensors:
        return []
    compressed, ctxs = zip(*(compression.compress(t) for t in tensors))
    base = _names.op_name("grouped_reducescatter", name, ignore_name_scope)
    names = ["%s.%dof%d" % (base, i, len(tensors)) for i in range(len(tensors))]
    outs = _primitives.reducescatter(list(compressed), names, op, prescale_factor, postscale_factor, process_set)
    return [compression.decompress(o, c) for o, c in zip(outs, ctxs)]


# The rest of horovod.tensorflow.mpi_ops' namespace, which ported scripts also import from here.

handle_average_backwards_compatibility = resolve_op
