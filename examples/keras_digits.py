"""Train a small Keras 3 MLP on scikit-learn's bundled digits data set with horovod_spark.keras.

    horovod-spark-run -np 2 python examples/keras_digits.py

Each rank fits on its own shard of the training set; DistributedOptimizer averages gradients so
every rank holds the same model. Rank 0 prints the test accuracy (>= 0.9 expected).
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import horovod_spark.keras as hvd  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--checkpoint", default=None, help="path ending in .keras: best model, written by rank 0")
    args = parser.parse_args()

    hvd.init()
    keras.utils.set_random_seed(1234 + hvd.rank())  # different initialisations: the broadcast fixes that
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    # Equal-sized disjoint shards: every rank must run the same number of steps per epoch.
    per_rank = len(x_train) // hvd.size()
    lo, hi = hvd.rank() * per_rank, (hvd.rank() + 1) * per_rank
    x_shard, y_shard = x_train[lo:hi], y_train[lo:hi]

    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    # Scale the learning rate by the number of ranks (the global batch grows with it), as Horovod does.
    lr = args.lr * hvd.size()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(lr, momentum=0.9))
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])

    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=lr, warmup_epochs=2, verbose=1 if hvd.rank() == 0 else 0),
    ]
    if args.checkpoint:
        callbacks.append(hvd.callbacks.BestModelCheckpoint(monitor="val_loss", filepath=args.checkpoint))
    model.fit(x_shard, y_shard, batch_size=args.batch_size, epochs=args.epochs, callbacks=callbacks,
              validation_data=(x_test, y_test), verbose=2 if hvd.rank() == 0 else 0)

    _, accuracy = model.evaluate(x_test, y_test, verbose=0)
    if hvd.rank() == 0:
        print("test accuracy: %.4f" % accuracy)


if __name__ == "__main__":
    main()
