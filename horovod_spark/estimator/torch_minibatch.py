"""TorchEstimator's train_minibatch_fn: a training step of the user's, called as Horovod calls it.

Horovod 0.28 calls the Param itself once per batch as ``train_minibatch(model, optimizer,
transform_outputs, loss_fn, inputs, labels, sample_weights, backward_passes_per_step, batch_idx)
-> (outputs, loss)``; the step zeroes, back-propagates and steps the optimizer as it sees fit, and
after each epoch's last batch the optimizer steps once more unless the step left nothing to apply.
Two older forms work too: a step of the first seven arguments (Horovod before
backward_passes_per_step), and a function of no arguments returning the step (what Horovod's Param
documentation describes).
"""
import inspect

STEP_ARGS = ("model", "optimizer", "transform_outputs", "loss_fn", "inputs", "labels", "sample_weights",
             "backward_passes_per_step", "batch_idx")
SHORT_STEP = 7


def positional_capacity(fn):
    """(required, most) positional arguments ``fn`` takes; most is None with ``*args``."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin or C callable without a signature: take it as a step
        return len(STEP_ARGS), len(STEP_ARGS)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = sum(1 for p in positional if p.default is p.empty)
    most = None if any(p.kind == p.VAR_POSITIONAL for p in params) else len(positional)
    return required, most


def check(fn) -> None:
    """ValueError unless ``fn`` is a step or a step factory (run on the driver, before any job)."""
    if not callable(fn):
        raise ValueError("train_minibatch_fn must be a function train_minibatch(%s) -> (outputs, loss); got %r"
                         % (", ".join(STEP_ARGS), fn))
    required, most = positional_capacity(fn)
    if required == 0 or (most is None or most >= SHORT_STEP) and required <= len(STEP_ARGS):
        return
    raise ValueError("train_minibatch_fn takes %d positional argument(s); Horovod calls it as train_minibatch(%s) "
                     "-> (outputs, loss)" % (required, ", ".join(STEP_ARGS)))


def resolve(fn):
    """The per-batch step from the Param (calling a factory), as a function of all nine arguments."""
    required, most = positional_capacity(fn)
    if required == 0 and most is not None and most < SHORT_STEP:
        fn = fn()
        check(fn)
        required, most = positional_capacity(fn)
    if most is not None and most < len(STEP_ARGS):
        short = fn
        return lambda *args: short(*args[:SHORT_STEP])
    return fn

