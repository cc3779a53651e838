"""Process sets: collectives among a subset of ranks, with Horovod's API.

Adding or removing a set is itself a collective over all ranks (every rank calls it with the same
ranks), so every rank agrees on the set's id. The request is named after what it changes (the
ranks added, the id removed), so a rank that calls it late, or again after a failed attempt,
still meets the others' requests. Ranks that never make the call do not leave the others waiting:
after HOROVOD_PROCESS_SET_TIMEOUT the call fails on the ranks that made it, naming those that did
not.
"""
import threading
from typing import TYPE_CHECKING, Iterable, List, Optional, Sequence, Union

from horovod_spark.common import _core, ops

if TYPE_CHECKING:  # only for the annotation: mpi4py is optional
    import mpi4py.MPI


class ProcessSet:
    """An ordered set of global ranks. ``process_set_id`` is assigned when it is registered."""

    def __init__(self, ranks_or_comm: Union[Sequence[int], Iterable[int], "mpi4py.MPI.Comm"]):
        ranks = ranks_or_comm
        if hasattr(ranks, "Get_group"):  # an mpi4py communicator: its members' COMM_WORLD ranks
            from mpi4py import MPI
            ranks = MPI.Group.Translate_ranks(ranks.Get_group(), list(range(ranks.Get_size())),
                                              MPI.COMM_WORLD.Get_group())
        try:
            ranks = [int(r) for r in ranks]
        except (TypeError, ValueError):
            raise ValueError("ProcessSet needs an iterable of global ranks (ints) or an mpi4py communicator, "
                             "got %r" % (ranks_or_comm,)) from None
        if not ranks:
            raise ValueError("ProcessSet needs at least one rank, got %r" % (ranks_or_comm,))
        self.ranks: List[int] = sorted(ranks)
        if len(set(self.ranks)) != len(self.ranks):
            raise ValueError("ProcessSet ranks must be distinct, got %r" % (ranks,))
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
        me = _core.rank()  # (ValueError before hvd.init(), as basics.rank())
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
        return list(range(_core.size())) if _core.is_created() else []

    @ranks.setter
    def ranks(self, value):
        pass


global_process_set = _GlobalProcessSet()
_registered = {}
_lock = threading.Lock()


def clear_registrations():
    """Forget every registered set (their ids mean nothing once the core has shut down): each
    ProcessSet object must be registered again after the next hvd.init()."""
    with _lock:
        for ps in _registered.values():
            ps.process_set_id = None
        _registered.clear()


def add_process_set(process_set: Union[ProcessSet, Sequence[int]]) -> ProcessSet:
    """Register a process set on every rank (all ranks must call this with the same ranks).

    Fails with ``HorovodCollectiveError`` naming the ranks that did not call it within
    HOROVOD_PROCESS_SET_TIMEOUT."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise ValueError("%r is already registered" % (ps,))
    name = "__add_process_set__.%s" % ",".join(str(r) for r in ps.ranks)
    handle = ops.control_async(ops.OP_ADD_PROCESS_SET, name, splits=ps.ranks)
    ps.process_set_id = ops.wait(handle)
    with _lock:
        _registered[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set: ProcessSet) -> bool:
    """Unregister a process set on every rank (a collective over all ranks). False, as in Horovod,
    for the global set or a set that is not registered (nothing to remove)."""
    if not isinstance(process_set, ProcessSet):
        raise TypeError("remove_process_set needs a ProcessSet, got %s" % type(process_set).__name__)
    if process_set.process_set_id in (None, 0):
        return False
    name = "__remove_process_set__.%d" % process_set.process_set_id
    handle = ops.control_async(ops.OP_REMOVE_PROCESS_SET, name, root=process_set.process_set_id)
    ops.wait(handle)
    with _lock:
        _registered.pop(process_set.process_set_id, None)
    process_set.process_set_id = None
    return True


def registered(process_set_id: int) -> Optional[ProcessSet]:
    """The ProcessSet registered under ``process_set_id`` on this rank (the global set for 0), or None."""
    if process_set_id == 0:
        return global_process_set
    with _lock:
        return _registered.get(process_set_id)


def process_set_id_of(process_set) -> int:
    """The core's id for a ProcessSet argument (None means the global set). ValueError, as Horovod
    raises, for a set that was never registered or whose ``process_set_id`` names no registered set
    of the same ranks (set by hand, or left from before a shutdown)."""
    if process_set is None or process_set is global_process_set:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise TypeError("process_set must be a horovod_spark ProcessSet, got %s"
                        % type(process_set).__name__)
    process_set_id = process_set._require_id()
    known = registered(process_set_id)
    if known is None or known.ranks != process_set.ranks:
        raise ValueError("process_set_id %r of %r is not the id of a registered process set with these ranks; "
                         "register the set with hvd.add_process_set() (or hvd.init(process_sets=...)) and use "
                         "the id it assigns" % (process_set_id, process_set.ranks))
    return process_set_id


def require_member(process_set, what) -> None:
    """ValueError when this rank is not a member of ``process_set`` (an already validated set):
    only its members may run ``what`` on it, as in Horovod."""
    if process_set is None or process_set is global_process_set:
        return
    if not process_set.included():
        raise ValueError("%s: rank %d is not a member of the process set %r, so it cannot take part in its "
                         "collectives; call them only where process_set.included() is True"
                         % (what, _core.rank(), process_set))


def root_index(root_rank, process_set) -> int:
    """``root_rank`` as the index within ``process_set`` that the core takes. Like Horovod, a root
    is always named by its global rank (``hvd.rank()``), in a process set too."""
    if isinstance(root_rank, bool) or not isinstance(root_rank, int):
        try:
            root_rank = int(root_rank)
        except (TypeError, ValueError):
            raise TypeError("root_rank must be an int, got %r" % (root_rank,)) from None
    ranks = (process_set or global_process_set).ranks
    if process_set is None or process_set.process_set_id == 0:
        if not 0 <= root_rank < len(ranks):
            raise ValueError("root_rank %d is out of range for %d ranks" % (root_rank, len(ranks)))
        return root_rank
    if root_rank not in ranks:
        raise ValueError("root_rank %d is not a member of the process set %r; root_rank is a global rank "
                         "(hvd.rank() of the root), as in Horovod" % (root_rank, ranks))
    return ranks.index(root_rank)
