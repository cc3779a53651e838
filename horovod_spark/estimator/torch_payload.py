"""What a TorchEstimator sends to its ranks, checked on the driver and rebuilt on each rank.

The model travels whole (cloudpickle: class and weights). The optimizer does not travel as an
object, since its param groups point at the driver's parameters: it goes as (class, state_dict,
the index in model.parameters() of every parameter of every group), and each rank builds the
same class over its own model copy's parameters, then loads the state (hyperparameters, momenta).
"""
from dataclasses import dataclass
from typing import List

import cloudpickle
import torch

from horovod_spark.estimator.common import payload as _shared

from . import torch_metrics, torch_minibatch


@dataclass
class OptimizerRecipe:
    cls: type
    defaults: dict
    state_dict: dict
    groups: List[List[int]]     # per param group: indices into list(model.parameters())


def optimizer_recipe(optimizer, model) -> OptimizerRecipe:
    index = {id(p): i for i, p in enumerate(model.parameters())}
    groups = []
    for g, group in enumerate(optimizer.param_groups):
        foreign = [p for p in group["params"] if id(p) not in index]
        if foreign:
            raise ValueError("optimizer: param group %d holds %d tensor(s) that are not parameters of the model; "
                             "create the optimizer on this model, e.g. torch.optim.SGD(model.parameters(), lr=0.1)"
                             % (g, len(foreign)))
        groups.append([index[id(p)] for p in group["params"]])
    return OptimizerRecipe(type(optimizer), dict(optimizer.defaults), optimizer.state_dict(), groups)


def build_optimizer(recipe: OptimizerRecipe, model):
    params = list(model.parameters())
    groups = []
    for spec, indices in zip(recipe.state_dict["param_groups"], recipe.groups):
        group = {k: v for k, v in spec.items() if k != "params"}
        group["params"] = [params[i] for i in indices]
        groups.append(group)
    try:
        optimizer = recipe.cls(groups, **recipe.defaults)
    except TypeError:
        # A custom optimizer whose defaults are not all constructor arguments: the groups carry
        # every hyperparameter anyway.
        optimizer = recipe.cls(groups)
        optimizer.defaults.update(recipe.defaults)
    optimizer.load_state_dict(recipe.state_dict)
    return optimizer


def compression_name(value) -> str:
    """'none' / 'fp16' for the gradient_compression param (None, a name, or a Compression class)."""
    def load():
        from horovod_spark.torch.compression import Compression
        return Compression
    return _shared.compression_name(value, load, "horovod_spark.torch.Compression.fp16")


def check_and_pack(est, cfg):
    """Check model/optimizer/loss/metrics/compression; return (payload bytes, signature dict)."""
    get = est.getOrDefault
    model = get("model")
    if model is None:
        raise ValueError("model is not set: pass model=<torch.nn.Module>")
    if not isinstance(model, torch.nn.Module):
        raise ValueError("model must be a torch.nn.Module, got %s" % type(model).__name__)
    params = list(model.parameters())
    if not any(p.requires_grad for p in params):
        raise ValueError("model has no trainable parameters (requires_grad): nothing to train")
    optimizer = get("optimizer")
    if optimizer is None:
        raise ValueError("optimizer is not set: pass e.g. optimizer=torch.optim.SGD(model.parameters(), lr=0.1)")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError("optimizer must be a torch.optim.Optimizer built on the model's parameters, got %s"
                         % type(optimizer).__name__)
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("optimizer: torch.optim.LBFGS needs a closure per step, which the estimator does not run; "
                         "use a first-order optimizer (SGD, Adam, ...)")
    recipe = optimizer_recipe(optimizer, model)

    losses, constructed = _losses(get("loss"), get("loss_constructors"), cfg.label_cols)
    weights = _shared.loss_weights(get("loss_weights"), cfg.label_cols)
    train_minibatch_fn = get("train_minibatch_fn")
    if train_minibatch_fn is not None:
        torch_minibatch.check(train_minibatch_fn)
    metrics = list(get("metrics") or [])
    torch_metrics.metric_names(metrics, cfg.label_cols)
    compression = compression_name(get("gradient_compression"))

    parts = {
        "model": _shared.pickled("model", model),
        "optimizer": _shared.pickled("optimizer", recipe),
        "loss": _shared.pickled("loss_constructors" if constructed else "loss", list(losses)),
        "loss_constructed": constructed,
        "loss_weights": weights,
        "train_minibatch_fn": _shared.pickled("train_minibatch_fn", train_minibatch_fn),
        "metrics": _shared.pickled("metrics", metrics),
        "callbacks": _shared.pickled("callbacks", cfg.callbacks),
        "transformation_fn": _shared.pickled("transformation_fn", cfg.transformation_fn),
        "compression": compression,
    }
    signature = {
        "framework": "torch",
        "model_class": "%s.%s" % (type(model).__module__, type(model).__qualname__),
        "parameters": [[name, list(p.shape)] for name, p in model.named_parameters()],
        "optimizer_class": "%s.%s" % (recipe.cls.__module__, recipe.cls.__qualname__),
    }
    return cloudpickle.dumps(parts), signature


def _losses(loss, constructors, label_cols):
    """(loss functions or loss constructors, whether they are constructors), checked: one, or one
    per label column. Constructors (Horovod's loss_constructors) are called on each rank."""
    if constructors is not None:
        if loss is not None:
            raise ValueError("loss and loss_constructors are both set: pass one (loss_constructors are functions "
                             "returning a loss, called on every rank)")
        losses = list(constructors) if isinstance(constructors, (list, tuple)) else [constructors]
        what = "loss_constructors must be functions taking no argument that return a loss (e.g. torch.nn.MSELoss)"
    else:
        losses = loss if isinstance(loss, (list, tuple)) else [loss]
        what = ("loss must be a function(outputs, labels) -> tensor (e.g. torch.nn.functional.cross_entropy or "
                "torch.nn.MSELoss()), or a list of them, one per label column")
    if (loss is None and constructors is None) or not losses or not all(callable(f) for f in losses):
        raise ValueError("%s; got %r" % (what, constructors if constructors is not None else loss))
    if len(losses) not in (1, len(label_cols)):
        raise ValueError("%s: %d for %d label columns %s: give one, or one per label column"
                         % ("loss_constructors" if constructors is not None else "loss", len(losses),
                            len(label_cols), label_cols))
    return losses, constructors is not None


def unpack(payload: bytes) -> dict:
    parts = cloudpickle.loads(payload)
    return {k: (cloudpickle.loads(v) if isinstance(v, bytes) else v) for k, v in parts.items()}
