"""Estimator benchmark, older-stack and Keras part (benchmarks/estimator.py has the Torch part).

(d) readers:  on the same prepared Parquet, full passes of
              - our Arrow reader (``make_reader("arrow")``): shuffled (row groups, then rows through
                the shuffle buffer), row groups shuffled only (make_batch_reader's default), in order,
              - our Petastorm data module (``make_reader("petastorm")``, shuffled),
              - Petastorm's own ``make_batch_reader`` as a user would call it (defaults, one epoch;
                row groups shuffled), and with ``shuffle_rows=True``,
              - plain pyarrow.dataset -> numpy, for scale.
              Target: the Arrow reader >= 5x make_batch_reader's rows/s. Needs the older stack
              (.venv-legacy); skipped where Petastorm cannot be imported.
(e) epoch:    one epoch of KerasEstimator vs TorchEstimator (fit_on_parquet, 2 ranks) on the same
              data with the same MLP (features-128-128-10, ReLU, SGD, batch 256 per rank): wall
              time including rank start, and rank 0's training loop alone. Runs on either stack.

    .venv-legacy/bin/python -m benchmarks.estimator_legacy [--rows 200000] [--features 64]
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import cloudpickle
import numpy as np

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# The callbacks below travel to the executors by value whatever this module is called.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

HIDDEN = 128
CLASSES = 10


# -- (d) readers -----------------------------------------------------------------------------------

def _reader_paths(store, train_path, columns, batch_size):
    import pyarrow.dataset as ds

    from horovod_spark.data import make_reader, petastorm_support
    epochs = {"n": 0}

    def ours(module, shuffle=True, **options):
        reader = make_reader(module, store=store, path=train_path, batch_size=batch_size, columns=columns,
                             shuffle=shuffle, **options)

        def one_pass():
            epochs["n"] += 1
            with reader.iter_epoch(epochs["n"]) as batches:
                return sum(len(b["label"]) for b in batches)
        return one_pass

    def batch_reader(**options):
        def one_pass():
            from petastorm import make_batch_reader
            with make_batch_reader(petastorm_support.dataset_url(store, train_path), num_epochs=1,
                                   schema_fields=[c + "$" for c in columns], **options) as reader:
                return sum(len(b.label) for b in reader)
        return one_pass

    dataset = ds.dataset(store.fs_path(train_path), filesystem=store.filesystem(), format="parquet")

    def arrow_numpy():
        n = 0
        for b in dataset.to_batches(columns=columns, batch_size=batch_size):
            b.column("features").flatten().to_numpy().reshape(b.num_rows, -1)
            n += len(b.column("label").to_numpy())
        return n

    # "row groups shuffled" is make_batch_reader's own default shuffle (row-group order only, no
    # shuffle buffer): the like-for-like setting; "shuffled" adds our row-level shuffle buffer.
    return {"arrow reader (ours), shuffled": ours("arrow"),
            "arrow reader (ours), row groups shuffled": ours("arrow", shuffle_buffer_rows=0),
            "arrow reader (ours), in order": ours("arrow", False),
            "petastorm module (ours), shuffled": ours("petastorm"),
            "petastorm make_batch_reader": batch_reader(),
            # Petastorm's row shuffle (within each row group) against our shuffle buffer.
            "petastorm make_batch_reader, shuffle_rows=True": batch_reader(shuffle_rows=True),
            "pyarrow.dataset -> numpy": arrow_numpy}


def run_readers(store, train_path, columns, batch_size, passes):
    """Median rows/s over ``passes`` rounds, the paths taking turns in each round so that a noisy
    neighbour slows them alike."""
    import warnings
    warnings.filterwarnings("ignore", category=FutureWarning)  # Petastorm on pyarrow 14's legacy dataset
    paths = _reader_paths(store, train_path, columns, batch_size)
    for one_pass in paths.values():
        one_pass()  # warm-up: page cache, thread pools
    rates = {name: [] for name in paths}
    for _ in range(passes):
        for name, one_pass in paths.items():
            start = time.perf_counter()
            rows = one_pass()
            rates[name].append(rows / (time.perf_counter() - start))
    return {name: float(np.median(r)) for name, r in rates.items()}


# -- (e) one epoch, Keras vs Torch -----------------------------------------------------------------

class _TorchEpochTimer:
    def __init__(self, path):
        self.path = path

    def on_train_begin(self, rank, size):
        self.rank = rank

    def on_epoch_begin(self, epoch):
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch, logs):
        if self.rank == 0:
            with open(self.path, "w") as f:
                f.write(str(time.perf_counter() - self.started))


def _keras_epoch_timer(path):
    import keras

    class KerasEpochTimer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            import horovod_spark.keras as hvd
            if hvd.rank() == 0:
                with open(path, "w") as f:
                    f.write(str(time.perf_counter() - self.started))

    return KerasEpochTimer()


def _torch_estimator(store, features, batch_size, lr, timer):
    import torch

    from horovod_spark.estimator import TorchEstimator
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(features, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, HIDDEN),
                                torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES))
    return TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=lr),
                          loss=torch.nn.functional.cross_entropy, feature_cols=["features"], label_cols=["label"],
                          batch_size=batch_size, epochs=1, random_seed=0, store=store, verbose=0,
                          callbacks=[_TorchEpochTimer(timer)])


def _keras_estimator(store, features, batch_size, lr, timer):
    import keras

    from horovod_spark.estimator import KerasEstimator
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((features,)), keras.layers.Dense(HIDDEN, activation="relu"),
                              keras.layers.Dense(HIDDEN, activation="relu"), keras.layers.Dense(CLASSES)])
    return KerasEstimator(num_proc=2, model=model, optimizer=keras.optimizers.SGD(lr),
                          loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), feature_cols=["features"],
                          label_cols=["label"], batch_size=batch_size, epochs=1, random_seed=0, store=store,
                          verbose=0, callbacks=[_keras_epoch_timer(timer)])


def run_epochs(store, dataset_dir, features, batch_size, lr, repeats, scratch):
    """Each estimator ``repeats`` times, alternating; the run with the shortest wall time counts."""
    runs = {"keras": [], "torch": []}
    builders = {"keras": _keras_estimator, "torch": _torch_estimator}
    for _ in range(repeats):
        for name, build in builders.items():
            timer = os.path.join(scratch, "%s_epoch_seconds" % name)
            est = build(store, features, batch_size, lr, timer)
            start = time.perf_counter()
            fitted = est.fit_on_parquet(dataset_dir)
            runs[name].append({"wall_seconds": time.perf_counter() - start,
                               "epoch_seconds": float(open(timer).read()),
                               "loss": fitted.getHistory()["loss"][-1]})
    out = {}
    for name, r in runs.items():
        best = dict(min(r, key=lambda x: x["wall_seconds"]))
        best["all_wall_seconds"] = [x["wall_seconds"] for x in r]
        best["all_epoch_seconds"] = [x["epoch_seconds"] for x in r]
        out[name] = best
    return out


# -- driver ------------------------------------------------------------------------------------------

def run(spark, rows, features, batch_size, passes, lr, repeats, store_root, row_group_bytes, epochs=True,
        compression="snappy"):
    import pyarrow
    import pyspark

    from benchmarks.reader_throughput import make_dataframe
    from horovod_spark.data import petastorm_support, prepare_data
    from horovod_spark.store import Store
    store = Store.create(store_root)
    start = time.perf_counter()
    prepared = prepare_data(store, make_dataframe(spark, rows, features), ["features"], ["label"], num_proc=2,
                            row_group_bytes=row_group_bytes, compression=compression)
    results = {"rows": prepared.train_rows, "features": features, "batch_size": batch_size,
               "row_group_bytes": row_group_bytes, "compression": compression,
               "prepare_seconds": time.perf_counter() - start, "pyspark": pyspark.__version__,
               "pyarrow": pyarrow.__version__}
    if petastorm_support.is_available():
        results["readers"] = run_readers(store, prepared.train_path, ["features", "label"], batch_size, passes)
    if epochs:
        (dataset_dir,) = store.list(store.get_intermediate_data_path())
        results["epoch"] = run_epochs(store, dataset_dir, features, batch_size, lr, repeats, store_root)
    return results


def format_table(r) -> str:
    lines = ["pyspark %s, pyarrow %s; %d rows x %d float32 features (one vector column) + int label; %.1f MiB "
             "row groups, %s; batch %d" % (r["pyspark"], r["pyarrow"], r["rows"], r["features"],
                                          r["row_group_bytes"] / 2**20, r.get("compression", "snappy"),
                                          r["batch_size"]), ""]
    if "readers" in r:
        base = r["readers"]["petastorm make_batch_reader"]
        lines += ["| (d) reader, one full pass | rows/s (median) | vs make_batch_reader |", "| --- | --- | --- |"]
        for name, rate in r["readers"].items():
            lines.append("| %s | %.0f | %.2fx |" % (name, rate, rate / base))
        readers = r["readers"]
        pairs = [("row groups shuffled", "arrow reader (ours), row groups shuffled", "petastorm make_batch_reader"),
                 ("rows shuffled", "arrow reader (ours), shuffled", "petastorm make_batch_reader, shuffle_rows=True")]
        lines += ["", "like for like (target >= 5x): " + "; ".join(
            "%s %.2fx" % (label, readers[ours] / readers[theirs]) for label, ours, theirs in pairs
            if ours in readers and theirs in readers)]
        lines.append("")
    if "epoch" not in r:
        return "\n".join(lines)
    keras, torch = r["epoch"]["keras"], r["epoch"]["torch"]
    lines += ["| (e) one epoch, 2 ranks | KerasEstimator | TorchEstimator | Keras / Torch |",
              "| --- | --- | --- | --- |",
              "| wall s, incl. rank start | %.1f | %.1f | %.2fx |"
              % (keras["wall_seconds"], torch["wall_seconds"], keras["wall_seconds"] / torch["wall_seconds"]),
              "| training loop s (rank 0) | %.2f | %.2f | %.2fx |"
              % (keras["epoch_seconds"], torch["epoch_seconds"], keras["epoch_seconds"] / torch["epoch_seconds"]),
              "| train loss after the epoch | %.4f | %.4f | |" % (keras["loss"], torch["loss"]), "",
              "every run (s): Keras wall %s, loop %s; Torch wall %s, loop %s" % tuple(
                  " / ".join("%.2f" % v for v in values) for values in (
                      keras["all_wall_seconds"], keras["all_epoch_seconds"], torch["all_wall_seconds"],
                      torch["all_epoch_seconds"]))]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--passes", type=int, default=5, help="reader passes per path in (d)")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--repeats", type=int, default=2, help="alternated fits per estimator in (e)")
    parser.add_argument("--row-group-mib", type=float, default=8.0, help="prepare_data's row group size")
    parser.add_argument("--compression", default="snappy", help="prepare_data's Parquet codec")
    parser.add_argument("--readers-only", action="store_true", help="skip (e)")
    parser.add_argument("--json", help="also write the raw results here")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").appName("benchmark_estimator_legacy")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.executorEnv.PYTHONPATH", REPO_ROOT).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    store_root = tempfile.mkdtemp(prefix="hs-estimator-legacy-bench-")
    try:
        results = run(spark, args.rows, args.features, args.batch_size, args.passes, args.lr, args.repeats,
                      store_root, int(args.row_group_mib * 2**20), epochs=not args.readers_only,
                      compression=args.compression)
    finally:
        spark.stop()
        shutil.rmtree(store_root, ignore_errors=True)
    print(format_table(results))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
