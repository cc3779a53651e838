"""broadcast_optimizer_state: make every rank's optimizer state equal to the root's.

The root sends the layout of its ``state_dict()`` (every non-tensor value, and the shape and dtype
of every tensor) as one pickled object, then the tensors themselves through tensor broadcasts; the
other ranks rebuild the dict and ``load_state_dict`` it. So options such as ``lr``, ``betas`` or
``foreach=None``, and per-parameter scalars, arrive exactly, and ranks whose state differs in
structure from the root's (empty, or resumed from another checkpoint) still end up equal.
"""
import collections

import torch

from horovod_spark.common.process_sets import global_process_set
from horovod_spark.torch._data_ops import broadcast_async_
from horovod_spark.torch._handles import synchronize
from horovod_spark.torch._objects import broadcast_object

_TensorSlot = collections.namedtuple("_TensorSlot", ["index", "shape", "dtype"])


def _strip_tensors(obj, tensors):
    """``obj`` with every tensor replaced by a slot; the tensors are appended to ``tensors``."""
    if torch.is_tensor(obj):
        tensors.append(obj)
        return _TensorSlot(len(tensors) - 1, tuple(obj.shape), obj.dtype)
    if isinstance(obj, dict):
        return {k: _strip_tensors(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_strip_tensors(v, tensors) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_strip_tensors(v, tensors) for v in obj)
    return obj


def _fill_slots(obj, tensors):
    if isinstance(obj, _TensorSlot):
        return tensors[obj.index]
    if isinstance(obj, dict):
        return {k: _fill_slots(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_fill_slots(v, tensors) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_fill_slots(v, tensors) for v in obj)
    return obj


def _slots(obj, found):
    if isinstance(obj, _TensorSlot):
        found.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _slots(v, found)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _slots(v, found)
    return found


def _initialize_state(optimizer):
    """Create a fresh optimizer's state the way Horovod does: one step on zero gradients.

    Unlike Horovod, the parameters and gradients are restored afterwards, so e.g. weight decay
    in that step does not move the model.
    """
    from horovod_spark.torch.optimizer import _DistributedOptimizer

    params = [p for group in optimizer.param_groups for p in group["params"]
              if p.requires_grad and p not in optimizer.state]
    saved = [(p, p.detach().clone(), p.grad) for p in params]
    sparse = isinstance(optimizer, torch.optim.SparseAdam)
    for p in params:
        zeros = torch.zeros_like(p)
        p.grad = zeros.to_sparse() if sparse else zeros
    # Stepping a DistributedOptimizer would start allreduces the other ranks never join.
    if isinstance(optimizer, _DistributedOptimizer):
        super(_DistributedOptimizer, optimizer).step()
    else:
        optimizer.step()
    with torch.no_grad():
        for p, data, grad in saved:
            p.copy_(data)
            p.grad = grad


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """Make ``optimizer.state_dict()`` on every rank of ``process_set`` equal to root's.

    An optimizer with no state yet is initialized first, as in Horovod (a step on zero
    gradients). ``torch.optim.LBFGS`` is refused, as in Horovod.
    """
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not process_set.included():
        return
    is_root = process_set.rank() == root_rank
    layout, tensors = None, []
    if is_root:
        if len(optimizer.state_dict()["state"]) == 0:
            _initialize_state(optimizer)
        layout = _strip_tensors(optimizer.state_dict(), tensors)
    layout = broadcast_object(layout, root_rank, name="broadcast_optimizer_state.layout",
                              process_set=process_set)
    if not is_root:
        slots = sorted(_slots(layout, []), key=lambda s: s.index)
        tensors = [torch.empty(s.shape, dtype=s.dtype) for s in slots]
    handles = [broadcast_async_(t, root_rank, name="broadcast_optimizer_state.%d" % i,
                                process_set=process_set)
               for i, t in enumerate(tensors)]
    for handle in handles:
        synchronize(handle)
    if not is_root:
        optimizer.load_state_dict(_fill_slots(layout, tensors))
