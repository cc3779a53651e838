"""Metrics for TorchEstimator: built-in names and naming of user functions.

A metric is ``fn(outputs, labels) -> scalar tensor``, the mean over the batch's rows; epochs
average it over all rows of all ranks (common/history.EpochMetrics).
"""
import functools

import torch


def accuracy(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Class-index labels: argmax of multi-column outputs; one-column outputs are probabilities
    (>= 0.5 is class 1). One-hot labels are compared by their argmax."""
    if outputs.dim() > 1 and outputs.shape[-1] > 1:
        predicted = outputs.argmax(dim=-1)
        if labels.dim() == outputs.dim() and labels.shape == outputs.shape:
            labels = labels.argmax(dim=-1)
    else:
        predicted = (outputs.reshape(-1) >= 0.5).to(labels.dtype)
        labels = labels.reshape(-1)
    return (predicted.reshape(labels.shape) == labels).float().mean()


def mse(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.mean((outputs.reshape(labels.shape).float() - labels.float()) ** 2)


def mae(outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.mean(torch.abs(outputs.reshape(labels.shape).float() - labels.float()))


BUILTIN = {"accuracy": accuracy, "acc": accuracy, "mse": mse, "mae": mae}


def resolve(metric):
    """(name, function) for a built-in name or a callable."""
    if isinstance(metric, str):
        if metric not in BUILTIN:
            raise ValueError("metrics: unknown metric %r; built in: %s, or pass a function(outputs, labels)"
                             % (metric, sorted(BUILTIN)))
        return ("accuracy" if metric == "acc" else metric), BUILTIN[metric]
    if not callable(metric):
        raise ValueError("metrics: %r is neither a metric name nor a function(outputs, labels)" % (metric,))
    fn = metric.func if isinstance(metric, functools.partial) else metric
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return name, metric


def metric_names(metrics, label_cols):
    """Names in history: ``accuracy``; with several labels ``<label>_accuracy`` (and ``<label>_loss``)."""
    resolved = [resolve(m) for m in metrics]
    names = []
    for label in label_cols:
        for name, _ in resolved:
            names.append(name if len(label_cols) == 1 else "%s_%s" % (label, name))
    if len(set(names)) != len(names):
        raise ValueError("metrics: two metrics have the same name %s; wrap one in a named function"
                         % sorted({n for n in names if names.count(n) > 1}))
    return names
