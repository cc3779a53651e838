"""``TorchState`` and ``ObjectState`` bound to PyTorch's broadcasts."""
import copy

from horovod_spark.common import basics
from horovod_spark.common import elastic as _elastic
from horovod_spark.torch._objects import allgather_object
from horovod_spark.torch.elastic.sampler import ElasticSampler
from horovod_spark.torch.functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters


class ObjectState(_elastic.ObjectState):
    """Picklable values kept across resets: ``ObjectState(epoch=0, best=None)``."""

    def __init__(self, bcast_object=broadcast_object, get_rank=basics.rank, **kwargs):
        super().__init__(bcast_object, get_rank, **kwargs)


class TorchState(ObjectState):
    """A model, an optimizer (both optional) and any picklable values (keyword arguments), kept
    across resets. A commit copies the model's and optimizer's ``state_dict`` to host memory; a
    sync broadcasts rank 0's parameters and optimizer state. A keyword whose value is an
    ``ElasticSampler`` keeps that very sampler (the one the DataLoader holds): a commit keeps its
    epoch and processed indices, and a sync joins every rank's processed indices and re-shards the
    rest of the epoch over the new ranks."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        # Set before ObjectState's attributes exist: these are not among the plain values.
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "optimizer", optimizer)
        self._saved_model = self._saved_optimizer = None
        self._samplers = {k: v for k, v in kwargs.items() if isinstance(v, ElasticSampler)}
        self._saved_samplers = {}
        for name, sampler in self._samplers.items():
            object.__setattr__(self, name, sampler)
        super().__init__(**{k: v for k, v in kwargs.items() if k not in self._samplers})
        self._save_modules()

    def _save_modules(self):
        if self.model is not None:
            self._saved_model = {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}
        if self.optimizer is not None:
            self._saved_optimizer = copy.deepcopy(_host(self.optimizer.state_dict()))
        self._saved_samplers = {name: s.state_dict() for name, s in self._samplers.items()}

    def save(self):
        self._save_modules()
        super().save()

    def restore(self):
        if self.model is not None:
            self.model.load_state_dict(self._saved_model)
        if self.optimizer is not None:
            self.optimizer.load_state_dict(copy.deepcopy(self._saved_optimizer))
        for name, sampler in self._samplers.items():
            # No re-sharding yet: the sync after the reset does it, for the new ranks.
            saved = self._saved_samplers[name]
            sampler.epoch, sampler.processed_indices = saved["epoch"], set(saved["processed_indices"])
        super().restore()

    def sync(self):
        if self.model is not None:
            broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self.optimizer is not None:
            broadcast_optimizer_state(self.optimizer, root_rank=0)
        for name in sorted(self._samplers):
            sampler = self._samplers[name]
            # A rank joining mid-epoch knows nothing processed; a record_indices user's ranks
            # each know their own: the union is what the epoch has done.
            done = set().union(*allgather_object(sampler.processed_indices))
            sampler.load_state_dict(broadcast_object({"epoch": sampler.epoch, "processed_indices": done}))
        super().sync()
        # What every rank now holds is the state to roll back to.
        self._save_modules()


def _host(value):
    """A copy of ``value`` (nested dicts, lists, tensors) with tensors in host memory."""
    import torch
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _host(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_host(v) for v in value)
    return value
