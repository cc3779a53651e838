"""horovod_spark.tensorflow where horovod.tensorflow has the same API: the errors Horovod raises
(a name still in flight, a scalar or op=Adasum reducescatter, a non-integer alltoall splits tensor,
allgather and broadcast while a rank has joined) and op=Adasum against numpy, on 2 real ranks.

TensorFlow takes seconds to import, so one run_local call does all the work.
"""
import os

import numpy as np
import pytest
from support.adasum_reference import adasum_ranks

from horovod_spark.launcher import run_local

pytestmark = pytest.mark.timeout(240)

SIZE = 2


def _data(rank, shape, dtype):
    return (np.random.default_rng(10 * rank + len(shape)).normal(size=shape) * (rank + 1)).astype(dtype)


def _caught(fn):
    try:
        fn()
        return None
    except Exception as exc:  # the test compares the class and message
        return type(exc).__name__, isinstance(exc, RuntimeError), isinstance(exc, ValueError), str(exc)


def _submit_twice(hvd, tf, name):
    """Runs an allreduce named ``name`` in a second thread (the way a synchronous TF op can have
    one in flight) and, once it is queued, submits another under the same name from this thread.
    Returns (what the second call raised, the thread and the dict its result lands in)."""
    import threading
    import time

    from horovod_spark.common import ops
    first = {}
    thread = threading.Thread(target=lambda: first.update(out=hvd.allreduce(tf.ones(3), name=name, op=hvd.Sum)))
    thread.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # until the thread's request is queued
        try:
            ops.check_names_free(["allreduce." + name])
            time.sleep(0.01)
        except ValueError:
            break
    return _caught(lambda: hvd.allreduce(tf.ones(3), name=name, op=hvd.Sum)), thread, first


def _duplicate_names(hvd, tf, rank):
    """A second allreduce under a name still in flight is refused with ValueError; the first
    completes. Each rank tests in turn while the other waits in a barrier, so the first request
    cannot complete before the second is submitted."""
    found = {}
    for tester in range(SIZE):
        name = "dup.%d" % tester
        if rank == tester:
            found["second"], thread, first = _submit_twice(hvd, tf, name)
        hvd.barrier()
        if rank != tester:
            hvd.allreduce(tf.ones(3), name=name, op=hvd.Sum)
        else:
            thread.join()
            found["first"] = first["out"].numpy().tolist()
    return found


def _refusals(hvd, tf, rank):
    n = SIZE
    found = {
        "reducescatter_scalar": _caught(lambda: hvd.reducescatter(tf.constant(float(rank)))),
        "grouped_reducescatter_scalar": _caught(lambda: hvd.grouped_reducescatter([tf.ones([n]), tf.constant(1.0)])),
        "reducescatter_adasum": _caught(lambda: hvd.reducescatter(tf.ones([n * 4]), op=hvd.Adasum)),
        "grouped_reducescatter_adasum": _caught(lambda: hvd.grouped_reducescatter([tf.ones([n])], op=hvd.Adasum)),
        # whole numbers in a float tensor: refused by the dtype all the same
        "alltoall_float_splits": _caught(lambda: hvd.alltoall(tf.ones([2 * n]), splits=tf.constant([2.0] * n))),
    }
    out, received = hvd.alltoall(tf.ones([2 * n]), splits=tf.constant([2] * n))
    found["alltoall_int_splits"] = received.numpy().tolist()
    for first_join_rank in range(n):
        if rank == first_join_rank:
            last = int(hvd.join())
        else:
            found["join_allgather", first_join_rank] = _caught(lambda: hvd.allgather(tf.ones([2]), name="j.ag"))
            found["join_broadcast", first_join_rank] = _caught(
                lambda: hvd.broadcast(tf.ones([2]), root_rank=rank, name="j.bc"))
            found["join_allreduce", first_join_rank] = hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="j.ar").numpy()
            last = int(hvd.join())
        found["join_last", first_join_rank] = last
    return found


def _adasum(hvd, tf, rank):
    found = {}
    for dtype in ("float32", "float64"):
        x = tf.constant(_data(rank, (5, 3), dtype))
        y = tf.constant(_data(rank, (40,), dtype))
        found["eager", dtype] = hvd.allreduce(x, op=hvd.Adasum).numpy()
        found["function", dtype] = tf.function(lambda t: hvd.allreduce(t, op=hvd.Adasum, name="ad.f"))(x).numpy()
        found["grouped", dtype] = [t.numpy() for t in hvd.grouped_allreduce([x, y], op=hvd.Adasum)]
    # DistributedGradientTape(op=Adasum) combines the gradients with Adasum, as Horovod's does
    v = tf.Variable(np.ones(4, np.float32))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(v * tf.constant(_data(rank, (4,), "float32")))
    found["tape"] = hvd.DistributedGradientTape(tape, op=hvd.Adasum).gradient(loss, [v])[0].numpy()
    return found


def _rank_main():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    import horovod_spark.tensorflow as hvd

    hvd.init()
    rank = hvd.rank()
    results = {"duplicates": _duplicate_names(hvd, tf, rank), "refusals": _refusals(hvd, tf, rank),
               "adasum": _adasum(hvd, tf, rank)}
    hvd.shutdown()
    return results


@pytest.fixture(scope="module")
def ranks():
    return run_local(_rank_main, num_proc=SIZE, timeout=200)


def test_a_name_in_flight_is_refused_with_value_error(ranks):
    for rank, result in enumerate(ranks):
        found = result["duplicates"]
        kind, _, is_value_error, message = found["second"]
        assert is_value_error and "already in flight" in message, (rank, found["second"])
        assert found["first"] == [2.0] * 3


def test_refusals_match_horovod(ranks):
    for rank, result in enumerate(ranks):
        found = result["refusals"]
        for key in ("reducescatter_scalar", "grouped_reducescatter_scalar"):
            assert found[key][2] and "scalar" in found[key][3], (key, found[key])
        for key in ("reducescatter_adasum", "grouped_reducescatter_adasum"):
            kind, is_runtime_error, is_value_error, message = found[key]
            assert is_runtime_error and not is_value_error and "Adasum" in message, (key, found[key])
        assert found["alltoall_float_splits"][0] == "TypeError", found["alltoall_float_splits"]
        assert found["alltoall_int_splits"] == [2] * SIZE
        for first in range(SIZE):
            assert found["join_last", first] != first
            if rank == first:
                continue
            for key in ("join_allgather", "join_broadcast"):
                kind, is_runtime_error, _, message = found[key, first]
                assert is_runtime_error and "join" in message, (key, found[key, first])
            np.testing.assert_array_equal(found["join_allreduce", first], [1.0, 1.0])  # the joined rank adds zeros


def test_adasum_matches_numpy(ranks):
    for dtype, tol in (("float32", 2e-6), ("float64", 1e-12)):
        x = adasum_ranks([_data(r, (5, 3), dtype) for r in range(SIZE)])
        y = adasum_ranks([_data(r, (40,), dtype) for r in range(SIZE)])
        for result in ranks:
            found = result["adasum"]
            for mode in ("eager", "function"):
                np.testing.assert_allclose(found[mode, dtype], x, rtol=tol, atol=tol)
                np.testing.assert_array_equal(found[mode, dtype], ranks[0]["adasum"][mode, dtype])
            np.testing.assert_allclose(found["grouped", dtype][0], x, rtol=tol, atol=tol)
            np.testing.assert_allclose(found["grouped", dtype][1], y, rtol=tol, atol=tol)
    tape = adasum_ranks([_data(r, (4,), "float32") for r in range(SIZE)])
    for result in ranks:
        np.testing.assert_allclose(result["adasum"]["tape"], tape, rtol=2e-6, atol=2e-6)
