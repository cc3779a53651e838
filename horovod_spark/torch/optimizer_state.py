"""broadcast_optimizer_state: make every rank's optimizer state equal to the root's.

The root sends the layout of its ``state_dict()`` (every non-tensor value, and the shape and dtype
of every tensor) as one pickled object, then the tensors themselves through tensor broadcasts; the
other ranks rebuild the dict and apply it. So options such as ``lr``, ``betas`` or
``foreach=None``, and per-parameter scalars, arrive exactly, and ranks whose state differs in
structure from the root's (empty, or resumed from another checkpoint) still end up equal. Where
the layouts agree, the other ranks update their group dicts and state tensors in place (as
Horovod does), so whatever else holds them (a scheduler, the wrapped optimizer) sees the root's.
"""
import collections

import torch

from horovod_spark.common import basics
from horovod_spark.common.process_sets import global_process_set
from horovod_spark.torch._data_ops import broadcast_async_
from horovod_spark.torch._handles import synchronize
from horovod_spark.torch._objects import broadcast_object

_TensorSlot = collections.namedtuple("_TensorSlot", ["index", "shape", "dtype", "sparse"])


def _strip_tensors(obj, tensors):
    """``obj`` with every tensor replaced by a slot; the tensors are appended to ``tensors``
    (sparse ones, e.g. SGD's momentum on a sparse embedding, travel dense)."""
    if torch.is_tensor(obj):
        tensors.append(obj.to_dense() if obj.is_sparse else obj)
        return _TensorSlot(len(tensors) - 1, tuple(obj.shape), obj.dtype, obj.is_sparse)
    if isinstance(obj, dict):
        return {k: _strip_tensors(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_strip_tensors(v, tensors) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_strip_tensors(v, tensors) for v in obj)
    return obj


def _fill_slots(obj, tensors):
    if isinstance(obj, _TensorSlot):
        return tensors[obj.index].to_sparse() if obj.sparse else tensors[obj.index]
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


def _sparse_parameter_ids(model):
    """ids of the parameters of ``model``'s sparse embeddings, which get sparse gradients."""
    if model is None:
        return set()
    return {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) and m.sparse
            for p in m.parameters()}


def _initialize_state(optimizer, sparse_ids):
    """Create a fresh optimizer's state the way Horovod does: one step on zero gradients, sparse
    ones for SparseAdam and for SGD on a sparse embedding's parameters (``sparse_ids``).

    Unlike Horovod, the parameters and gradients are restored afterwards, so e.g. weight decay
    in that step does not move the model.
    """
    from horovod_spark.torch.optimizer import step_without_allreduce

    params = [p for group in optimizer.param_groups for p in group["params"]
              if p.requires_grad and p not in optimizer.state]
    saved = [(p, p.detach().clone(), p.grad) for p in params]
    for p in params:
        zeros = torch.zeros_like(p)
        sparse = isinstance(optimizer, torch.optim.SparseAdam) or (
            isinstance(optimizer, torch.optim.SGD) and id(p) in sparse_ids)
        p.grad = zeros.to_sparse() if sparse else zeros
    step_without_allreduce(optimizer)
    with torch.no_grad():
        for p, data, grad in saved:
            p.copy_(data)
            p.grad = grad


def _apply_in_place(optimizer, state_dict):
    """Make ``optimizer`` hold the root's ``state_dict`` without replacing its group dicts or its
    state tensors where they fit: a scheduler, or the optimizer a DistributedOptimizer wraps,
    holds those same dicts, and ``load_state_dict`` would leave them behind (with their old
    ``lr``). False when the layouts differ (load_state_dict then rebuilds, or names the problem)."""
    groups = optimizer.param_groups
    root_groups = state_dict["param_groups"]
    if len(groups) != len(root_groups) or any(len(g["params"]) != len(r["params"])
                                               for g, r in zip(groups, root_groups)):
        return False
    by_index = {}
    for group, root_group in zip(groups, root_groups):
        by_index.update(zip(root_group["params"], group["params"]))
    if any(index not in by_index for index in state_dict["state"]):
        return False
    for group, root_group in zip(groups, root_groups):
        for key, value in root_group.items():
            if key != "params":
                group[key] = value
    with torch.no_grad():
        for index, p in by_index.items():
            root_state = state_dict["state"].get(index)
            if root_state is None:
                optimizer.state.pop(p, None)
                continue
            mine = optimizer.state[p]
            for key in [k for k in mine if k not in root_state]:
                del mine[key]
            for key, value in root_state.items():
                old = mine.get(key)
                if (torch.is_tensor(value) and torch.is_tensor(old) and old.shape == value.shape
                        and old.dtype == value.dtype and not old.is_sparse):
                    old.copy_(value)
                else:
                    mine[key] = value
    return True


def broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=global_process_set):
    """Make ``optimizer.state_dict()`` on every rank of ``process_set`` equal to root's
    (``root_rank``: a global rank, as in Horovod).

    An optimizer with no state yet is initialized first, as in Horovod (a step on zero
    gradients; ``model``, as in Horovod, names the sparse embeddings whose SGD state starts from
    sparse gradients). Other ranks update their groups' options and state tensors in place.
    ``torch.optim.LBFGS`` is refused, as in Horovod.
    """
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if model is not None and not isinstance(model, torch.nn.Module):
        raise TypeError("broadcast_optimizer_state(optimizer, root_rank, model=None, process_set=...): model "
                        "must be a torch.nn.Module, got %s" % type(model).__name__)
    if not process_set.included():
        return
    is_root = basics.rank() == root_rank
    layout, tensors = None, []
    if is_root:
        if len(optimizer.state_dict()["state"]) == 0:
            _initialize_state(optimizer, _sparse_parameter_ids(model))
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
        state_dict = _fill_slots(layout, tensors)
        if not _apply_in_place(optimizer, state_dict):
            optimizer.load_state_dict(state_dict)
