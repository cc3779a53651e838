"""Argument handling shared by the collective ops: reduce ops, process sets."""
import warnings

from horovod_spark.common import basics as _basics
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
    """Horovod's deprecated ``average=`` flag against ``op`` (both None: Average)."""
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one of them.")
        return reduce_op(op)
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed in v1.0",
                      DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    return Average


def reduce_op(op):
    try:
        return ReduceOp(int(op))
    except (TypeError, ValueError):
        raise ValueError("unknown reduction op %r; use one of hvd.Average, Sum, Adasum, Min, Max, Product"
                         % (op,)) from None


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
