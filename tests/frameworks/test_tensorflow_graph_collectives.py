"""Many collectives of mixed kinds over every Horovod dtype in one TensorFlow graph complete on 2
real ranks: in a ``tf.compat.v1.Session`` running a ``tf.Graph`` (where the executor picks a
different order of independent ops on each rank), inside ``tf.function`` and eagerly, with one
inter-op thread and with TensorFlow's default; and process-set membership is checked as Horovod
checks it, in every mode. The expected values are computed here from both ranks' inputs.

Each run_local call starts TensorFlow once per rank and does all of its work there.
"""
import io
import os
import sys

import numpy as np
import pytest

from horovod_spark.launcher import run_local

pytestmark = pytest.mark.timeout(300)

SIZE = 2
DTYPES = ["uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64", "bool"]
KINDS = ["allreduce", "allgather", "broadcast", "alltoall", "reducescatter"]
OPS = ["Sum", "Min", "Max", "Product", "Average"]
COUNTS = (1, 30, 300)
STALL_CHECK_S = 1


def _plan(count):
    """(kind, dtype, op) of collective i: every dtype meets every kind, and every op in the
    reductions, along the way."""
    plan = []
    for i in range(count):
        block = i // len(DTYPES)
        dtype, kind, op = DTYPES[i % len(DTYPES)], KINDS[block % len(KINDS)], OPS[(block // len(KINDS)) % len(OPS)]
        if dtype == "bool" and op == "Average":  # (undefined for bool, as in Horovod)
            op = "Sum"
        plan.append((kind, dtype, op))
    return plan


def _input(rank, i, dtype):
    """Two rows of small values: exact in every dtype, sums and products of 2 ranks too."""
    values = (np.arange(4).reshape(2, 2) + rank + i) % 5 + (1 if dtype != "bool" else 0)
    if dtype == "bool":
        return (values % 2).astype(bool)
    return values.astype(np.float64)  # cast to the dtype inside the rank (bfloat16 is TensorFlow's)


def _expected(plan, i, rank):
    kind, dtype, op = plan[i]
    xs = [_input(r, i, dtype) for r in range(SIZE)]
    if kind == "allgather":
        return np.concatenate(xs)
    if kind == "broadcast":
        return xs[SIZE - 1]
    if kind == "alltoall":
        return np.stack([x[rank] for x in xs])
    if dtype == "bool":
        reduced = np.logical_or(*xs) if op in ("Sum", "Max") else np.logical_and(*xs)
    else:
        reduced = {"Sum": sum(xs), "Min": np.minimum(*xs), "Max": np.maximum(*xs), "Product": xs[0] * xs[1],
                   "Average": sum(xs) / SIZE}[op]
        if op == "Average" and not dtype.startswith(("float", "bfloat")):
            reduced = np.trunc(reduced)  # integers: the average truncated toward zero, as Horovod's
    return reduced if kind == "allreduce" else reduced[rank:rank + 1]


def _collectives(hvd, tf, plan, rank, inputs=None):
    """The plan's collectives on this rank's inputs (tensors, or the given graph inputs)."""
    outs = []
    for i, (kind, dtype, op) in enumerate(plan):
        x = inputs[i] if inputs is not None else tf.cast(tf.constant(_input(rank, i, dtype)), dtype)
        if kind == "allreduce":
            outs.append(hvd.allreduce(x, op=getattr(hvd, op)))
        elif kind == "allgather":
            outs.append(hvd.allgather(x))
        elif kind == "broadcast":
            outs.append(hvd.broadcast(x, root_rank=SIZE - 1))
        elif kind == "alltoall":
            outs.append(hvd.alltoall(x))
        else:
            outs.append(hvd.reducescatter(x, op=getattr(hvd, op)))
    return outs


def _as_numpy(values):
    return [np.asarray(v).astype(bool) if np.asarray(v).dtype == bool else np.asarray(v).astype(np.float64)
            for v in values]


def _session_runs(hvd, tf, plan, rank, inter_op_threads):
    graph = tf.Graph()
    with graph.as_default():
        outs = _collectives(hvd, tf, plan, rank)
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=inter_op_threads)
    with tf.compat.v1.Session(graph=graph, config=config) as session:
        return [_as_numpy(session.run(outs)) for _ in range(2)]


def _function_runs(hvd, tf, plan, rank):
    # (autograph=False: nothing here is data-dependent Python control flow, and converting the
    # library code for 300 ops would take most of the test's time)
    step = tf.function(lambda: _collectives(hvd, tf, plan, rank), autograph=False)
    return [_as_numpy(step()) for _ in range(2)]


def _membership(hvd, tf, rank):
    """What each mode raises for a collective on a set this rank is not in (a set of one rank and
    a set of the other rank) and for a forged process_set_id."""
    first, second = hvd.add_process_set([0]), hvd.add_process_set([1])
    outside = second if rank == 0 else first
    found = {}

    def caught(key, fn):
        try:
            fn()
            found[key] = None
        except Exception as exc:  # the test compares the class
            found[key] = (type(exc).__name__, isinstance(exc, tf.errors.InvalidArgumentError),
                          isinstance(exc, ValueError), str(exc))

    x = tf.ones([2])
    for label, ps in (("one", first), ("other", second)):
        if ps is not outside:
            found[label, "member"] = hvd.allreduce(x, op=hvd.Sum, process_set=ps).numpy().tolist()
            continue
        caught((label, "eager"), lambda: hvd.allreduce(x, process_set=ps))
        caught((label, "eager_allgather"), lambda: hvd.allgather(x, process_set=ps))
        caught((label, "eager_broadcast"), lambda: hvd.broadcast(x, root_rank=ps.ranks[0], process_set=ps))
        caught((label, "function"), lambda: tf.function(lambda t: hvd.allreduce(t, process_set=ps))(x))
        graph = tf.Graph()
        with graph.as_default():
            out = hvd.allreduce(tf.ones([2]), process_set=ps)  # built: refused only when run
        with tf.compat.v1.Session(graph=graph) as session:
            caught((label, "session"), lambda: session.run(out))
    forged = hvd.ProcessSet([0, 1])
    forged.process_set_id = 77
    caught("forged", lambda: hvd.allreduce(x, process_set=forged))
    hvd.barrier()
    return found


def _grouped(hvd, tf, rank):
    """The grouped collectives over every dtype, eagerly and in tf.function: (dtype, kind, mode) ->
    results."""
    found = {}
    for i, dtype in enumerate(DTYPES):
        xs = [tf.cast(tf.constant(_input(rank, i + k, dtype)), dtype) for k in range(2)]
        calls = {"grouped_allreduce": lambda t: hvd.grouped_allreduce(t, op=hvd.Sum),
                 "grouped_allgather": lambda t: hvd.grouped_allgather(t),
                 "grouped_reducescatter": lambda t: hvd.grouped_reducescatter(t, op=hvd.Sum)}
        for kind, call in calls.items():
            found[dtype, kind, "eager"] = _as_numpy(call(xs))
            found[dtype, kind, "function"] = _as_numpy(tf.function(call, autograph=False)(xs))
    return found


def _disagreement(hvd, tf, rank):
    """Each rank's graph runs an allreduce under a name only it uses; the stall inspector names
    both while they wait. Then each rank submits the other's name eagerly, which completes both."""
    import threading
    import time

    graph = tf.Graph()
    with graph.as_default():
        out = hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="disagree.rank%d" % rank)
    found = {}

    def run():
        with tf.compat.v1.Session(graph=graph) as session:
            found["graph"] = session.run(out).tolist()

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(STALL_CHECK_S * 3)
    found["eager"] = hvd.allreduce(tf.ones([2]), op=hvd.Sum, name="disagree.rank%d" % (1 - rank)).numpy().tolist()
    thread.join()
    return found


def _rank_main(inter_op_threads):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    if inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(inter_op_threads)
    import horovod_spark.tensorflow as hvd

    hvd.init()
    rank = hvd.rank()
    results = {}
    for count in COUNTS:
        plan = _plan(count)
        results["session", count] = _session_runs(hvd, tf, plan, rank, inter_op_threads)
        results["function", count] = _function_runs(hvd, tf, plan, rank)
        results["eager", count] = [_as_numpy(_collectives(hvd, tf, plan, rank))]
    if inter_op_threads:
        results["membership"] = _membership(hvd, tf, rank)
        results["disagreement"] = _disagreement(hvd, tf, rank)
        results["grouped"] = _grouped(hvd, tf, rank)
    hvd.shutdown()
    return results


@pytest.fixture(scope="module", params=[1, 0], ids=["one_inter_op_thread", "default_inter_op_threads"])
def ranks(request):
    if not request.param:
        return run_local(_rank_main, args=(0,), num_proc=SIZE, timeout=280)
    stderr = io.StringIO()
    results = run_local(_rank_main, args=(1,), num_proc=SIZE, timeout=280, stderr=stderr,
                        env={"HOROVOD_STALL_CHECK_TIME_SECONDS": str(STALL_CHECK_S)})
    sys.stderr.write(stderr.getvalue())
    return [dict(r, stderr=stderr.getvalue()) for r in results]


@pytest.mark.parametrize("mode", ["session", "function", "eager"])
@pytest.mark.parametrize("count", COUNTS)
def test_mixed_collectives_over_every_dtype_complete_with_horovod_values(ranks, mode, count):
    plan = _plan(count)
    for rank, result in enumerate(ranks):
        for run in result[mode, count]:
            assert len(run) == count
            for i, got in enumerate(run):
                want = _expected(plan, i, rank)
                np.testing.assert_array_equal(got, want, err_msg="rank %d, collective %d: %r" % (rank, i, plan[i]))


def test_every_dtype_meets_every_kind():
    plan = _plan(max(COUNTS))
    assert {(kind, dtype) for kind, dtype, _ in plan} == {(k, d) for k in KINDS for d in DTYPES}
    assert {(dtype, op) for kind, dtype, op in plan if kind in ("allreduce", "reducescatter")} >= {
        (d, o) for d in DTYPES for o in OPS if not (d == "bool" and o == "Average")}


def test_membership_is_checked_in_every_mode_as_horovod_checks_it(ranks):
    if "membership" not in ranks[0]:
        pytest.skip("checked in the run with one inter-op thread")
    for rank, result in enumerate(ranks):
        found = result["membership"]
        member_of = "one" if rank == 0 else "other"
        assert found[member_of, "member"] == [1.0, 1.0]
        outside = "other" if rank == 0 else "one"
        for mode in ("eager", "eager_allgather", "eager_broadcast", "function", "session"):
            kind, is_invalid_argument, _, message = found[outside, mode]
            assert is_invalid_argument and "not a member" in message, (rank, mode, found[outside, mode])
        kind, is_invalid_argument, is_value_error, message = found["forged"]
        assert is_value_error and not is_invalid_argument and "77" in message, found["forged"]


def test_the_stall_inspector_names_graph_collectives_ranks_disagree_on(ranks):
    if "disagreement" not in ranks[0]:
        pytest.skip("checked in the run with one inter-op thread")
    for result in ranks:
        assert result["disagreement"] == {"graph": [2.0, 2.0], "eager": [2.0, 2.0]}
    warnings = [line for line in ranks[0]["stderr"].splitlines() if "stall:" in line]
    for rank in range(SIZE):
        assert any("'allreduce.disagree.rank%d'" % rank in w and "missing ranks [%d]" % (1 - rank) in w
                   for w in warnings), warnings


def test_grouped_collectives_take_every_dtype(ranks):
    if "grouped" not in ranks[0]:
        pytest.skip("checked in the run with one inter-op thread")
    for rank, result in enumerate(ranks):
        for i, dtype in enumerate(DTYPES):
            inputs = [[_input(r, i + k, dtype) for r in range(SIZE)] for k in range(2)]
            if dtype == "bool":
                summed = [np.logical_or(*xs) for xs in inputs]
            else:
                summed = [sum(xs) for xs in inputs]
            want = {"grouped_allreduce": summed, "grouped_allgather": [np.concatenate(xs) for xs in inputs],
                    "grouped_reducescatter": [s[rank:rank + 1] for s in summed]}
            for kind, expected in want.items():
                for mode in ("eager", "function"):
                    got = result["grouped"][dtype, kind, mode]
                    assert len(got) == 2
                    for g, w in zip(got, expected):
                        np.testing.assert_array_equal(g, w, err_msg="rank %d %s %s %s" % (rank, dtype, kind, mode))
