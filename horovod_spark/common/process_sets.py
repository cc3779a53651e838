"""Process sets: collectives among a subset of ranks, with Horovod's API.

Adding or removing a set is itself a collective over all ranks (every rank calls it with the same
ranks), so every rank agrees on the set's id.
"""
import threading
from typing import List, Optional, Sequence, Union

from horovod_spark.common import _core, ops


class ProcessSet:
    """An ordered set of global ranks. ``process_set_id`` is assigned when it is registered."""

    def __init__(self, ranks: Sequence[int]):
        if not isinstance(ranks, (list, tuple, range)) or not ranks:
            raise ValueError("ProcessSet needs a non-empty list of global ranks, got %r" % (ranks,))
        self.ranks: List[int] = sorted(int(r) for r in ranks)
        if len(set(self.ranks)) != len(self.ranks):
            raise ValueError("ProcessSet ranks must be distinct, got %r" % (list(ranks),))
        self.process_set_id: Optional[int] = None

    def _require_id(self) -> int:
        if self.process_set_id is None:
            raise ValueError("process set %r is not registered; pass it to hvd.init(process_sets=...) "
                             "or hvd.add_process_set()" % (self.ranks,))
        return self.process_set_id

    def size(self) -> int:
        return len(self.ranks)

    def rank(self) -> Optional[int]:
        """This process's rank within the set, or None if it is not a member."""
        from horovod_spark.common import basics
        me = basics.rank()
        return self.ranks.index(me) if me in self.ranks else None

    def included(self) -> bool:
        return self.rank() is not None

    def __eq__(self, other):
        return isinstance(other, ProcessSet) and self.ranks == other.ranks

    def __hash__(self):
        return hash(tuple(self.ranks))

    def __repr__(self):
        return "ProcessSet(process_set_id=%r, ranks=%r)" % (self.process_set_id, self.ranks)


class _GlobalProcessSet(ProcessSet):
    def __init__(self):
        self.process_set_id = 0
        self.ranks = []

    @property
    def ranks(self):
        from horovod_spark.common import basics
        return list(range(basics.size())) if basics.is_initialized() else []

    @ranks.setter
    def ranks(self, value):
        pass


global_process_set = _GlobalProcessSet()
_registered = {}
_lock = threading.Lock()
_counter = [0]


def _reset():
    with _lock:
        for ps in _registered.values():
            ps.process_set_id = None
        _registered.clear()


def add_process_set(process_set: Union[ProcessSet, Sequence[int]]) -> ProcessSet:
    """Register a process set on every rank (all ranks must call this with the same ranks)."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise ValueError("%r is already registered" % (ps,))
    with _lock:
        _counter[0] += 1
        name = "__add_process_set__.%d" % _counter[0]
    handle = ops.control_async(ops.OP_ADD_PROCESS_SET, name, splits=ps.ranks)
    ps.process_set_id = ops.wait(handle)
    with _lock:
        _registered[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set: ProcessSet) -> bool:
    """Unregister a process set on every rank (a collective over all ranks)."""
    if not isinstance(process_set, ProcessSet) or process_set.process_set_id in (None, 0):
        raise ValueError("remove_process_set needs a registered, non-global ProcessSet, got %r"
                         % (process_set,))
    with _lock:
        _counter[0] += 1
        name = "__remove_process_set__.%d" % _counter[0]
    handle = ops.control_async(ops.OP_REMOVE_PROCESS_SET, name, root=process_set.process_set_id)
    ops.wait(handle)
    with _lock:
        _registered.pop(process_set.process_set_id, None)
    process_set.process_set_id = None
    return True


def process_set_id_of(process_set) -> int:
    """The core's id for a ProcessSet argument (None means the global set)."""
    if process_set is None:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise TypeError("process_set must be a horovod_spark ProcessSet, got %s"
                        % type(process_set).__name__)
    return process_set._require_id()
