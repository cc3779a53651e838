"""Lightning's collective calls (``Strategy.reduce``, ``all_gather``) in horovod_spark's terms.

Lightning names reductions as strings (``self.log(..., reduce_fx="mean")`` reaches ``reduce`` as
"mean") or as ``torch.distributed.ReduceOp`` members, and groups as torch process groups;
horovod_spark has its own ops and ``ProcessSet``s.
"""
import torch

import horovod_spark.torch as hvd

# Lightning's and torch.distributed's names of a reduction -> horovod_spark's op.
_OPS_BY_NAME = {
    "mean": hvd.Average, "avg": hvd.Average, "average": hvd.Average,
    "sum": hvd.Sum, "max": hvd.Max, "min": hvd.Min, "product": hvd.Product,
}


def reduce_op(op):
    """horovod_spark's op for Lightning's ``reduce_op`` (None means "mean", as in Lightning)."""
    if op is None:
        return hvd.Average
    # torch.distributed.ReduceOp members (RedOpType) carry their name; strings are Lightning's own.
    name = op.lower() if isinstance(op, str) else getattr(op, "name", str(op)).lower()
    if name not in _OPS_BY_NAME:
        raise ValueError("reduce_op %r is not supported by HorovodStrategy; use one of %s or the matching "
                         "torch.distributed.ReduceOp" % (op, ", ".join(sorted(_OPS_BY_NAME))))
    return _OPS_BY_NAME[name]


def process_set(group):
    """The ProcessSet for Lightning's ``group``: None or torch's WORLD group mean every rank."""
    if group is None or isinstance(group, hvd.ProcessSet):
        return group or hvd.global_process_set
    world = getattr(getattr(torch.distributed, "group", None), "WORLD", None)
    if group is world:
        return hvd.global_process_set
    raise ValueError("HorovodStrategy reduces over horovod_spark process sets, got group=%r; pass None (every "
                     "rank) or a horovod_spark.torch.ProcessSet" % (group,))


def reduce(tensor, op, ranks):
    """``tensor`` reduced over ``ranks`` (a ProcessSet) with horovod_spark's ``op``; a new tensor.

    A mean of integers is a float, as Lightning's own strategies return it."""
    if op == hvd.Average and not (tensor.is_floating_point() or tensor.is_complex()):
        return hvd.allreduce(tensor, op=hvd.Sum, process_set=ranks) / ranks.size()
    return hvd.allreduce(tensor, op=op, process_set=ranks)


class _GatherRows(torch.autograd.Function):
    """Every rank's tensor stacked along a new first dimension. The gradient of this rank's input is
    the sum over ranks of the gradients of its row, as torch.distributed.nn's all_gather (and so
    Lightning's ``all_gather(..., sync_grads=True)`` under DDP) defines it."""

    @staticmethod
    def forward(ctx, tensor, ranks):
        ctx.ranks = ranks
        return hvd.allgather(tensor.unsqueeze(0), process_set=ranks)

    @staticmethod
    def backward(ctx, grad_output):
        return hvd.reducescatter(grad_output.contiguous(), op=hvd.Sum, process_set=ctx.ranks)[0], None


def all_gather(tensor, ranks, sync_grads=False):
    """Lightning's ``all_gather``: a tensor of shape ``(ranks.size(), *tensor.shape)``; the tensor
    must have the same shape on every rank. Differentiable only with ``sync_grads``."""
    if sync_grads:
        return _GatherRows.apply(tensor, ranks)
    with torch.no_grad():
        return hvd.allgather(tensor.detach().unsqueeze(0), process_set=ranks)
