"""The weighted loss of a TorchEstimator with ``sample_weight_col``, as Horovod computes it: the loss
of each row times the row's weight, averaged over the batch's rows (not divided by the sum of the
weights, so that a row of a given weight counts the same in every batch).

Horovod gets a loss per row by calling the loss with ``reduction='none'``, so any loss function
taking that keyword (torch.nn.functional's) works whatever it reduces to by default. Here the same
holds, and also for a torch.nn loss module (used as a copy with ``reduction='none'``) and for any
function that returns one value per row itself.
"""
import copy
import functools
import inspect


def per_row(loss):
    """``loss`` as a function(outputs, labels) -> one value per row (or per element)."""
    import torch
    if isinstance(loss, torch.nn.Module) and isinstance(getattr(loss, "reduction", None), str):
        if loss.reduction == "none":
            return loss
        unreduced = copy.copy(loss)
        unreduced.reduction = "none"
        return unreduced
    if _takes_reduction(loss):
        return functools.partial(loss, reduction="none")
    return loss


def _takes_reduction(fn) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "reduction" or p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters)


def weighted_mean(values, weights):
    """The batch loss from per-row ``values`` ((rows,) or (rows, ...): a row's values are averaged
    first) and ``weights`` (rows,)."""
    if values.dim() == 0:
        raise ValueError("with sample_weight_col the loss must give one value per row, but it returned a scalar and "
                         "takes no reduction= keyword to ask it for one: give a loss that takes reduction= (e.g. "
                         "torch.nn.functional.cross_entropy or torch.nn.MSELoss()) or one that returns a value per row")
    return (values.reshape(len(weights), -1).mean(dim=1) * weights).mean()
