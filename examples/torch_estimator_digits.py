"""Fit a TorchEstimator on scikit-learn's bundled digits as a Spark DataFrame, then predict.

    bash scripts/run_main.sh            # or: python examples/torch_estimator_digits.py
    bash scripts/run_main.sh --mlflow-tracking-uri http://127.0.0.1:5000   # the fit tracked in MLflow

A local[2] SparkSession; the 8x8 images become a DenseVector "features" column; a held-out
quarter is kept for testing. Two ranks train (validation split 10%), the driver prints a line
per epoch, and the fitted TorchModel's transform() labels the test rows (accuracy >= 0.9).
With --mlflow-tracking-uri the fit runs inside an MLflow run, which gets its Params, per-epoch
metrics and the fitted model (docs/mlflow.md).
"""
import argparse
import contextlib
import os
import sys
import tempfile
import time

import torch
from pyspark.ml.functions import vector_to_array
from pyspark.ml.linalg import Vectors
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from sklearn.datasets import load_digits

from horovod_spark.estimator import TorchEstimator
from horovod_spark.store import Store


def digits_dataframe(spark):
    x, y = load_digits(return_X_y=True)
    rows = [(Vectors.dense((xi / 16.0).tolist()), int(yi)) for xi, yi in zip(x, y)]
    return spark.createDataFrame(rows, ["features", "label"])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--num-proc", type=int, default=2)
    parser.add_argument("--store", default=None, help="store path (default: a temporary directory)")
    parser.add_argument("--mlflow-tracking-uri", default=None,
                        help="track the fit in this MLflow tracking server (default: no tracking)")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # A local session: Spark need not look for a routable address (and warn that the host name
    # resolves to loopback).
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log_config = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conf", "log4j2.properties")

    spark = (SparkSession.builder.master("local[%d]" % args.num_proc).appName("torch_estimator_digits")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.extraJavaOptions", "-Dlog4j2.configurationFile=" + log_config)
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    started = time.monotonic()
    scratch = tempfile.TemporaryDirectory(prefix="hs-digits-store-")
    try:
        df = digits_dataframe(spark)
        train_df, test_df = df.randomSplit([0.75, 0.25], seed=0)

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
        # Scale the learning rate by the number of ranks, as Horovod recommends.
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * args.num_proc, momentum=0.9)
        store = Store.create(args.store or scratch.name)
        estimator = TorchEstimator(
            num_proc=args.num_proc, model=model, optimizer=optimizer, loss=torch.nn.functional.cross_entropy,
            metrics=["accuracy"], feature_cols=["features"], label_cols=["label"], validation=0.1,
            batch_size=args.batch_size, epochs=args.epochs, random_seed=0, store=store)
        with mlflow_run(args.mlflow_tracking_uri) as run:
            fitted = estimator.fit(train_df)
        if run is not None:
            print("MLflow run %s: model at runs:/%s/model" % (run.info.run_id, run.info.run_id))

        history = fitted.getHistory()
        print("history (per epoch):")
        for name, values in history.items():
            print("  %-13s %s" % (name, " ".join("%.4f" % v for v in values)))

        # The output column is a vector of class scores (one per digit).
        predicted = fitted.transform(test_df).withColumn("scores", vector_to_array("label__output")).withColumn(
            "prediction", F.expr("array_position(scores, array_max(scores)) - 1"))
        row = predicted.select(F.avg((F.col("prediction") == F.col("label")).cast("double")).alias("acc"),
                               F.count(F.lit(1)).alias("n")).first()
        print("test accuracy: %.4f on %d held-out rows (%d ranks, %.0f s)"
              % (row["acc"], row["n"], args.num_proc, time.monotonic() - started))
        return 0 if row["acc"] >= 0.9 else 1
    finally:
        spark.stop()
        scratch.cleanup()


@contextlib.contextmanager
def mlflow_run(tracking_uri):
    """An active MLflow run on ``tracking_uri`` (the estimator then tracks its fit), or None."""
    if tracking_uri is None:
        yield None
        return
    import mlflow
    mlflow.set_tracking_uri(tracking_uri)
    mlflow.set_experiment("torch_estimator_digits")
    with mlflow.start_run(run_name="digits") as run:
        yield run


if __name__ == "__main__":
    sys.exit(main())
