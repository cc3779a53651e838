"""Argument handling shared by the collective ops: reduce ops, process sets."""
from horovod_spark.common import basics as _basics
from horovod_spark.common import op_resolution
from horovod_spark.common import ops as _core
from horovod_spark.common.process_sets import process_set_id_of, root_index

ReduceOp = _core.ReduceOp
Average = ReduceOp.Average
Sum = ReduceOp.Sum
Adasum = ReduceOp.Adasum
Min = ReduceOp.Min
Max = ReduceOp.Max
Product = ReduceOp.Product


def resolve_op(op, average):
    """Horovod's deprecated ``average=`` flag against ``op`` (both None: Average), checked."""
    # stacklevel 4: the warning names the caller of the op that took average= (see op_resolution).
    return reduce_op(op_resolution.handle_average_backwards_compatibility(op, average, stacklevel=4))


def reduce_op(op):
    return op_resolution.reduce_op(op, "hvd.")


def require_init():
    if not _basics.is_initialized():
        raise ValueError("horovod_spark has not been initialized; call hvd.init() first")


def ps_id(process_set):
    """The core id of ``process_set`` (a clear ValueError when it was never registered, or when
    hvd.init() was not called)."""
    require_init()
    return process_set_id_of(process_set)


def ps_rank(process_set):
    """This rank's index within ``process_set`` (what the core's root and splits count in)."""
    r = process_set.rank()
    if r is None:
        raise ValueError("this rank is not a member of %r" % (process_set,))
    return r


def check_root(root_rank, process_set):
    """``root_rank`` (a global rank, as in Horovod) as the index within ``process_set`` that the
    core and ``ps_rank`` count in."""
    require_init()
    return root_index(root_rank, process_set)
