"""The value-level collectives of ``horovod.tensorflow.keras``: numpy arrays, Python numbers or
tensors in, eager tensors out."""
from horovod_spark.tensorflow import functions as _functions
from horovod_spark.tensorflow import mpi_ops as _mpi_ops
from horovod_spark.tensorflow.compression import Compression
from horovod_spark.tensorflow.mpi_ops import Average


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None,
              compression=Compression.none):
    """Reduce ``value`` over all ranks (op=None: Average)."""
    return _mpi_ops.allreduce(value, average=average, name=name, op=op, prescale_factor=prescale_factor,
                              postscale_factor=postscale_factor, compression=compression)


def allgather(value, name=None):
    """Concatenate every rank's ``value`` along its first dimension."""
    return _mpi_ops.allgather(value, name=name)


def broadcast(value, root_rank, name=None):
    """Return the root rank's ``value`` on every rank."""
    return _mpi_ops.broadcast(value, root_rank, name=name)


def reducescatter(value, name=None, op=Average):
    """Reduce ``value`` over all ranks and return this rank's block of its first dimension."""
    return _mpi_ops.reducescatter(value, name=name, op=op)


def broadcast_global_variables(root_rank):
    """Horovod's TF1 session helper: not available in TF 2 eager execution (as in Horovod)."""
    return _functions.broadcast_global_variables(root_rank)
