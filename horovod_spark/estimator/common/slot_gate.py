"""Fits of one driver that run at once share the cluster's task slots.

Spark ML's tuning classes fit ``parallelism`` estimators at once, each from its own thread, and
each fit runs a barrier stage of num_proc tasks. Spark starts a barrier stage only when all of its
tasks have slots, so stages that do not fit together queue inside Spark's scheduler, where the
waiting fit's start_timeout runs out while the others train. Here a fit's ranks start only once
its num_proc slots are not held by the driver's other fits: fits that fit the cluster together
run at once, the others wait their turn, visibly and without a timeout. A fit never holds part of
what it needs, so no two fits wait on each other.
"""
import contextlib
import threading

from horovod_spark import session as spark_session

_changed = threading.Condition()
_held = {}   # cluster key -> slots the driver's running fits hold


def cluster_slots(session, num_proc: int):
    """(key, task slots) of ``session``'s cluster, or (key, None) where the slots are unknown."""
    if spark_session.is_connect_session(session):
        return ("connect", id(session)), spark_session.known_slots(session)
    sc = session.sparkContext
    return ("classic", id(sc)), spark_session.available_slots(sc, num_proc, 0)


@contextlib.contextmanager
def slots_held(key, total, num_proc: int, log):
    """Hold ``num_proc`` of the ``total`` slots of the cluster ``key`` while the block runs; wait
    while the driver's other fits hold too many of them. ``total`` None: nothing to share."""
    if total is None or num_proc > total:
        # Unknown, or a fit too big for the cluster, which the pre-flight check has refused already.
        yield
        return
    with _changed:
        if _held.get(key, 0) + num_proc > total:
            log("waiting for %d free task slot(s): other fits of this driver hold %d of the cluster's %d"
                % (num_proc, _held[key], total))
        _changed.wait_for(lambda: _held.get(key, 0) + num_proc <= total)
        _held[key] = _held.get(key, 0) + num_proc
    try:
        yield
    finally:
        with _changed:
            _held[key] -= num_proc
            _changed.notify_all()
