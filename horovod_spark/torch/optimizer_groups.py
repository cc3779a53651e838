"""How DistributedOptimizer partitions parameters into grouped allreduces (``groups=``)."""
import torch

from horovod_spark.torch._objects import broadcast_object


def validate_groups(groups):
    """Check ``groups`` (None, a positive int, or a list of lists of tensors) as Horovod does."""
    if groups is None:
        return None
    if isinstance(groups, bool) or not (isinstance(groups, list) or (isinstance(groups, int) and groups > 0)):
        raise ValueError("groups should be a non-negative integer or a list of list of torch.Tensor.")
    if isinstance(groups, list):
        seen = set()
        for group in groups:
            for p in group:
                if not isinstance(p, torch.Tensor):
                    raise ValueError("groups must consist of torch.Tensor.")
                if id(p) in seen:
                    raise ValueError("A parameter can only appear once in groups.")
                seen.add(id(p))
    return groups


def split_evenly(items, n):
    """``items`` cut into ``n`` consecutive chunks whose lengths differ by at most one (none empty
    unless there are fewer items than chunks)."""
    quotient, remainder = divmod(len(items), n)
    chunks, start = [], 0
    for i in range(n):
        end = start + quotient + (1 if i < remainder else 0)
        if end > start:
            chunks.append(items[start:end])
        start = end
    return chunks


def form_groups(params, groups, names, process_set):
    """Tuples of parameters, each allreduced as one unit; parameters in no group are left out.

    Every rank must form identical groups. For ``groups=<int>`` the split follows rank 0's
    parameter order, so ranks that list parameters in another order still agree.
    """
    if isinstance(groups, int):
        if process_set.size() > 1:
            order = broadcast_object([names[p] for p in params], root_rank=0,
                                     name="DistributedOptimizer.parameter_order", process_set=process_set)
            position = {name: i for i, name in enumerate(order)}
            params = sorted(params, key=lambda p: position[names[p]])
        return [tuple(chunk) for chunk in split_evenly(params, groups)]
    trainable = {id(p) for p in params}
    return [tuple(p for p in group if id(p) in trainable) for group in groups
            if any(id(p) in trainable for p in group)]
