"""Elastic training on the ranks, framework-neutral: ``State`` and ``ObjectState``, the reset of the
core, and ``run_fn``, the loop behind each framework's ``hvd.elastic.run``.

Horovod's semantics: a state is committed (kept in host memory) every so often; when a peer is lost
the survivors' collectives raise ``HorovodInternalError``, so each rank rolls its state back to the
last commit, re-forms the job with the driver's new membership, takes rank 0's state, and calls the
function again. When ranks join, every rank raises ``HostsUpdatedInterrupt`` at the same commit and
re-forms the job without rolling back.
"""
import copy
import functools
import time

from horovod_spark.common import basics
from horovod_spark.common import config as env_config
from horovod_spark.exceptions import ElasticJobError, HorovodInternalError, HostsUpdatedInterrupt, TransportError


def in_elastic_job() -> bool:
    """Whether an elastic launcher started this rank (so a lost peer can be survived)."""
    return bool(env_config.ELASTIC.get())


_RETRYABLE_INIT_ERRORS = (HorovodInternalError, TransportError, ConnectionError)


def reset_core(shutdown=basics.shutdown, init=basics.init) -> None:
    """Shut the core down and start it again in the driver's newest generation, with a
    framework's ``shutdown`` and ``init`` (which also restart its generated collective names). An
    attempt that fails because the membership changed again meanwhile (a peer lost while
    connecting) is retried until HOROVOD_ELASTIC_TIMEOUT."""
    deadline = time.monotonic() + env_config.ELASTIC_TIMEOUT.get()
    while True:
        shutdown()
        try:
            init()
            return
        except _RETRYABLE_INIT_ERRORS as exc:
            if time.monotonic() >= deadline:
                raise ElasticJobError("the elastic job could not re-form within HOROVOD_ELASTIC_TIMEOUT: %s"
                                      % exc) from exc


class State:
    """What a rank keeps across resets. ``bcast_object(obj)`` returns rank 0's ``obj`` on every rank;
    ``get_rank()`` this rank's rank. Subclasses define ``save``, ``restore`` and ``sync``."""

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []
        self._known_generation = None

    def register_reset_callbacks(self, callbacks):
        """Functions to call (no arguments) after every reset, e.g. to rescale the learning rate
        to the new number of ranks."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self._known_generation = None
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Keep the current state as the one to roll back to, then check for added ranks (which
        raises ``HostsUpdatedInterrupt`` on every rank at once). Commits copy the state: commit
        every few batches rather than every one when the state is large."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raise ``HostsUpdatedInterrupt`` on every rank when the driver has re-formed the job with
        added ranks. Rank 0 asks the driver and tells the others, so all ranks agree."""
        if not in_elastic_job():
            return
        from horovod_spark.common import elastic_rendezvous
        mine = basics.elastic_generation()
        newest = elastic_rendezvous.newest_generation() if self._rank() == 0 else mine
        newest = self._bcast_object(newest)
        if newest > mine:
            raise HostsUpdatedInterrupt(skip_sync=False)

    def save(self):
        raise NotImplementedError("%s must define save()" % type(self).__name__)

    def restore(self):
        raise NotImplementedError("%s must define restore()" % type(self).__name__)

    def sync(self):
        raise NotImplementedError("%s must define sync()" % type(self).__name__)


class ObjectState(State):
    """State made of picklable Python values, given as keyword arguments and read and written as
    attributes (``state.epoch += 1``). A commit keeps a deep copy, so later in-place changes of a
    list or dict are rolled back too."""

    def __init__(self, bcast_object, get_rank, **kwargs):
        super().__init__(bcast_object, get_rank)
        self._saved_state = copy.deepcopy(kwargs)
        self._set_attrs()

    def save(self):
        self._saved_state = {name: copy.deepcopy(getattr(self, name)) for name in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))


def run_fn(func, reset=reset_core):
    """``func(state, *args, **kwargs)`` run until it returns, surviving resets (see the module)."""
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if not isinstance(state, State):
            raise TypeError("hvd.elastic.run: the decorated function's first argument must be a State "
                            "(e.g. hvd.elastic.TorchState(model, optimizer, epoch=0)), got %r" % (state,))
        sync_first = True
        while True:
            try:
                if sync_first:
                    state.sync()
                return func(state, *args, **kwargs)
            except HorovodInternalError:
                if not in_elastic_job():
                    raise  # no driver to re-form the job: the lost peer ends it
                state.restore()
                sync_first = True
            except HostsUpdatedInterrupt as exc:
                sync_first = not exc.skip_sync
            reset()
            state.on_reset()
    return wrapper
