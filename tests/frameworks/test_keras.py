"""horovod_spark.keras on 2 real ranks: DistributedOptimizer and DistributedGradientTape training
equals one process training on the concatenated batches; each callback's observable effect;
load_model round trip.

TensorFlow takes seconds to import, so one run_local call does all the work and the tests below
check its per-rank results.
"""
import os

import numpy as np
import pytest

from horovod_spark.launcher import run_local

pytestmark = pytest.mark.timeout(240)

SIZE = 2
BATCH = 8           # per rank
STEPS = 8           # local batches per epoch
LR = 0.05
RTOL, ATOL = 1e-5, 1e-6


def _dataset():
    """The global data set, identical on every rank. Local batch k of rank r is rows
    [(k * SIZE + r) * BATCH, ... + BATCH), so global batch k is local batch k of rank 0 then 1."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(STEPS * SIZE * BATCH, 4)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.1).astype("float32")
    return x, y


def _shard(a, rank):
    return a.reshape(STEPS, SIZE, BATCH, -1)[:, rank].reshape(STEPS * BATCH, -1)


# -- run on every rank ---------------------------------------------------------------------------

def _model(keras, seed):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)])
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(scale=0.5, size=w.shape).astype("float32") for w in model.get_weights()])
    return model


def _weights(model):
    return [w.copy() for w in model.get_weights()]


def _fit(hvd, keras, seed, x, y, batch, epochs=2, distributed=True, callbacks=(), optimizer=None,
         run_eagerly=False, **kwargs):
    model = _model(keras, seed)
    opt = optimizer or keras.optimizers.SGD(LR)
    model.compile(hvd.DistributedOptimizer(opt, **kwargs) if distributed else opt, "mse", run_eagerly=run_eagerly)
    history = model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0, callbacks=list(callbacks))
    return model, history


def _check_fit(hvd, keras, rank):
    x, y = _dataset()
    xr, yr = _shard(x, rank), _shard(y, rank)
    out = {}
    out["fit"] = _weights(_fit(hvd, keras, 1, xr, yr, BATCH)[0])
    out["fit_reference"] = _weights(_fit(hvd, keras, 1, x, y, SIZE * BATCH, distributed=False)[0])
    out["fit_eager"] = _weights(_fit(hvd, keras, 1, xr, yr, BATCH, run_eagerly=True)[0])
    # backward_passes_per_step=2: two local batches summed (then halved), one update per two steps
    out["accumulated"] = _weights(_fit(hvd, keras, 1, xr, yr, BATCH, backward_passes_per_step=2,
                                       average_aggregated_gradients=True)[0])
    out["accumulated_reference"] = _weights(_fit(hvd, keras, 1, x, y, 2 * SIZE * BATCH, distributed=False)[0])
    return out


def _check_tape(hvd, keras, tf, rank):
    import horovod_spark.tensorflow as hvd_tf  # DistributedGradientTape lives there, as in Horovod

    x, y = _dataset()
    xr, yr = _shard(x, rank), _shard(y, rank)
    mse = keras.losses.MeanSquaredError()

    def train(xs, ys, batch, distributed, compiled, wrap_inside=False):
        model = _model(keras, 2)
        opt = keras.optimizers.SGD(LR)

        def step(bx, by):
            with tf.GradientTape() as tape:
                loss = mse(by, model(bx, training=True))
                if wrap_inside:  # wrapped while the user's tape still records (it crashed once)
                    tape = hvd_tf.DistributedGradientTape(tape)
            if distributed and not wrap_inside:
                tape = hvd_tf.DistributedGradientTape(tape)
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))

        step = tf.function(step) if compiled else step
        for k in range(len(xs) // batch):
            step(tf.constant(xs[k * batch:(k + 1) * batch]), tf.constant(ys[k * batch:(k + 1) * batch]))
        return _weights(model)

    return {"tape_eager": train(xr, yr, BATCH, True, False), "tape_function": train(xr, yr, BATCH, True, True),
            "tape_wrapped_inside_eager": train(xr, yr, BATCH, True, False, wrap_inside=True),
            "tape_wrapped_inside_function": train(xr, yr, BATCH, True, True, wrap_inside=True),
            "tape_reference": train(x, y, SIZE * BATCH, False, False)}


def _check_broadcast(hvd, keras, rank):
    x, y = _dataset()
    cb = hvd.callbacks.BroadcastGlobalVariablesCallback(0)
    model, _ = _fit(hvd, keras, 100 + rank, _shard(x, rank), _shard(y, rank), BATCH, epochs=1, callbacks=[cb])
    reference, _ = _fit(hvd, keras, 100, x, y, SIZE * BATCH, epochs=1, distributed=False)  # from rank 0's init
    return {"broadcast": _weights(model), "broadcast_reference": _weights(reference)}


def _check_metric_average(hvd, keras, rank):
    x, y = _dataset()

    class Capture(keras.callbacks.Callback):
        raw = []

        def on_epoch_end(self, epoch, logs=None):
            self.raw.append(dict(logs))

    xr, yr = _shard(x, rank), _shard(y, rank)
    _, history = _fit(hvd, keras, 3, xr, yr, BATCH, callbacks=[Capture(), hvd.callbacks.MetricAverageCallback()])
    return {"metric_raw": [d["loss"] for d in Capture.raw], "metric_logged": list(history.history["loss"])}


def _check_lr_callbacks(hvd, keras, rank):
    x, y = _dataset()
    xr, yr = _shard(x, rank), _shard(y, rank)
    seen = []

    class BatchLR(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            seen.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))

    warmup = hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.1, warmup_epochs=2)
    _, warm = _fit(hvd, keras, 4, xr, yr, BATCH, epochs=3, callbacks=[warmup, BatchLR()],
                   optimizer=keras.optimizers.SGD(0.1))

    momentum_ratio = []

    class Momentum(keras.callbacks.Callback):
        before = None

        def on_epoch_end(self, epoch, logs=None):
            self.before = [keras.ops.convert_to_numpy(m).copy() for m in self.model.optimizer.momentums]

        def on_train_batch_begin(self, batch, logs=None):
            if batch == 0 and self.before is not None and not momentum_ratio:
                after = [keras.ops.convert_to_numpy(m) for m in self.model.optimizer.momentums]
                momentum_ratio.append(float(np.mean([np.mean(a / b) for a, b in zip(after, self.before)])))

    schedule = hvd.callbacks.LearningRateScheduleCallback(initial_lr=0.1, multiplier=lambda e: 0.5 ** e,
                                                         start_epoch=1, end_epoch=3)
    _, sched = _fit(hvd, keras, 4, xr, yr, BATCH, epochs=4, callbacks=[schedule, Momentum()],
                    optimizer=keras.optimizers.SGD(0.1, momentum=0.9))
    return {"warmup_epoch_lr": list(warm.history["lr"]), "warmup_batch_lr": seen,
            "schedule_epoch_lr": list(sched.history["lr"]), "momentum_ratio": momentum_ratio}


def _check_checkpoint(hvd, keras, rank, directory):
    x, y = _dataset()
    forced = [3.0, 2.0, 2.5, 1.0]  # improves at epochs 1, 2 and 4 (1-based)

    class ForceLoss(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            logs["loss"] = forced[epoch]

    path = os.path.join(directory, "rank%d-{epoch:02d}.keras" % rank)
    ckpt = hvd.callbacks.BestModelCheckpoint(monitor="loss", mode="min", filepath=path)
    _fit(hvd, keras, 5, _shard(x, rank), _shard(y, rank), BATCH, epochs=4, callbacks=[ForceLoss(), ckpt])
    hvd.barrier()
    return {"checkpoints": sorted(f for f in os.listdir(directory) if f.startswith("rank%d-" % rank))}


def _check_load_model(hvd, keras, rank, directory):
    from horovod_spark.tensorflow.keras_optimizer import is_distributed
    x, y = _dataset()
    xr, yr = _shard(x, rank), _shard(y, rank)
    path = os.path.join(directory, "model.keras")
    model, _ = _fit(hvd, keras, 6, xr, yr, BATCH, epochs=1, optimizer=keras.optimizers.SGD(LR, momentum=0.9))
    if rank == 0:
        model.save(path)
    hvd.barrier()
    loaded = hvd.load_model(path)
    opt = loaded.optimizer
    out = {
        "load_distributed": is_distributed(opt),
        "load_is_sgd": isinstance(opt, keras.optimizers.SGD),
        "load_iterations": int(keras.ops.convert_to_numpy(opt.iterations)),
        "load_weights": _weights(loaded),
        "saved_weights": _weights(model),
        "load_momentums": [keras.ops.convert_to_numpy(m).copy() for m in opt.momentums],
        "saved_momentums": [keras.ops.convert_to_numpy(m).copy() for m in model.optimizer.momentums],
        "plain_load_distributed": is_distributed(keras.models.load_model(path).optimizer),
    }
    loaded.fit(xr, yr, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    out["load_continued"] = _weights(loaded)
    return out


def _check_horovod_parity(hvd, keras, tf, rank):
    """Behaviours a script ported from horovod.tensorflow.keras 0.28 relies on."""
    x, y = _dataset()
    xr, yr = _shard(x, rank), _shard(y, rank)
    out = {}
    # A constant multiplier is exponential decay from start_epoch.
    schedule = hvd.callbacks.LearningRateScheduleCallback(initial_lr=0.1, multiplier=0.5, start_epoch=1)
    _, hist = _fit(hvd, keras, 4, xr, yr, BATCH, epochs=4, callbacks=[schedule], optimizer=keras.optimizers.SGD(0.1))
    out["constant_multiplier_lr"] = list(hist.history["lr"])
    # backward_passes_per_step: iterations counts every batch.
    model, _ = _fit(hvd, keras, 4, xr, yr, BATCH, epochs=1, backward_passes_per_step=2)
    out["bpps_iterations"] = int(keras.ops.convert_to_numpy(model.optimizer.iterations))
    # Allreduce names do not depend on Keras' per-process optimizer names (rank 1 makes one more).
    if rank == 1:
        keras.optimizers.SGD(LR)
    model, _ = _fit(hvd, keras, 9, xr, yr, BATCH, epochs=1)
    out["extra_optimizer_fit"] = _weights(model)
    # PartialDistributedOptimizer: the local layer keeps rank-local weights, the rest agree.
    model = _model(keras, 10)
    model.compile(hvd.PartialDistributedOptimizer(keras.optimizers.SGD(LR), local_layers=[model.layers[1]]), "mse")
    model.fit(xr, yr, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    out["partial_weights"] = _weights(model)
    # The broadcast leaves local variables and Keras seed-generator state alone.
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dropout(0.5, seed=rank),
                              keras.layers.Dense(1)])
    model.compile(hvd.DistributedOptimizer(keras.optimizers.SGD(LR)), "mse")
    local = model.layers[2].kernel
    cb = hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[local])
    model.fit(xr, yr, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[cb])
    seeds = [v for v in model.variables if "seed_generator_state" in v.name]
    out["seed_states"] = [keras.ops.convert_to_numpy(v).copy() for v in seeds]
    out["local_kernel"] = keras.ops.convert_to_numpy(local).copy()
    out["shared_kernel"] = keras.ops.convert_to_numpy(model.layers[0].kernel).copy()
    # Mixed precision: rank 1's first batch overflows float16, rank 0's does not. The loss scale
    # must see the averaged gradients, or the ranks would skip different steps and stop matching.
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        ys = yr * 1e-3  # small gradients: finite in float16 even times the loss scale (2**15)...
        if rank == 1:
            ys[:BATCH] *= 1e7  # ...except rank 1's first batch
        model = _model(keras, 11)
        model.compile(hvd.DistributedOptimizer(keras.optimizers.SGD(LR)), "mse")
        model.fit(xr, ys, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        out["mixed_is_loss_scale"] = isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
        out["mixed_scale"] = float(keras.ops.convert_to_numpy(model.optimizer.dynamic_scale))
        out["mixed_weights"] = _weights(model)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    # Signatures: BestModelCheckpoint(monitor, verbose, save_weights_only, mode); load_model(legacy_opts=).
    ckpt = hvd.callbacks.BestModelCheckpoint("loss", 0, True, "min")
    out["ckpt_weights_only"] = (ckpt.save_weights_only, ckpt.mode if hasattr(ckpt, "mode") else "min")
    try:
        hvd.load_model("unused.keras", legacy_opts=True)
        out["legacy_opts"] = "no error"
    except ValueError as exc:
        out["legacy_opts"] = str(exc)
    return out


def _rank_main(directory):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf

    import horovod_spark.keras as hvd

    hvd.init()
    rank = hvd.rank()
    results = {}
    results.update(_check_fit(hvd, keras, rank))
    results.update(_check_tape(hvd, keras, tf, rank))
    results.update(_check_broadcast(hvd, keras, rank))
    results.update(_check_metric_average(hvd, keras, rank))
    results.update(_check_lr_callbacks(hvd, keras, rank))
    results.update(_check_checkpoint(hvd, keras, rank, directory))
    results.update(_check_load_model(hvd, keras, rank, directory))
    results.update(_check_horovod_parity(hvd, keras, tf, rank))
    return results


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return run_local(_rank_main, args=(str(tmp_path_factory.mktemp("keras")),), num_proc=SIZE, timeout=220)


# -- tests ---------------------------------------------------------------------------------------

def _assert_weights_close(got, want, what):
    assert len(got) == len(want), what
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL, err_msg=what)


def _assert_identical_across_ranks(ranks, key):
    for g, w in zip(ranks[0][key], ranks[1][key]):
        np.testing.assert_array_equal(g, w, err_msg="%s differs between ranks" % key)


@pytest.mark.parametrize("key, reference", [("fit", "fit_reference"), ("fit_eager", "fit_reference"),
                                            ("accumulated", "accumulated_reference")])
def test_fit_matches_single_process_on_concatenated_batches(ranks, key, reference):
    _assert_identical_across_ranks(ranks, key)
    _assert_weights_close(ranks[0][key], ranks[0][reference], key)
    # and training did move the weights (the comparison above is not between two initial states)
    start = [np.random.default_rng(1).normal(scale=0.5, size=w.shape) for w in ranks[0][key]]
    assert any(not np.allclose(a, b, atol=1e-3) for a, b in zip(ranks[0][key], start))


@pytest.mark.parametrize("key", ["tape_eager", "tape_function", "tape_wrapped_inside_eager",
                                 "tape_wrapped_inside_function"])
def test_gradient_tape_loop_matches_single_process(ranks, key):
    _assert_identical_across_ranks(ranks, key)
    _assert_weights_close(ranks[0][key], ranks[0]["tape_reference"], key)


def test_broadcast_callback_starts_ranks_from_root_weights(ranks):
    _assert_identical_across_ranks(ranks, "broadcast")
    # equal to training from rank 0's initialisation: the broadcast happened before the first step
    _assert_weights_close(ranks[1]["broadcast"], ranks[1]["broadcast_reference"], "broadcast")


def test_metric_average_callback_logs_the_mean_over_ranks(ranks):
    raw = np.array([r["metric_raw"] for r in ranks])
    assert not np.allclose(raw[0], raw[1]), "ranks' own losses should differ (different data)"
    for r in ranks:
        np.testing.assert_allclose(r["metric_logged"], raw.mean(axis=0), rtol=1e-6)


def test_warmup_callback_sets_expected_learning_rates(ranks):
    for r in ranks:
        np.testing.assert_allclose(r["warmup_epoch_lr"], [0.075, 0.1, 0.1], rtol=1e-6)
        # batch-level ramp during warmup: lr = 0.1 / size * (e * (size - 1) / 2 + 1), e = epoch + (b + 1) / steps
        e = np.arange(2 * STEPS) / STEPS + 1.0 / STEPS
        expected = 0.1 / SIZE * (e * (SIZE - 1) / 2 + 1)
        np.testing.assert_allclose(r["warmup_batch_lr"][:2 * STEPS], expected, rtol=1e-6)
        np.testing.assert_allclose(r["warmup_batch_lr"][2 * STEPS:], 0.1, rtol=1e-6)


def test_schedule_callback_sets_expected_learning_rates(ranks):
    for r in ranks:
        np.testing.assert_allclose(r["schedule_epoch_lr"], [0.1, 0.05, 0.025, 0.025], rtol=1e-6)
        # momentum correction: SGD's momentum buffers scaled by new_lr / old_lr when the rate dropped
        np.testing.assert_allclose(r["momentum_ratio"], [0.5], rtol=1e-5)


def test_best_model_checkpoint_writes_on_rank0_on_improvement_only(ranks):
    assert ranks[0]["checkpoints"] == ["rank0-01.keras", "rank0-02.keras", "rank0-04.keras"]
    assert ranks[1]["checkpoints"] == []


def test_load_model_round_trip(ranks):
    for r in ranks:
        assert r["load_distributed"] and r["load_is_sgd"]
        assert r["load_iterations"] == STEPS
        assert not r["plain_load_distributed"]  # the file loads with Keras alone too, as the plain SGD
        _assert_weights_close(r["load_weights"], ranks[0]["saved_weights"], "loaded weights")
        for a, b in zip(r["load_momentums"], ranks[0]["saved_momentums"]):
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL)
    _assert_identical_across_ranks(ranks, "load_continued")


def test_horovod_parity(ranks):
    for result in ranks:
        np.testing.assert_allclose(result["constant_multiplier_lr"], [0.1, 0.1, 0.05, 0.025], rtol=1e-6)
        assert result["bpps_iterations"] == STEPS
        assert result["ckpt_weights_only"][0] is True
        assert "no legacy optimizers" in result["legacy_opts"]
        assert result["mixed_is_loss_scale"]
    _assert_identical_across_ranks(ranks, "extra_optimizer_fit")
    # Partial: the second Dense (kernel, bias) is local, the first is averaged.
    p0, p1 = ranks[0]["partial_weights"], ranks[1]["partial_weights"]
    assert not np.allclose(p0[2], p1[2]) and not np.allclose(p0[3], p1[3])
    np.testing.assert_array_equal(p0[0], p1[0])
    np.testing.assert_array_equal(p0[1], p1[1])
    np.testing.assert_array_equal(ranks[0]["shared_kernel"], ranks[1]["shared_kernel"])
    assert not np.allclose(ranks[0]["local_kernel"], ranks[1]["local_kernel"])
    assert ranks[0]["seed_states"] and not all(
        np.array_equal(a, b) for a, b in zip(ranks[0]["seed_states"], ranks[1]["seed_states"]))
    # Both ranks skipped the overflowing first step (the scale halved once) and stayed identical.
    assert ranks[0]["mixed_scale"] == ranks[1]["mixed_scale"] < 32768.0
    _assert_identical_across_ranks(ranks, "mixed_weights")
