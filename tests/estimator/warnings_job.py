"""A small TorchEstimator and KerasEstimator fit + transform on local[2], for test_no_warnings.py,
which runs it with warnings turned into errors: ``python tests/estimator/warnings_job.py STORE_DIR``."""
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main(store_dir: str) -> None:
    import numpy as np
    from pyspark.ml.linalg import Vectors
    from pyspark.sql import SparkSession

    from horovod_spark.store import Store

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("warnings_job")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("FATAL")
    x = np.random.default_rng(0).normal(size=(160, 6))
    # A vector column and an array column, as users' features come.
    df = spark.createDataFrame([(Vectors.dense(r[:4].tolist()), r[4:].tolist(), int(r.sum() > 0)) for r in x],
                               ["vec", "arr", "label"])
    # One store: the second fit reuses the data the first prepared.
    common = dict(num_proc=2, feature_cols=["vec", "arr"], label_cols=["label"], validation=0.25, batch_size=16,
                  epochs=1, verbose=0, store=Store.create(store_dir))
    try:
        import torch

        from horovod_spark.estimator import TorchEstimator

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(6, 2)

            def forward(self, vec, arr):
                return self.fc(torch.cat([vec, arr], dim=1))

        net = Net()
        fitted = TorchEstimator(model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                                loss=torch.nn.functional.cross_entropy, metrics=["accuracy"], **common).fit(df)
        print("torch transformed %d rows" % len(fitted.transform(df).collect()), flush=True)

        import keras

        from horovod_spark.estimator import KerasEstimator

        vec, arr = keras.Input((4,), name="vec"), keras.Input((2,), name="arr")
        out = keras.layers.Dense(2, activation="softmax")(keras.layers.Concatenate()([vec, arr]))
        model = keras.Model([vec, arr], out)
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="sparse_categorical_crossentropy",
                      metrics=["accuracy"])
        fitted = KerasEstimator(model=model, **common).fit(df)
        print("keras transformed %d rows" % len(fitted.transform(df).collect()), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
