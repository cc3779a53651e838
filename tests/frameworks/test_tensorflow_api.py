"""horovod_spark.tensorflow on 2 real ranks: every collective against a numpy reference, eagerly and
inside tf.function; gradients; sparse (Embedding) gradients; clear errors for bad inputs.

TensorFlow takes seconds to import, so one run_local call does all the work and the tests below
check its per-rank results.
"""
import os

import numpy as np
import pytest

from horovod_spark.launcher import run_local

pytestmark = pytest.mark.timeout(240)

SIZE = 2
DTYPES = ["float32", "float64", "int32", "int64"]
MODES = ["eager", "function"]
SPLITS = {0: [1, 2], 1: [2, 1]}  # alltoall: rows each rank sends to rank 0 and rank 1


def _data(rank, dtype, shape=(3, 4)):
    """Small positive integers (exact in every dtype, products stay small), different per rank."""
    base = np.arange(int(np.prod(shape))).reshape(shape) % 5 + 1 + rank
    return base.astype(dtype)


# -- run on every rank ---------------------------------------------------------------------------

def _collectives(hvd, tf, x, rank):
    out = {
        "sum": hvd.allreduce(x, op=hvd.Sum),
        "scalar": hvd.allreduce(x[0, 0], op=hvd.Sum),
        "min": hvd.allreduce(x, op=hvd.Min),
        "max": hvd.allreduce(x, op=hvd.Max),
        "product": hvd.allreduce(x, op=hvd.Product),
        "grouped": hvd.grouped_allreduce([x, x * 2], op=hvd.Sum),
        "allgather": hvd.allgather(x[:rank + 1]),
        "grouped_allgather": hvd.grouped_allgather([x[:rank + 1], x[:1]]),
        "broadcast": hvd.broadcast(x, root_rank=1),
        "alltoall": hvd.alltoall(x, splits=SPLITS[rank]),
        "alltoall_even": hvd.alltoall(x[:2]),  # no splits: the tensor alone, as in Horovod
        "reducescatter": hvd.reducescatter(x, op=hvd.Sum),
    }
    if x.dtype.is_floating:
        out["average"] = hvd.allreduce(x)
        out["scaled"] = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
        out["fp16"] = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
    return out


def _gradients(hvd, tf, v, rank):
    w = float(rank + 1)  # each rank weighs its loss differently, so sums over ranks are visible
    losses = {
        "allreduce_sum": lambda: tf.reduce_sum(hvd.allreduce(v, op=hvd.Sum) * w),
        "allreduce_average": lambda: tf.reduce_sum(hvd.allreduce(v) * w),
        "allgather": lambda: tf.reduce_sum(hvd.allgather(v) * w),
        "broadcast": lambda: tf.reduce_sum(hvd.broadcast(v, root_rank=0) * w),
        "reducescatter": lambda: tf.reduce_sum(hvd.reducescatter(v, op=hvd.Sum) * w),
        "alltoall": lambda: tf.reduce_sum(hvd.alltoall(v, splits=SPLITS[rank])[0] * w),
    }
    grads = {}
    for key, loss in losses.items():
        with tf.GradientTape() as tape:
            value = loss()
        grads[key] = tape.gradient(value, v)
    return grads


def _embedding_grads(hvd, tf, keras, emb, rank):
    ids = tf.constant([1, 2, 2] if rank == 0 else [2, 5])
    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_sum(emb(ids) * float(rank + 1))
    sparse = hvd.DistributedGradientTape(tape).gradient(loss, [emb.embeddings])[0]
    dense = hvd.DistributedGradientTape(tape, sparse_as_dense=True).gradient(loss, [emb.embeddings])[0]
    return sparse, dense


def _errors(hvd, tf, rank):
    from horovod_spark.exceptions import HorovodCollectiveError
    found = {}
    for label, bad in [("dict", {"a": 1}), ("none", None), ("string", "text"), ("object", object())]:
        try:
            hvd.allreduce(bad)
            found[label] = None
        except TypeError as exc:
            found[label] = str(exc)
    try:
        hvd.allreduce(tf.ones([2 + rank]), name="mismatched")
        found["shapes"] = None
    except HorovodCollectiveError as exc:
        found["shapes"] = str(exc)
    found["after_error"] = hvd.allreduce(tf.ones([2]), op=hvd.Sum).numpy()

    @tf.function
    def mismatched_in_graph(t):
        return hvd.allreduce(t, name="mismatched_graph")

    try:
        mismatched_in_graph(tf.ones([3 + rank]))
        found["graph_shapes"] = None
    except Exception as exc:
        found["graph_shapes"] = (type(exc).__name__, str(exc))
    return found


def _to_numpy(tf, value):
    if isinstance(value, (list, tuple)):
        return [_to_numpy(tf, v) for v in value]
    if isinstance(value, tf.IndexedSlices):
        return ("IndexedSlices", tf.convert_to_tensor(value).numpy())
    return value.numpy()


def _rank_main():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    import horovod_spark.tensorflow as hvd

    hvd.init()
    rank = hvd.rank()
    results = {"size": hvd.size(), "collectives": {}, "gradients": {}, "embedding": {}}
    for mode in MODES:
        run = (lambda f, *a: f(*a)) if mode == "eager" else (lambda f, *a: tf.function(f)(*a))
        for dtype in DTYPES:
            x = tf.constant(_data(rank, dtype))
            got = run(lambda t: _collectives(hvd, tf, t, rank), x)
            results["collectives"][mode, dtype] = {k: _to_numpy(tf, v) for k, v in got.items()}
        v = tf.Variable(_data(rank, "float32"))
        grads = run(lambda: _gradients(hvd, tf, v, rank))
        results["gradients"][mode] = {k: _to_numpy(tf, g) for k, g in grads.items()}

        emb = keras.layers.Embedding(10, 3)
        emb.build((None,))
        sparse, dense = run(lambda: _embedding_grads(hvd, tf, keras, emb, rank))
        results["embedding"][mode] = {"sparse_type": type(sparse).__name__, "sparse": _to_numpy(tf, sparse)[1],
                                      "dense_type": type(dense).__name__, "dense": _to_numpy(tf, dense)}

    var = tf.Variable(_data(rank, "float32"))
    hvd.broadcast_variables([var], root_rank=0)
    results["broadcast_variables"] = var.numpy()
    results["broadcast_object"] = hvd.broadcast_object({"from": rank}, root_rank=1)
    results["allgather_object"] = hvd.allgather_object(("rank", rank))
    # In a process set a root is still named by its global rank, as in Horovod.
    second = hvd.add_process_set([1])
    if rank == 1:
        results["set_broadcast"] = hvd.broadcast(tf.constant([7.0]), root_rank=1, process_set=second).numpy()
        results["set_object"] = hvd.broadcast_object("mine", root_rank=1, process_set=second)
        try:
            hvd.broadcast(tf.constant([7.0]), root_rank=0, process_set=second)
            results["set_bad_root"] = "no error"
        except ValueError as exc:
            results["set_bad_root"] = str(exc)
    hvd.remove_process_set(second)
    hvd.barrier()
    results["join"] = int(hvd.join())
    results["errors"] = _errors(hvd, tf, rank)
    return results


def _single_rank_main():
    """Size 1: collectives are identities, computed without the core unless forced through it."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    import horovod_spark.tensorflow as hvd
    from horovod_spark.tensorflow import _primitives

    hvd.init()
    x = tf.constant(_data(0, "float32"))
    results = {}
    for skip in (True, False):
        _primitives.SKIP_SINGLE_RANK = skip
        for mode in MODES:
            def ops(t):
                return {"average": hvd.allreduce(t), "scaled": hvd.allreduce(t, op=hvd.Sum, prescale_factor=2.0),
                        "allgather": hvd.allgather(t), "broadcast": hvd.broadcast(t, 0),
                        "alltoall": hvd.alltoall(t, splits=[3]), "reducescatter": hvd.reducescatter(t)}
            got = ops(x) if mode == "eager" else tf.function(ops)(x)
            results[skip, mode] = {k: _to_numpy(tf, v) for k, v in got.items()}
    return results


def test_single_rank_collectives_are_identities():
    x = _data(0, "float32")
    expected = {"average": x, "scaled": 2 * x, "allgather": x, "broadcast": x,
                "alltoall": [x, np.array([3], np.int32)], "reducescatter": x}
    results = run_local(_single_rank_main, num_proc=1, timeout=120)[0]
    for (skip, mode), got in results.items():
        for key, want in expected.items():
            _assert_same(got[key], want, "size 1, skip=%s, %s, %s" % (skip, mode, key))


@pytest.fixture(scope="module")
def ranks():
    return run_local(_rank_main, num_proc=SIZE, timeout=200)


# -- references ----------------------------------------------------------------------------------

def _expected_collectives(rank, dtype):
    xs = [_data(r, dtype) for r in range(SIZE)]
    total = xs[0] + xs[1]
    exp = {
        "sum": total,
        "scalar": total[0, 0],
        "min": np.minimum(xs[0], xs[1]),
        "max": np.maximum(xs[0], xs[1]),
        "product": xs[0] * xs[1],
        "grouped": [total, 2 * total],
        "allgather": np.concatenate([xs[0][:1], xs[1][:2]]),
        "grouped_allgather": [np.concatenate([xs[0][:1], xs[1][:2]]), np.concatenate([xs[0][:1], xs[1][:1]])],
        "broadcast": xs[1],
        "reducescatter": total[:2] if rank == 0 else total[2:],
    }
    starts = {r: np.cumsum([0] + SPLITS[r]) for r in range(SIZE)}
    exp["alltoall"] = [np.concatenate([xs[src][starts[src][rank]:starts[src][rank + 1]] for src in range(SIZE)]),
                       np.array([SPLITS[src][rank] for src in range(SIZE)], dtype=np.int32)]
    exp["alltoall_even"] = np.concatenate([xs[0][rank:rank + 1], xs[1][rank:rank + 1]])
    if dtype.startswith("float"):
        exp["average"] = total / 2
        exp["scaled"] = total * 0.5 * 3.0
        exp["fp16"] = total
    return exp


def _assert_same(got, want, what):
    if isinstance(want, list):
        assert len(got) == len(want), what
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_same(g, w, "%s[%d]" % (what, i))
        return
    assert got.dtype == want.dtype, "%s: dtype %s, expected %s" % (what, got.dtype, want.dtype)
    assert np.shape(got) == np.shape(want), "%s: shape %s, expected %s" % (what, np.shape(got), np.shape(want))
    np.testing.assert_array_equal(got, want, err_msg=what)


# -- tests ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_collectives_match_numpy(ranks, mode, dtype):
    for rank, result in enumerate(ranks):
        got = result["collectives"][mode, dtype]
        want = _expected_collectives(rank, dtype)
        assert set(got) == set(want)
        for key in want:
            _assert_same(got[key], want[key], "rank %d %s %s %s" % (rank, mode, dtype, key))


@pytest.mark.parametrize("mode", MODES)
def test_gradients(ranks, mode):
    ones = np.ones((3, 4), np.float32)
    weights = np.array([1.0, 2.0], np.float32)  # rank r weighs its loss by r + 1
    for rank, result in enumerate(ranks):
        g = result["gradients"][mode]
        np.testing.assert_allclose(g["allreduce_sum"], ones * weights.sum())
        np.testing.assert_allclose(g["allreduce_average"], ones * weights.mean())
        # Horovod's conventions (horovod.tensorflow 0.28): allgather and broadcast average the
        # upstream gradients; reducescatter with Sum gathers them times the size.
        np.testing.assert_allclose(g["allgather"], ones * weights.mean())
        np.testing.assert_allclose(g["broadcast"], ones * (weights.mean() if rank == 0 else 0.0))
        # reducescatter: rows 0-1 land on rank 0 (weight 1), row 2 on rank 1 (weight 2); times size 2
        np.testing.assert_allclose(g["reducescatter"], ones * np.array([[2.0], [2.0], [4.0]], np.float32))
        # alltoall: a row's gradient is the weight of the rank it was sent to
        dest = np.repeat([0, 1], SPLITS[rank])
        np.testing.assert_allclose(g["alltoall"], ones * weights[dest][:, None])


@pytest.mark.parametrize("mode", MODES)
def test_embedding_gradients_sparse_and_dense(ranks, mode):
    # rank 0 looks up ids [1, 2, 2] with weight 1, rank 1 ids [2, 5] with weight 2; average of both
    expected = np.zeros((10, 3), np.float32)
    expected[1] = 0.5
    expected[2] = (2 * 1 + 1 * 2) / 2
    expected[5] = 1.0
    for result in ranks:
        e = result["embedding"][mode]
        assert e["sparse_type"] == "IndexedSlices"
        assert e["dense_type"] in ("EagerTensor", "Tensor")
        np.testing.assert_allclose(e["sparse"], expected)
        np.testing.assert_allclose(e["dense"], expected)


def test_variables_and_objects(ranks):
    for result in ranks:
        assert result["size"] == SIZE
        np.testing.assert_array_equal(result["broadcast_variables"], _data(0, "float32"))
        assert result["broadcast_object"] == {"from": 1}
        assert result["allgather_object"] == [("rank", 0), ("rank", 1)]
        assert result["join"] in (0, 1)
    np.testing.assert_array_equal(ranks[1]["set_broadcast"], [7.0])
    assert ranks[1]["set_object"] == "mine"
    assert "not a member of the process set [1]" in ranks[1]["set_bad_root"]


def test_bad_inputs_raise_clear_errors(ranks):
    for result in ranks:
        errors = result["errors"]
        for label in ("dict", "none", "string", "object"):
            assert errors[label] is not None, "allreduce(%s) did not raise TypeError" % label
            assert "allreduce" in errors[label]
        assert errors["string"] and "dtype" in errors["string"]
        assert errors["shapes"] is not None, "mismatched shapes did not raise"
        assert "mismatched" in errors["shapes"] and "shape" in errors["shapes"].lower()
        np.testing.assert_array_equal(errors["after_error"], [2.0, 2.0])
        kind, message = errors["graph_shapes"]
        assert kind == "InvalidArgumentError" and "mismatched_graph" in message
