"""Small helpers ``horovod.tensorflow`` exports beside its ops, under Horovod's names."""
from horovod_spark.tensorflow._op_args import resolve_op


def handle_average_backwards_compatibility(op, average):
    """The reduce op meant by Horovod's ``op=`` and its deprecated ``average=`` (both None: Average)."""
    return resolve_op(op, average)


def check_num_rank_power_of_2(num_rank: int) -> bool:
    """True when ``num_rank`` is a power of two."""
    return num_rank > 0 and num_rank & (num_rank - 1) == 0


def vars_to_refs(vars):  # noqa: A002 - Horovod's parameter name
    """Hashable references of TensorFlow variables (``Variable.ref()``), e.g. to key a dict."""
    return [v.ref() for v in vars]


def refs_to_vars(refs):
    """The variables behind ``vars_to_refs``'s references."""
    return [r.deref() for r in refs]
