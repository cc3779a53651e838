"""Checks run by an installed wheel's own Python (tests/packaging/test_wheels.py), outside this
checkout: ``python installed_wheel_checks.py CHECK``.

- ``where``: prints the installed package's version, metadata version and folder, as JSON;
- ``allreduce``: under ``horovod-spark-run -np 2``, a Sum allreduce through the core on ctypes
  buffers (no numpy, no framework);
- ``spark``: on a local[2] SparkSession, ``horovod_spark.run`` with a torch allreduce on 2 ranks,
  then a tiny ``TorchEstimator`` fit on 2 ranks and its model's ``transform``.
"""
import ctypes
import json
import os
import sys
import tempfile


def where():
    from importlib.metadata import version

    import horovod_spark
    print(json.dumps({"version": horovod_spark.__version__, "metadata": version("horovod_spark"),
                      "folder": os.path.dirname(horovod_spark.__file__)}))


def allreduce():
    from horovod_spark.common import basics, ops
    basics.init()
    try:
        values = (ctypes.c_float * 3)(*[float(basics.rank() + 1)] * 3)
        total = (ctypes.c_float * 3)()
        ops.allreduce("wheel.check", ctypes.addressof(values), ctypes.addressof(total), "float32", [3], op=ops.Sum)
        expected = float(sum(range(1, basics.size() + 1)))
        assert list(total) == [expected] * 3, (list(total), expected)
        print("rank %d of %d: allreduce %s" % (basics.rank(), basics.size(), list(total)), flush=True)
    finally:
        basics.shutdown()


def _allreduce_with_torch():
    import torch

    import horovod_spark.torch as hvd
    hvd.init()
    return hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item()


def spark():
    import torch
    from pyspark.sql import SparkSession

    import horovod_spark
    from horovod_spark.estimator import TorchEstimator

    session = (SparkSession.builder.master("local[2]").appName("wheel-check")
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").getOrCreate())
    session.sparkContext.setLogLevel("FATAL")
    try:
        assert horovod_spark.run(_allreduce_with_torch, num_proc=2) == [3.0, 3.0]
        rows = [([float(i % 7), float(i % 5)], float(i % 7) * 2.0 - float(i % 5)) for i in range(64)]
        df = session.createDataFrame(rows, "features array<float>, y float")
        torch.manual_seed(0)
        model = torch.nn.Linear(2, 1)
        estimator = TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
                                   loss=torch.nn.functional.mse_loss, feature_cols=["features"], label_cols=["y"],
                                   batch_size=16, epochs=2, store=tempfile.mkdtemp(prefix="wheel-check-store-"),
                                   verbose=0)
        fitted = estimator.fit(df)
        assert fitted.transform(df).count() == 64
        print("spark: run and TorchEstimator fit on 2 ranks passed", flush=True)
    finally:
        session.stop()


if __name__ == "__main__":
    {"where": where, "allreduce": allreduce, "spark": spark}[sys.argv[1]]()
