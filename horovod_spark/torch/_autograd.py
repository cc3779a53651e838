"""Differentiable collectives (torch.autograd.Function), with Horovod's gradient conventions.

Each backward is itself a collective that every rank of the process set must reach in the same
order. The scaling follows horovod.torch 0.28 exactly (so a ported script trains the same): the
gradients that cross ranks are averaged, as data-parallel training averages its loss, except
that allreduce reduces them with its own op and reducescatter with Sum scales them by the size.
"""
import torch
from torch.autograd import Function
from torch.autograd import forward_ad as _forward_ad

from horovod_spark.common import basics
from horovod_spark.torch import _data_ops, _reduce_ops
from horovod_spark.torch._handles import synchronize

# Bound once: torch defines a module __getattr__, so CPython does not cache ``torch.X`` look-ups
# and each one searches torch's large namespace again.
_functorch_active = torch._C._are_functorch_transforms_active
_is_grad_enabled = torch.is_grad_enabled
_Tensor = torch.Tensor


def needs_autograd(tensors):
    """Whether a differentiable collective on ``tensors`` must run through its autograd Function:
    a plain tensor (not a subclass) that no recorded graph, forward-mode level or functorch
    transform can see gets the forward's result as it is. ``Function.apply`` costs more than the
    rest of a small allreduce (its Python prologue, the context object, wrapping the outputs), and
    gives that same result when nothing records it: the forwards that skip it return new tensors,
    never an input."""
    grad_enabled = _is_grad_enabled()
    for t in tensors:
        if type(t) is not _Tensor or (grad_enabled and t.requires_grad):
            return True
    return _forward_ad._current_level >= 0 or _functorch_active()


class HorovodAllreduce(Function):
    """out = reduce(x); d/dx = the same reduction of the upstream gradients (as Horovod)."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return _reduce_ops.allreduce_now(tensor, False, name, op, prescale_factor, postscale_factor,
                                         process_set)

    @staticmethod
    def backward(ctx, grad_output):
        op, pre, post, process_set = ctx.args
        return (HorovodAllreduce.apply(grad_output, None, op, pre, post, process_set),
                None, None, None, None, None)


class HorovodGroupedAllreduce(Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return tuple(synchronize(_reduce_ops.grouped_allreduce_async(
            list(tensors), None, name, op, prescale_factor, postscale_factor, process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        op, pre, post, process_set = ctx.args
        grads = HorovodGroupedAllreduce.apply(None, op, pre, post, process_set, *grad_outputs)
        return (None, None, None, None, None) + tuple(grads)


def _row_offsets(rows, process_set):
    """Where this rank's rows start in each of several allgather results (one small allgather)."""
    local = torch.tensor([rows], dtype=torch.int64)
    counts = synchronize(_data_ops.allgather_async(local, None, process_set))
    return [int(v) for v in counts[:process_set.rank()].sum(dim=0).tolist()]


class HorovodAllgather(Function):
    """out = concat over ranks; d/dx = this rank's rows of the averaged upstream gradients."""

    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.rows = tensor.shape[0] if tensor.dim() else 0
        ctx.process_set = process_set
        return _data_ops.allgather_now(tensor, name, process_set)

    @staticmethod
    def backward(ctx, grad_output):
        averaged = HorovodAllreduce.apply(grad_output, None, _reduce_ops.Average, 1.0, 1.0, ctx.process_set)
        offset = _row_offsets([ctx.rows], ctx.process_set)[0]
        return averaged.narrow(0, offset, ctx.rows), None, None


class HorovodGroupedAllgather(Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.rows = [t.shape[0] if t.dim() else 0 for t in tensors]
        ctx.process_set = process_set
        return tuple(synchronize(_data_ops.grouped_allgather_async(list(tensors), name, process_set)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        averaged = HorovodGroupedAllreduce.apply(None, _reduce_ops.Average, 1.0, 1.0, ctx.process_set,
                                                 *grad_outputs)
        offsets = _row_offsets(ctx.rows, ctx.process_set)
        grads = [g.narrow(0, off, rows) for g, off, rows in zip(averaged, offsets, ctx.rows)]
        return (None, None) + tuple(grads)


class HorovodBroadcast(Function):
    """out = root's x; d/dx on root = average of upstream gradients, zero elsewhere (as Horovod)."""

    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank = root_rank
        ctx.process_set = process_set
        return _data_ops.broadcast_now(tensor, False, root_rank, name, process_set)

    @staticmethod
    def backward(ctx, grad_output):
        grad = HorovodAllreduce.apply(grad_output, None, _reduce_ops.Average, 1.0, 1.0, ctx.process_set)
        if basics.rank() != ctx.root_rank:  # a global rank, as in Horovod
            grad = torch.zeros_like(grad)
        return grad, None, None, None


class HorovodAlltoall(Function):
    """Returns (output, received_splits); d/dx = alltoall of the gradient back along received splits."""

    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received_splits = synchronize(_data_ops.alltoall_async(tensor, splits, name, process_set))
        ctx.received_splits = received_splits
        ctx.process_set = process_set
        ctx.mark_non_differentiable(received_splits)
        return output, received_splits

    @staticmethod
    def backward(ctx, grad_output, _grad_splits):
        grad, _ = HorovodAlltoall.apply(grad_output, ctx.received_splits, None, ctx.process_set)
        return grad, None, None, None


def _reducescatter_input_grad(grad_rows, ctx):
    """The gathered block gradients, scaled as Horovod does: times the size for Sum, times 1 for
    Average, times the pre- and postscale factors."""
    op, pre, post, process_set = ctx.args
    if int(op) not in (int(_reduce_ops.Sum), int(_reduce_ops.Average)):
        raise NotImplementedError("reducescatter is differentiable for op=Sum and op=Average only")
    scale = float(pre) * float(post)
    if int(op) == int(_reduce_ops.Sum):
        scale *= process_set.size()
    return [g * scale if scale != 1.0 else g for g in grad_rows]


class HorovodReducescatter(Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return _reduce_ops.reducescatter_now(tensor, name, op, process_set, prescale_factor, postscale_factor)

    @staticmethod
    def backward(ctx, grad_output):
        gathered = HorovodAllgather.apply(grad_output, None, ctx.args[3])
        return (_reducescatter_input_grad([gathered], ctx)[0], None, None, None, None, None)


class HorovodGroupedReducescatter(Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.args = (op, prescale_factor, postscale_factor, process_set)
        return tuple(synchronize(_reduce_ops.grouped_reducescatter_async(
            list(tensors), name, op, process_set, prescale_factor, postscale_factor)))

    @staticmethod
    def backward(ctx, *grad_outputs):
        gathered = HorovodGroupedAllgather.apply(None, ctx.args[3], *grad_outputs)
        return (None, None, None, None, None) + tuple(_reducescatter_input_grad(list(gathered), ctx))
