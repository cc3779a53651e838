"""Fit a KerasEstimator on scikit-learn's bundled digits as a Spark DataFrame, then predict.

    python examples/keras_estimator_digits.py [--data-module petastorm]   # petastorm: older stack only

A local[2] SparkSession; the 8x8 images become a DenseVector "features" column; a held-out
quarter is kept for testing. Two ranks train a compiled Keras model (validation split 10%, the
best epoch by val_loss kept by a BestModelCheckpoint), the driver prints a line per epoch, and
the fitted KerasModel's transform() labels the test rows (exits non-zero below 0.9 accuracy).
"""
import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
from pyspark.ml.functions import vector_to_array  # noqa: E402
from pyspark.ml.linalg import Vectors  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

from horovod_spark.estimator import KerasEstimator  # noqa: E402
from horovod_spark.keras.callbacks import BestModelCheckpoint  # noqa: E402
from horovod_spark.store import Store  # noqa: E402


def digits_dataframe(spark):
    x, y = load_digits(return_X_y=True)
    rows = [(Vectors.dense((xi / 16.0).tolist()), int(yi)) for xi, yi in zip(x, y)]
    return spark.createDataFrame(rows, ["features", "label"])


def digits_model(lr: float):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer=keras.optimizers.SGD(lr, momentum=0.9), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--data-module", default="arrow", choices=["arrow", "petastorm"])
    parser.add_argument("--store", default=None, help="store path (default: a temporary directory)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    spark = (SparkSession.builder.master("local[%d]" % args.num_proc).appName("keras_estimator_digits")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    started = time.monotonic()
    try:
        df = digits_dataframe(spark)
        train_df, test_df = df.randomSplit([0.75, 0.25], seed=0)
        # Scale the learning rate by the number of ranks, as Horovod recommends.
        model = digits_model(args.lr * args.num_proc)
        store = Store.create(args.store or tempfile.mkdtemp(prefix="hs-keras-digits-store-"))
        estimator = KerasEstimator(
            num_proc=args.num_proc, model=model, feature_cols=["features"], label_cols=["label"], validation=0.1,
            batch_size=args.batch_size, epochs=args.epochs, random_seed=0, store=store,
            data_module=args.data_module, checkpoint_callback=BestModelCheckpoint(monitor="val_loss"))
        fitted = estimator.fit(train_df)

        print("history (per epoch):")
        for name, values in fitted.getHistory().items():
            print("  %-13s %s" % (name, " ".join("%.4f" % v for v in values)))

        # The output column is a vector of class scores (one per digit).
        predicted = fitted.transform(test_df).withColumn("scores", vector_to_array("label__output")).withColumn(
            "prediction", F.expr("array_position(scores, array_max(scores)) - 1"))
        row = predicted.select(F.avg((F.col("prediction") == F.col("label")).cast("double")).alias("acc"),
                               F.count(F.lit(1)).alias("n")).first()
        print("test accuracy: %.4f on %d held-out rows (%d ranks, %s reader, %.0f s)"
              % (row["acc"], row["n"], args.num_proc, args.data_module, time.monotonic() - started))
        return 0 if row["acc"] >= 0.9 else 1
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
