"""DistributedOptimizer: averages gradients across ranks while backward is still running.

A hook on every parameter starts that parameter's allreduce the moment autograd has accumulated
its gradient, so communication overlaps the rest of backward; ``step()`` only waits for what is
still in flight, then runs the wrapped optimizer's own update. Where nothing is free to overlap
(every rank on one host, CPU gradients, every core computing: optimizer_launch.py), the hooks only
count, and ``step()`` starts every allreduce in one call.
"""
import warnings
import weakref
from contextlib import contextmanager

import torch

from horovod_spark.common import ops
from horovod_spark.common.process_sets import global_process_set
from horovod_spark.torch._handles import synchronize
from horovod_spark.torch._optimizer_hooks import TOO_MANY_PASSES, ZERO_GRAD_RACE, on_grad_ready
from horovod_spark.torch._reduce_ops import (
    Adasum,
    Average,
    allreduce_batch_,
    allreduce_named_async_,
    cpu_dtype_code,
    grouped_allreduce_async_,
    plain_op_code,
    sparse_allreduce_async,
)
from horovod_spark.torch.compression import Compression
from horovod_spark.torch.optimizer_adasum import adasum_optimizer
from horovod_spark.torch.optimizer_groups import form_groups, validate_groups
from horovod_spark.torch.optimizer_launch import launch_at_step

_STEP_AFTER_SYNC = ("optimizer.step() called without optimizer.skip_synchronize() context after "
                    "optimizer.synchronize(). This can cause training slowdown. You may want to consider "
                    "using optimizer.skip_synchronize() context if you use optimizer.synchronize() in "
                    "your code.")


def _find_duplicates(names):
    seen, dups = set(), set()
    for name in names:
        (dups if name in seen else seen).add(name)
    return sorted(dups)


def parameter_names(param_groups, named_parameters):
    """{parameter: name} from ``named_parameters`` (generated names when None), with Horovod's
    ValueErrors for names that repeat and for parameters left unnamed."""
    if named_parameters is not None:
        named_parameters = list(named_parameters)
    else:
        named_parameters = [("allreduce.noname.%d.%d" % (i, j), p)
                            for i, group in enumerate(param_groups)
                            for j, p in enumerate(group["params"])]
    if any(not isinstance(item, tuple) for item in named_parameters):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    dups = _find_duplicates([name for name, _ in named_parameters])
    if dups:
        raise ValueError("Parameter names in named_parameters must be unique. Found duplicates: %s"
                         % ", ".join(dups))
    named_ids = {id(p) for _, p in named_parameters}
    unnamed = [id(p) for group in param_groups for p in group["params"] if id(p) not in named_ids]
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model parameters were not "
                         "named. Python object ids: %s" % ", ".join(str(i) for i in unnamed))
    return {p: name for name, p in named_parameters}



class _GradGroup:
    """Parameters allreduced as one unit (``groups=``). Hashed by identity: a tuple of hundreds of
    parameters as a dict key would be hashed element by element on every gradient's hook."""
    __slots__ = ("params", "ready")

    def __init__(self, params):
        self.params = tuple(params)
        self.ready = set()  # slots of the members whose gradient is ready this step


class _ParamSlot:
    """A watched parameter's per-step state, which its gradient hook carries. The hook path keys
    nothing by the parameter: a tensor's ``__hash__`` is a Python function, and a dict look-up by
    parameter cost a Python call, several times per gradient per step."""
    __slots__ = ("param", "name", "core_name", "delay", "group", "shape", "dtype_code")

    def __init__(self, param, name, delay):
        self.param = param
        self.name = name
        self.core_name = "allreduce.%s" % name  # the core's name of its allreduce, built once
        self.delay = delay  # backward passes still to accumulate before the allreduce starts
        self.group = None  # its _GradGroup (groups= only)
        # What a step's batch (_launch_batch) needs of the gradient, which torch keeps to the
        # parameter's shape, dtype and device: the core's dtype code, None off the CPU.
        self.shape = tuple(param.shape)
        self.dtype_code = cpu_dtype_code(param)


class _DistributedOptimizer:
    """Mixed in front of the wrapped optimizer's class (see ``DistributedOptimizer``)."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1, op=Average,
                 gradient_predivide_factor=1.0, groups=None, sparse_as_dense=False,
                 process_set=global_process_set):
        super().__init__(params)
        self._compression = compression
        self.backward_passes_per_step = backward_passes_per_step
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set

        self._parameter_names = parameter_names(self.param_groups, named_parameters)
        # key: a parameter's _ParamSlot, or the _GradGroup of parameters allreduced as one unit;
        # value: (handle or None while gradients still accumulate locally, compression contexts)
        self._handles = {}
        self._slots = {}  # watched parameter -> its _ParamSlot, in the order they were watched
        self._synchronized = False
        self._should_synchronize = True
        self._groups = validate_groups(groups)
        self._units = None  # cache of _unit_count()
        self._grad_groups = []
        self._launch_at_step = False  # see optimizer_launch.py
        self._distributed = process_set.included() and process_set.size() > 1
        if self._distributed:
            self._register_hooks()

    # -- setup ------------------------------------------------------------------------------------

    def _register_hooks(self):
        trainable = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
        for p in trainable:
            self._watch(p)
        if self._groups is not None:
            for params in form_groups(trainable, self._groups, self._parameter_names, self.process_set):
                group = _GradGroup(params)
                for p in params:
                    self._slots[p].group = group
                self._grad_groups.append(group)
        else:
            self._launch_at_step = launch_at_step(trainable)

    def _watch(self, p):
        slot = self._slots[p] = _ParamSlot(p, self._parameter_names[p], self.backward_passes_per_step)
        self._units = None
        handle = p.register_post_accumulate_grad_hook(on_grad_ready(weakref.ref(self), slot))
        weakref.finalize(self, handle.remove)

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        if getattr(self, "_distributed", False):
            # Unlike Horovod, parameters added after wrapping (e.g. unfrozen layers) are averaged too.
            index = len(self.param_groups) - 1
            for j, p in enumerate(self.param_groups[-1]["params"]):
                self._parameter_names.setdefault(p, "allreduce.noname.%d.%d" % (index, j))
                if p.requires_grad:
                    self._watch(p)

    def set_backward_passes_per_step(self, passes):
        _check_passes(passes)
        self.backward_passes_per_step = passes
        self._reset_delays()

    def _reset_delays(self):
        passes = self.backward_passes_per_step
        for slot in self._slots.values():
            slot.delay = passes

    # -- launching allreduces ----------------------------------------------------------------------

    def _scale_factors(self):
        if self.op == Average:
            # Divide before summing (avoids fp16 overflow), multiply back after; the core's Average
            # still divides by the number of ranks.
            return 1.0 / self.gradient_predivide_factor, self.gradient_predivide_factor
        return 1.0, 1.0

    def _dense_grad(self, p):
        grad = p.grad
        if grad is None:
            # This rank never used p this step, but others may have: it still has to take part.
            grad = p.grad = torch.zeros_like(p)
        if grad.is_sparse:
            # A dense copy travels; p.grad stays sparse and gets the result back as sparse
            # (_store_grad), as in Horovod, so sparse-only optimizers (SparseAdam) still step.
            grad = grad.to_dense()
        return grad

    def _launch_one(self, slot):
        # Once per parameter per step, from the parameter's hook in the middle of backward: every
        # attribute look-up here is paid hundreds of times a step on a model of small layers.
        p = slot.param
        grad = p.grad
        if grad is None or grad.is_sparse:
            if grad is not None and not self.sparse_as_dense:
                return sparse_allreduce_async(grad, slot.name, self.op, self.process_set), None
            grad = self._dense_grad(p)
        compression = self._compression
        compressed, ctx = (grad, None) if compression is Compression.none else compression.compress(grad)
        op = self.op
        if op == Average:  # (_scale_factors, inlined)
            post = self.gradient_predivide_factor
            pre = 1.0 / post
        else:
            pre = post = 1.0
        handle = allreduce_named_async_(compressed, slot.core_name, slot.name, op, pre, post, self.process_set)
        return handle, ctx

    def _launch_group(self, group):
        compressed, ctxs = zip(*[self._compression.compress(self._dense_grad(p)) for p in group])
        pre, post = self._scale_factors()
        handle = grouped_allreduce_async_(list(compressed), name=self._parameter_names.get(group[0]),
                                          op=self.op, prescale_factor=pre, postscale_factor=post,
                                          process_set=self.process_set)
        return handle, ctxs

    def _launch_batch(self, handles):
        """Starts, in one call into the core, the allreduce of every gradient that needs nothing
        but an in-place allreduce (dense, contiguous, on the CPU, no compression), leaving the
        others in ``handles`` for ``_launch``; returns the core handles and the gradients, which
        must stay alive until those complete (or None when none qualified). Each is the allreduce,
        under the same name, that ``_launch_one`` would start. (Nothing has been started yet: the
        hooks only count when launching at step.)"""
        op_code = plain_op_code(self.op)
        if self._compression is not Compression.none or op_code is None:
            return None
        grads, names, ptrs, dtypes, shapes, rest = [], [], [], [], [], []
        for slot in self._slots.values():
            grad = slot.param.grad
            if grad is None or slot.dtype_code is None or grad.is_sparse or not grad.is_contiguous():
                rest.append(slot)
                continue
            grads.append(grad)
            names.append(slot.core_name)
            ptrs.append(grad.data_ptr())
            dtypes.append(slot.dtype_code)
            shapes.append(slot.shape)
        if not grads:
            return None
        pre, post = self._scale_factors()
        core_handles = allreduce_batch_(names, ptrs, dtypes, shapes, op_code, pre, post, self.process_set)
        handles.clear()
        for slot in rest:
            handles[slot] = (None, None)
        return core_handles, grads

    def _launch(self, key):
        return self._launch_group(key.params) if type(key) is _GradGroup else self._launch_one(key)

    def _grad_ready(self, slot):
        """``slot``'s parameter has its gradient for this backward pass (its hook fired)."""
        delay = slot.delay
        if delay <= 0:
            raise AssertionError(TOO_MANY_PASSES)
        grad = slot.param.grad
        if grad is not None and grad.requires_grad:
            raise AssertionError("gradient of %s requires grad; DistributedOptimizer cannot average "
                                 "higher-order gradients" % slot.name)
        slot.delay = delay = delay - 1
        group = slot.group
        if delay > 0 or self._launch_at_step:
            self._handles.setdefault(slot if group is None else group, (None, None))
            return
        if group is None:
            self._handles[slot] = self._launch_one(slot)
            return
        group.ready.add(slot)
        if len(group.ready) < len(group.params):
            self._handles.setdefault(group, (None, None))
            return
        self._handles[group] = self._launch_group(group.params)

    # -- waiting -----------------------------------------------------------------------------------

    def synchronize(self):
        """Wait for every gradient's allreduce (starting those not started yet) and write the
        averaged gradients into ``p.grad``."""
        if not self._distributed:
            self._synchronized = True
            return
        # Parameters whose gradient this rank did not produce still join the allreduce, in the
        # same unit (single or group) as on ranks that did produce it.
        handles = self._handles
        if len(handles) < self._unit_count():
            for slot in self._slots.values():
                handles.setdefault(slot.group or slot, (None, None))
        batch = self._launch_batch(handles) if self._launch_at_step else None  # (handles, their gradients)
        for key, (handle, _) in list(handles.items()):
            if handle is None:
                handles[key] = self._launch(key)
        plain = self._compression is Compression.none
        try:
            if batch:
                ops.wait_all(batch[0])
            for key, (handle, ctx) in handles.items():
                if type(key) is _GradGroup:
                    for p, out, c in zip(key.params, synchronize(handle), ctx):
                        self._store_grad(p, out, c)
                elif type(handle) is not int:  # sparse_allreduce_async's callable
                    self._store_grad(key.param, handle(), ctx)
                else:
                    out = synchronize(handle)
                    p = key.param
                    if not (plain and out is p.grad):  # (in place, nothing to decompress)
                        self._store_grad(p, out, ctx)
        finally:
            handles.clear()
            for group in self._grad_groups:
                group.ready.clear()
            self._reset_delays()
        self._synchronized = True

    def _unit_count(self):
        """How many allreduce units (single parameters and groups) a step has."""
        if self._units is None:
            self._units = len({slot.group or slot for slot in self._slots.values()})
        return self._units

    def _store_grad(self, p, output, ctx):
        output = self._compression.decompress(output, ctx)
        if p.grad.is_sparse and not output.is_sparse:  # sparse_as_dense: back to sparse
            p.grad = output.to_sparse()
        elif output.is_sparse or p.grad.is_sparse:
            p.grad = output
        elif output is not p.grad:
            with torch.no_grad():
                p.grad.copy_(output)

    @contextmanager
    def skip_synchronize(self):
        """Make ``step()`` skip its ``synchronize()`` (for when you called it yourself, e.g. to clip
        the averaged gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    # -- torch.optim.Optimizer overrides -------------------------------------------------------------

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn(_STEP_AFTER_SYNC, stacklevel=2)
            self.synchronize()
        self._synchronized = False
        return super().step(closure)

    # torch patches a class's step() on construction to run step hooks; the wrapped class's step
    # (called from ours) already does, and running them twice per step would be wrong.
    step.hooked = True

    def zero_grad(self, set_to_none=True):
        if self._handles:
            raise AssertionError(ZERO_GRAD_RACE)
        return super().zero_grad(set_to_none=set_to_none)

    def load_state_dict(self, state_dict):
        self._handles.clear()
        self._synchronized = False
        self._should_synchronize = True
        for group in self._grad_groups:
            group.ready.clear()
        self._reset_delays()
        return super().load_state_dict(state_dict)


def _check_passes(passes):
    if isinstance(passes, bool) or not isinstance(passes, int) or passes <= 0:
        raise ValueError("backward_passes_per_step must be > 0 (an int), got %r" % (passes,))


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=global_process_set):
    """Wrap ``optimizer`` so that ``step()`` applies gradients averaged (``op``) over all ranks.

    The result is an instance of a subclass of ``optimizer``'s class (``isinstance`` checks,
    ``state_dict``, ``param_groups`` and LR schedulers keep working). It shares ``optimizer``'s
    param groups and starts from its state. Arguments are those of
    ``horovod.torch.DistributedOptimizer``: ``groups`` (an int, or lists of parameters) fuses
    gradients into grouped allreduces; ``gradient_predivide_factor`` f scales gradients by 1/f
    before the sum and f/size after; ``backward_passes_per_step`` accumulates that many backward
    passes locally before one allreduce. ``op=Adasum`` combines each rank's parameter updates
    instead of averaging gradients, as Horovod does (optimizer_adasum.py).
    """
    _check_passes(backward_passes_per_step)
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    if num_groups != 0:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0.",
                      DeprecationWarning, stacklevel=2)
        if groups is None:
            groups = num_groups
    if op == Adasum and process_set.size() > 1:
        # Horovod's delta optimizer (optimizer_adasum.py); groups and sparse_as_dense do not apply to it.
        names = parameter_names(optimizer.param_groups, named_parameters)
        return adasum_optimizer(optimizer, names, compression, backward_passes_per_step, process_set)
    cls = type(optimizer.__class__.__name__, (_DistributedOptimizer, optimizer.__class__),
               {"__module__": __name__})
    wrapped = cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
                  gradient_predivide_factor, groups, sparse_as_dense, process_set)
    # The wrapped class's constructor only saw the param groups; keep what else the caller set up.
    wrapped.defaults = dict(optimizer.defaults)
    for p, state in optimizer.state.items():
        wrapped.state[p] = state
    return wrapped


def step_without_allreduce(optimizer) -> None:
    """One step of ``optimizer`` on this rank's gradients as they are: a DistributedOptimizer
    takes its wrapped optimizer's step, starting no allreduce (the other ranks would never join
    one); any other optimizer its own step."""
    if isinstance(optimizer, _DistributedOptimizer):
        super(_DistributedOptimizer, optimizer).step()
    else:
        optimizer.step()
