"""``horovod_spark.torch.elastic``: Horovod's ``hvd.elastic`` for PyTorch.

::

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()

    train(state)
"""
import functools

from horovod_spark.common.elastic import State, reset_core, run_fn
from horovod_spark.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from horovod_spark.torch.elastic.sampler import ElasticSampler
from horovod_spark.torch.elastic.state import ObjectState, TorchState


def run(func):
    """Decorate ``func(state, ...)`` so it survives lost and added ranks: on ``HorovodInternalError``
    the state rolls back to its last commit, the job re-forms, every rank takes rank 0's state and
    ``func`` is called again; on ``HostsUpdatedInterrupt`` the same without the roll back."""
    from horovod_spark.torch._control_ops import init, shutdown
    return run_fn(func, functools.partial(reset_core, shutdown=shutdown, init=init))


__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler", "HorovodInternalError",
           "HostsUpdatedInterrupt"]
