"""The optimizers a LightningModule configures, wrapped in ``DistributedOptimizer``.

Lightning creates the optimizers and their LR schedulers together (``configure_optimizers``), so
the schedulers hold the unwrapped optimizers; ``follow_wrapped`` points them at the wrapped ones,
which share the same param groups (an LR a scheduler sets is the LR the wrapped optimizer uses).
"""
import functools
import weakref

import horovod_spark.torch as hvd


def _parameter_names(module, optimizer, prefix):
    """(name, parameter) for every parameter of ``optimizer``: the module's names, else its place in
    the optimizer. Names must match across ranks: they name each gradient's allreduce."""
    by_param = {p: name for name, p in module.named_parameters()}
    names = []
    for g, group in enumerate(optimizer.param_groups):
        for i, p in enumerate(group["params"]):
            names.append((prefix + by_param.get(p, "param_groups.%d.%d" % (g, i)), p))
    return names


def wrap(module, optimizers, backward_passes_per_step, options):
    """Each optimizer as a ``DistributedOptimizer`` averaging the gradients of ``module``'s
    parameters; ``options``: DistributedOptimizer's keyword arguments (compression, groups...)."""
    wrapped = []
    for index, optimizer in enumerate(optimizers):
        prefix = "optimizer%d." % index if len(optimizers) > 1 else ""
        wrapped.append(hvd.DistributedOptimizer(
            optimizer, named_parameters=_parameter_names(module, optimizer, prefix),
            backward_passes_per_step=backward_passes_per_step, **options))
    return wrapped


def _counting_step(optimizer):
    """``optimizer.step`` marked as torch's LR schedulers mark the step of the optimizer they were
    built on, so that a scheduler moved to ``optimizer`` does not warn that its step was replaced
    or was never called."""
    # Neither the optimizer nor its bound step is held: a cycle through the optimizer would keep
    # it, and its gradient hooks, alive after the fit until the garbage collector ran.
    optimizer_ref = weakref.ref(optimizer)
    step = type(optimizer).step

    @functools.wraps(step)
    def counted(*args, **kwargs):
        target = optimizer_ref()
        target._opt_called = True
        return step(target, *args, **kwargs)

    counted._wrapped_by_lr_sched = True
    return counted


def follow_wrapped(lr_scheduler_configs, replaced):
    """Point every LR scheduler of ``lr_scheduler_configs`` at the wrapped optimizer; ``replaced``:
    {id(original optimizer): wrapped optimizer}."""
    for config in lr_scheduler_configs:
        scheduler = config.scheduler
        original = getattr(scheduler, "optimizer", None)
        target = replaced.get(id(original))
        if target is None:
            continue
        if hasattr(getattr(original, "step", None), "_wrapped_by_lr_sched") and \
                not hasattr(target.step, "_wrapped_by_lr_sched"):
            target.step = _counting_step(target)
        scheduler.optimizer = target
