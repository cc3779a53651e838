"""Collectives a graph's submit op has queued in the core and its wait op has not yet collected.

A submit op stores its ``Pending`` (or the error its submission raised) under a fresh int64 key
and returns the key; the wait op that takes the key collects it. A session may run a submit op
without its wait op (a fetch that needs only a later collective runs the submits before it, see
``_bridge``): the next run of the same submit op abandons the uncollected entry, and abandoned
entries are finished (their errors dropped) once the core is done with them, so their arrays are
released without blocking anyone.
"""
import itertools
import threading

from horovod_spark.tensorflow.array_collectives import Failed

_lock = threading.Lock()
_keys = itertools.count(1)
_by_key = {}
_latest_key_of_op = {}
_abandoned = []


def submit(op_id, start):
    """Runs ``start() -> Pending`` for the submit op ``op_id``; returns the key its wait op takes.
    Never raises: an error is raised by the wait op, so it cannot stop the submits after it."""
    try:
        pending = start()
    except Exception as exc:  # (re-raised by collect)
        pending = Failed(exc)
    with _lock:
        key = next(_keys)
        _by_key[key] = pending
        previous = _latest_key_of_op.get(op_id)
        _latest_key_of_op[op_id] = key
        if previous in _by_key:
            _abandoned.append(_by_key.pop(previous))
        finished = [p for p in _abandoned if p.done()]
        _abandoned[:] = [p for p in _abandoned if p not in finished]
    for p in finished:
        try:
            p.finish()
        except Exception:  # nobody asked for this result: its error has no one to go to
            pass
    return key


def collect(op_id, key):
    """Waits for the entry under ``key`` and returns its results (raising its error)."""
    with _lock:
        pending = _by_key.pop(key, None)
        if _latest_key_of_op.get(op_id) == key:
            del _latest_key_of_op[op_id]
    if pending is None:
        raise RuntimeError("horovod_spark: the collective this wait op belongs to was submitted again before "
                           "its result was collected (is the same graph running in two threads at once?)")
    return pending.finish()


def reset():
    """Forget every entry (init/shutdown: the core they were queued in is gone)."""
    with _lock:
        _by_key.clear()
        _latest_key_of_op.clear()
        _abandoned.clear()
