"""The reduce op a collective call means, for every framework: Horovod's ``op=`` with its
deprecated ``average=`` flag, and a checked ``ReduceOp`` for what a caller passed as an op."""
import warnings

from horovod_spark.common.ops import Average, ReduceOp, Sum

_BY_CODE = {int(op): op for op in ReduceOp}


def handle_average_backwards_compatibility(op, average, *, stacklevel=3):
    """The op meant by ``op`` and Horovod's deprecated ``average=`` (both None: Average); an
    ``op`` given is returned as given (``reduce_op`` checks it). ``stacklevel`` places the
    DeprecationWarning as ``warnings.warn`` counts, from this function: 3 names the caller of the
    op that took ``average=``."""
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one of them.")
        return op
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed in v1.0",
                      DeprecationWarning, stacklevel=stacklevel)
        return Average if average else Sum
    return Average


def reduce_op(op, namespace: str = "") -> ReduceOp:
    """``op`` (a ReduceOp or its int code) as a ReduceOp; a ValueError naming the ops otherwise,
    the first spelled with ``namespace`` as the caller's users write it (``"hvd."``)."""
    try:
        return _BY_CODE[int(op)]
    except (TypeError, ValueError, KeyError):
        raise ValueError("unknown reduction op %r; use one of %sAverage, Sum, Adasum, Min, Max, Product"
                         % (op, namespace)) from None
