"""Handles of in-flight collectives, and the names that match them across ranks.

The core only sees raw pointers, so every tensor it may read or write is referenced here until
``synchronize`` collects the result; otherwise Python could free memory the core still uses.
One user handle may stand for several core handles (grouped ops), and its ``finish`` callback
turns the core's results into what Horovod's ``synchronize`` returns. A core handle may also be a
``_staging.Deferred`` (a device tensor's collective that the staging thread enqueues once the
tensor's copy to host memory is done); it stands for the core handles it resolves to.
"""
import collections
import itertools
import threading

from horovod_spark.common import ops as _core
from horovod_spark.common.process_sets import process_set_id_of as _process_set_id_of
from horovod_spark.common.process_sets import require_member as _require_member
from horovod_spark.torch._staging import Deferred

_Pending = collections.namedtuple("_Pending", ["core_handles", "keep_alive", "finish"])

_lock = threading.Lock()
_pending = {}
_next_handle = itertools.count(1)
# Per (op type, process set), like Horovod's "allreduce.noname.<n>": ranks issuing unnamed ops of
# a process set in the same order generate the same names, which is all the core needs to match
# them; ranks outside a set do not advance its counters.
_noname_counters = collections.defaultdict(itertools.count)


def reset():
    """Forget pending handles and name counters (on init/shutdown, when the core forgets them too)."""
    global _next_handle
    with _lock:
        _pending.clear()
        _noname_counters.clear()
        _next_handle = itertools.count(1)


def op_name(op_type, name, process_set):
    """The core-level name of a ``op_type`` collective the user called ``name`` (or None)."""
    if name is None:
        key = (op_type, process_set_id(process_set))
        with _lock:
            n = next(_noname_counters[key])
        return "%s.noname.%d" % (op_type, n)
    return "%s.%s" % (op_type, name)


def process_set_id(process_set):
    """The core id of ``process_set`` for a collective this rank submits on it: ValueError, as
    Horovod raises from the call, when the set was never registered, its id is not a registered
    set's, or this rank is not one of its members."""
    ps_id = _process_set_id_of(process_set)
    if ps_id:
        _require_member(process_set, "collective on a process set")
    return ps_id


def register(core_handles, keep_alive, finish):
    """Track core handle(s) and return the user's handle.

    ``finish(results)`` receives the list of ``wait`` results, in ``core_handles`` order, and
    returns what ``synchronize`` gives the caller.
    """
    if isinstance(core_handles, (int, Deferred)):
        core_handles = [core_handles]
    entry = _Pending(list(core_handles), keep_alive, finish)
    # next() on itertools.count and a dict store are each atomic under the GIL: no lock needed.
    handle = next(_next_handle)
    _pending[handle] = entry
    return handle


def register_result(core_handle, result, keep_alive):
    """``register`` for one core handle whose successful wait leaves ``result`` ready as is (an
    in-place allreduce): synchronize returns it without a finish callback."""
    handle = next(_next_handle)
    _pending[handle] = (core_handle, result, keep_alive)
    return handle


def poll(handle):
    """True once the operation behind ``handle`` finished (``synchronize`` then won't block)."""
    entry = _pending.get(handle)
    if entry is None:
        raise ValueError("poll(): unknown handle %r (already synchronized, or not from this process)"
                         % (handle,))
    if type(entry) is tuple:
        return _poll_one(entry[0])
    return all(_poll_one(h) for h in entry.core_handles)


def _poll_one(core_handle):
    if type(core_handle) is Deferred:
        return core_handle.ready() and all(_core.poll(h) for h in core_handle.core_handles())
    return _core.poll(core_handle)


def _core_handles(core_handles):
    """The core handles behind ``core_handles``, deferred ones resolved (waiting for them)."""
    flat = []
    for h in core_handles:
        if type(h) is Deferred:
            flat.extend(h.core_handles())
        else:
            flat.append(h)
    return flat


def synchronize(handle):
    """Wait for ``handle`` and return its result; None for an unknown handle, as in Horovod."""
    entry = _pending.pop(handle, None)  # atomic under the GIL
    if entry is None:
        return None
    if type(entry) is tuple:  # from register_result
        core_handle = entry[0]
        if type(core_handle) is int:
            _core.wait(core_handle)
        else:
            for h in core_handle.core_handles():
                _core.wait(h)
        return entry[1]
    results, error = [], None
    # Wait for every part even after one fails, so no part still writes into memory we release.
    # (A deferred part that failed to enqueue never touches memory: its error is raised at once.)
    for h in _core_handles(entry.core_handles):
        try:
            results.append(_core.wait(h))
        except Exception as exc:
            if error is None:
                error = exc
            results.append(None)
    if error is not None:
        raise error
    return entry.finish(results)
