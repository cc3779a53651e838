"""DistributedOptimizer(op=Adasum): Horovod's delta optimizer for Adasum.

Adasum needs each rank's whole update, not its gradient: every rank applies the wrapped optimizer
to its own gradient (learning rate, momentum, Adam's moments and all), and what is combined across
ranks with ``allreduce(op=Adasum)`` is the change that step made to the parameter. As in Horovod,
this happens per parameter from the hook that fires once autograd has accumulated its gradient,
so communication overlaps the rest of backward:

    start = p; wrapped step on p alone; delta = p - start      (in the hook; p holds delta until step())
    step(): p = start + adasum over ranks of delta

Because Adasum adds updates that point in different directions and averages those that agree,
the learning rate is the one that suits a single rank, not one scaled by the number of ranks
(see docs/getting_started.md).
"""
import weakref
from contextlib import contextmanager

import torch

from horovod_spark.common.process_sets import global_process_set
from horovod_spark.torch._handles import synchronize
from horovod_spark.torch._optimizer_hooks import TOO_MANY_PASSES, ZERO_GRAD_RACE, on_grad_ready
from horovod_spark.torch._reduce_ops import Adasum, allreduce_async_
from horovod_spark.torch.compression import Compression


class _DistributedAdasumOptimizer:
    """Mixed in front of the wrapped optimizer's class (see ``DistributedOptimizer``)."""

    def __init__(self, params, parameter_names, compression=Compression.none, backward_passes_per_step=1,
                 process_set=global_process_set):
        super().__init__(params)
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.process_set = process_set
        self._parameter_names = parameter_names
        self._allreduce_delay = dict.fromkeys(parameter_names, backward_passes_per_step)
        self._handles = {}  # parameter -> (handle or None while gradients still accumulate, compression ctx)
        self._starting_models = {}  # parameter -> its value before this step's local update
        self._requires_update = []
        self._distributed = process_set.included() and process_set.size() > 1
        if self._distributed:
            for group in self.param_groups:
                for p in group["params"]:
                    if p.requires_grad:
                        self._watch(p)

    def _watch(self, p):
        self._requires_update.append(p)
        self._starting_models[p] = torch.zeros_like(p, requires_grad=False)
        handle = p.register_post_accumulate_grad_hook(on_grad_ready(weakref.ref(self), p))
        weakref.finalize(self, handle.remove)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _grad_ready(self, p):
        if self._allreduce_delay[p] <= 0:
            raise AssertionError(TOO_MANY_PASSES)
        self._allreduce_delay[p] -= 1
        self._handles[p] = self._launch(p) if self._allreduce_delay[p] == 0 else (None, None)

    def _local_step_on(self, p):
        """The wrapped optimizer's step applied to ``p`` alone (its state, e.g. momentum, included)."""
        stashed = [group["params"] for group in self.param_groups]
        try:
            for group in self.param_groups:
                group["params"] = [p] if any(p is q for q in group["params"]) else []
            super().step()
        finally:
            for group, params in zip(self.param_groups, stashed):
                group["params"] = params

    def _launch(self, p):
        start = self._starting_models[p]
        with torch.no_grad():
            start.copy_(p)
            self._local_step_on(p)
            p.sub_(start)  # p holds this rank's update until step() writes start + the combined update
        compressed, ctx = self._compression.compress(p.data)
        handle = allreduce_async_(compressed, name=self._parameter_names.get(p), op=Adasum,
                                  process_set=self.process_set)
        return handle, ctx

    def synchronize(self):
        """Nothing to do: with Adasum the combined update is applied by ``step()``, as in Horovod."""

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum optimizer.")
        yield  # (a generator, for contextmanager)

    def step(self, closure=None):
        if not self._distributed:
            return super().step(closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        # Parameters without a gradient on this rank this step still take part (their update is
        # zero, which Adasum leaves out), so that every rank submits the same allreduces.
        for p in self._requires_update:
            handle, _ = self._handles.get(p, (None, None))
            if handle is None:
                self._handles[p] = self._launch(p)
        try:
            for p, (handle, ctx) in self._handles.items():
                delta = self._compression.decompress(synchronize(handle), ctx)
                start = self._starting_models[p]
                with torch.no_grad():
                    start.add_(delta)
                    p.copy_(start)
        finally:
            self._handles.clear()
            self._allreduce_delay = dict.fromkeys(self._allreduce_delay, self.backward_passes_per_step)
        return loss

    # The wrapped class's step (called per parameter, and by step() above) already runs torch's
    # step hooks; patching this one too would run them twice.
    step.hooked = True

    def zero_grad(self, set_to_none=True):
        if self._handles:
            raise AssertionError(ZERO_GRAD_RACE)
        return super().zero_grad(set_to_none=set_to_none)

    def load_state_dict(self, state_dict):
        self._handles.clear()
        self._allreduce_delay = dict.fromkeys(self._allreduce_delay, self.backward_passes_per_step)
        return super().load_state_dict(state_dict)


def adasum_optimizer(optimizer, parameter_names, compression, backward_passes_per_step, process_set):
    """``optimizer`` as an instance of a subclass of its class that combines updates with Adasum."""
    cls = type(optimizer.__class__.__name__, (_DistributedAdasumOptimizer, optimizer.__class__),
               {"__module__": __name__})
    wrapped = cls(optimizer.param_groups, parameter_names, compression, backward_passes_per_step, process_set)
    wrapped.defaults = dict(optimizer.defaults)
    for p, state in optimizer.state.items():
        wrapped.state[p] = state
    return wrapped
