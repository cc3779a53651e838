"""hvd.SyncBatchNormalization (TensorFlow / Keras) on 2 real ranks with batches of different sizes:
training-mode outputs, moving statistics and input gradients equal plain BatchNormalization's on the
concatenated batch, eagerly and in tf.function; inference uses the moving statistics; a Keras model
with the layer trains under DistributedOptimizer.

TensorFlow takes seconds to import, so one run_local call does all the work.
"""
import os

import numpy as np
import pytest

from horovod_spark.launcher import run_local

pytestmark = pytest.mark.timeout(240)

SIZE = 2
ROWS = [3, 5]  # per-rank batch sizes, unequal on purpose
SHAPE = (2, 2, 3)  # per-row shape, channels last


def _batch(rank, rows, seed=0):
    rng = np.random.default_rng(100 * seed + rank)
    x = (rng.normal(size=(rows,) + SHAPE) * (rank + 1) + 3.0 * rank).astype("float32")
    w = rng.normal(size=(rows,) + SHAPE).astype("float32")
    return x, w


def _layers(keras, hvd):
    """The synchronized layer and the single-process reference, with the same weights."""
    sync = hvd.SyncBatchNormalization(momentum=0.7)
    plain = keras.layers.BatchNormalization(momentum=0.7)
    for layer in (sync, plain):
        layer.build((None,) + SHAPE)
        layer.gamma.assign([1.0, 2.0, -0.5])
        layer.beta.assign([0.1, 0.0, 0.3])
    return sync, plain


def _step(tf, layer, x, w):
    """Training-mode output of ``layer`` and the gradients of sum(y * w) for x, gamma and beta."""
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        loss = tf.reduce_sum(y * w)
    gx, gg, gb = tape.gradient(loss, [x, layer.gamma, layer.beta])
    return y.numpy(), gx.numpy(), gg.numpy(), gb.numpy()


def _compare(hvd, tf, keras, rank, compiled):
    sync, plain = _layers(keras, hvd)
    found = {}
    start = sum(ROWS[:rank])
    for seed in range(2):  # two steps: the moving statistics are updated twice
        batches = [_batch(r, ROWS[r], seed) for r in range(SIZE)]
        x_all = np.concatenate([b[0] for b in batches])
        w_all = np.concatenate([b[1] for b in batches])
        if compiled:
            y, gx, gg, gb = (v.numpy() for v in _traced_step(tf, sync, *batches[rank]))
        else:
            y, gx, gg, gb = _step(tf, sync, *batches[rank])
        ry, rgx, rgg, rgb = _step(tf, plain, x_all, w_all)
        found["y", seed] = (y, ry[start:start + ROWS[rank]])
        found["grad_x", seed] = (gx, rgx[start:start + ROWS[rank]])
        # gamma/beta gradients are local; their sum over ranks is the whole batch's
        found["grad_gamma", seed] = (hvd.allreduce(gg, op=hvd.Sum).numpy(), rgg)
        found["grad_beta", seed] = (hvd.allreduce(gb, op=hvd.Sum).numpy(), rgb)
    found["moving_mean"] = (sync.moving_mean.numpy(), plain.moving_mean.numpy())
    found["moving_variance"] = (sync.moving_variance.numpy(), plain.moving_variance.numpy())
    x = _batch(rank, ROWS[rank], 5)[0]
    found["inference"] = (sync(x, training=False).numpy(), plain(x, training=False).numpy())
    return found


def _traced_step(tf, layer, x, w):
    """``_step`` inside tf.function, where the collective runs from the graph."""
    @tf.function
    def step(x, w):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=True)
            loss = tf.reduce_sum(y * w)
        gx, gg, gb = tape.gradient(loss, [x, layer.gamma, layer.beta])
        return y, gx, gg, gb
    return step(tf.constant(x), tf.constant(w))


def _fit(hvd, keras, rank):
    """model.fit with the layer under DistributedOptimizer: the loss falls and the moving statistics,
    computed from both ranks' rows, are the same on both ranks."""
    rng = np.random.default_rng(rank)
    x = (rng.normal(size=(64, 4)) * (rank + 1) + rank).astype("float32")
    y = (x.sum(axis=1, keepdims=True) > 2 * rank).astype("float32")
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), hvd.SyncBatchNormalization(),
                              keras.layers.Activation("relu"), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)), "binary_crossentropy")
    history = model.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0,
                        callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    layer = model.layers[1]
    return {"loss": history.history["loss"], "moving_mean": layer.moving_mean.numpy(),
            "moving_variance": layer.moving_variance.numpy(), "config": layer.get_config()}


def _refusals(hvd):
    out = {}
    for kwargs in ({"fused": True}, {"fused": None}, {"synchronized": True}):
        try:
            hvd.SyncBatchNormalization(**kwargs)
            out[str(kwargs)] = None
        except ValueError as exc:
            out[str(kwargs)] = str(exc)
    return out


def _rank_main():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    import horovod_spark.keras as hvd_keras
    import horovod_spark.tensorflow as hvd
    hvd.init()
    rank = hvd.rank()
    assert hvd.SyncBatchNormalization is hvd_keras.SyncBatchNormalization
    return {"eager": _compare(hvd, tf, keras, rank, compiled=False),
            "function": _compare(hvd, tf, keras, rank, compiled=True),
            "fit": _fit(hvd_keras, keras, rank), "refusals": _refusals(hvd)}


@pytest.fixture(scope="module")
def ranks():
    return run_local(_rank_main, num_proc=SIZE, timeout=200)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_training_statistics_are_the_global_batchs(ranks, mode):
    for rank, result in enumerate(ranks):
        for key, (ours, reference) in result[mode].items():
            np.testing.assert_allclose(ours, reference, rtol=1e-4, atol=1e-5, err_msg="rank %d %s" % (rank, key))
    # the moving statistics moved away from their initial values, the same on both ranks
    mean = ranks[0][mode]["moving_mean"][0]
    assert np.abs(mean).max() > 0.1
    np.testing.assert_array_equal(mean, ranks[1][mode]["moving_mean"][0])


def test_a_keras_model_trains_with_it(ranks):
    for result in ranks:
        loss = result["fit"]["loss"]
        assert np.all(np.isfinite(loss)) and loss[-1] < loss[0], loss
        assert result["fit"]["config"]["name"].startswith("sync_batch_normalization")
    for key in ("moving_mean", "moving_variance"):
        np.testing.assert_allclose(ranks[0]["fit"][key], ranks[1]["fit"][key], rtol=1e-6, atol=1e-7)


def test_fused_and_synchronized_are_refused(ranks):
    found = ranks[0]["refusals"]
    assert "fused=True" in found["{'fused': True}"] and "fused=None" in found["{'fused': None}"]
    assert "synchronized=True" in found["{'synchronized': True}"]
