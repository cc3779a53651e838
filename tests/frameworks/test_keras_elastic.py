"""hvd.elastic for Keras: a model.fit driven by the elastic callbacks survives a rank SIGKILLed in
the middle of an epoch: the survivor rolls back to its last commit, runs that epoch again and
finishes the planned epochs with a trained model."""

from horovod_spark.launcher.elastic_job import run_elastic_local

EPOCHS = 6


def _fit(victim_worker):
    import os
    import signal

    import keras
    import numpy as np

    import horovod_spark.keras as hvd
    from horovod_spark.common import config

    hvd.init()
    doomed = config.ELASTIC_WORKER.get() == victim_worker
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32") + 0.25).astype("float32")

    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    optimizer = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9))
    model.compile(optimizer=optimizer, loss="mse")
    optimizer.build(model.trainable_variables)  # so the state tracks the optimizer's variables from the start
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    seen = {"resets": 0, "batches": 0}
    state.register_reset_callbacks([lambda: seen.__setitem__("resets", seen["resets"] + 1)])

    class Killer(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen["batches"] += 1
            if doomed and state.epoch == 2 and batch == 3:
                os.kill(os.getpid(), signal.SIGKILL)

    callbacks = [hvd.elastic.CommitStateCallback(state, batches_per_commit=2),
                 hvd.elastic.UpdateBatchStateCallback(state), hvd.elastic.UpdateEpochStateCallback(state),
                 Killer()]

    @hvd.elastic.run
    def train(state):
        state.model.fit(x, y, batch_size=32, epochs=EPOCHS - state.epoch, callbacks=callbacks, verbose=0,
                        shuffle=False)
        return {"epoch": state.epoch, "resets": seen["resets"], "size": hvd.size(),
                "loss": float(state.model.evaluate(x, y, verbose=0)),
                "iterations": int(optimizer.iterations.numpy())}

    return train(state)


def _reference_loss():
    """The loss of the same fit, undisturbed, on one process without horovod_spark: every rank
    computes the same gradients, so their average and the model do not depend on the ranks."""
    import keras
    import numpy as np
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32") + 0.25).astype("float32")
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="mse")
    model.fit(x, y, batch_size=32, epochs=EPOCHS, verbose=0, shuffle=False)
    return float(model.evaluate(x, y, verbose=0))


def test_keras_fit_survives_a_sigkilled_rank():
    results = run_elastic_local(_fit, args=(1,), num_proc=2, min_num_proc=1, timeout=280)
    assert len(results) == 1, results
    result = results[0]
    assert result["epoch"] == EPOCHS and result["resets"] == 1 and result["size"] == 1, result
    # Rolled back to the commit after batch 3 of epoch 2 and ran that epoch again: Keras 3 reads an
    # epoch's length once per fit, so UpdateBatchStateCallback cannot shorten the resumed epoch and
    # its first batches run twice (never more than one epoch's worth; none skipped).
    steps = EPOCHS * 8
    assert steps < result["iterations"] <= steps + 8, result
    assert result["loss"] < 2 * _reference_loss(), result
