"""Train a small MLP on scikit-learn's bundled digits data set with a custom TensorFlow loop and
horovod_spark.tensorflow's DistributedGradientTape.

    horovod-spark-run -np 2 python examples/tensorflow_digits.py

Each rank trains on its own shard; the tape averages gradients so every rank holds the same
model. The test set is sharded too, and correct predictions are summed with an allreduce.
Rank 0 prints the test accuracy (>= 0.9 expected).
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import horovod_spark.tensorflow as hvd  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    hvd.init()
    tf.random.set_seed(1234 + hvd.rank())
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    per_rank = len(x_train) // hvd.size()  # equal shards: every rank runs the same number of steps
    lo, hi = hvd.rank() * per_rank, (hvd.rank() + 1) * per_rank
    train = (tf.data.Dataset.from_tensor_slices((x_train[lo:hi], y_train[lo:hi]))
             .shuffle(per_rank, seed=hvd.rank()).batch(args.batch_size))

    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    opt = keras.optimizers.SGD(args.lr * hvd.size(), momentum=0.9)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    # Start every rank from rank 0's weights and optimizer state (built first so its slots exist).
    opt.build(model.trainable_variables)
    hvd.broadcast_variables(model.variables + opt.variables, root_rank=0)

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    for epoch in range(args.epochs):
        losses = [train_step(xb, yb) for xb, yb in train]
        mean_loss = hvd.allreduce(tf.reduce_mean(losses), name="epoch_loss")
        if hvd.rank() == 0:
            print("epoch %d: loss %.4f" % (epoch + 1, float(mean_loss)))

    x_part, y_part = x_test[hvd.rank()::hvd.size()], y_test[hvd.rank()::hvd.size()]
    correct = tf.reduce_sum(tf.cast(tf.argmax(model(x_part), axis=1) == y_part, tf.int64))
    totals = hvd.allreduce(tf.stack([correct, tf.constant(len(y_part), tf.int64)]), op=hvd.Sum)
    if hvd.rank() == 0:
        print("test accuracy: %.4f" % (float(totals[0]) / float(totals[1])))


if __name__ == "__main__":
    main()
