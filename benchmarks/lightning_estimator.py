"""Seconds per epoch of the Lightning estimator against the Torch estimator and TorchDistributor.

One model (an MLP FEATURES-128-128-10, SGD, cross-entropy), one dataset (random features in a
vector column, an int label), 2 ranks on a local[2] SparkSession, batch 256 per rank:

- ``lightning``: horovod_spark.estimator.LightningEstimator fitting the model as a LightningModule;
- ``torch``: horovod_spark.estimator.TorchEstimator fitting the same nn.Module;
- ``torchdistributor``: pyspark's TorchDistributor(num_processes=2, local_mode=False) running the
  same LightningModule under Lightning's own DDP strategy (gloo), each rank reading the prepared
  Parquet with pyarrow into a DataLoader that Lightning shards.

Each epoch is timed on rank 0 (training loop and validation-free epoch only, from epoch start to
epoch end); the first epoch (warm-up) is left out and the median of the rest is reported.

    .venv/bin/python benchmarks/lightning_estimator.py [--rows 100000] [--features 32] [--epochs 4]
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import cloudpickle

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks.reader_throughput import make_dataframe  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])

HIDDEN, CLASSES, BATCH, LR = 128, 10, 256, 0.05


def _mlp(features):
    import torch
    return torch.nn.Sequential(torch.nn.Linear(features, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, HIDDEN),
                               torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES))


def _lightning_module(features):
    import lightning.pytorch as pl
    import torch

    class MLP(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = _mlp(features)

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = (batch["features"], batch["label"]) if isinstance(batch, dict) else batch
            return torch.nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=LR)

    return MLP()


class _TorchEpochs:
    """TorchEstimator callback: rank 0 appends each epoch's seconds to a file."""

    def __init__(self, path):
        self.path = path

    def on_train_begin(self, rank, size):
        self.rank = rank

    def on_epoch_begin(self, epoch):
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch, logs):
        if self.rank == 0:
            with open(self.path, "a") as f:
                f.write("%f\n" % (time.perf_counter() - self.started))


def _lightning_epochs(path):
    import lightning.pytorch as pl

    class LightningEpochs(pl.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            self.started = time.perf_counter()

        def on_train_epoch_end(self, trainer, pl_module):
            if trainer.global_rank == 0:
                with open(path, "a") as f:
                    f.write("%f\n" % (time.perf_counter() - self.started))

    return LightningEpochs()


def _epochs(path):
    with open(path) as f:
        seconds = [float(line) for line in f if line.strip()]
    os.remove(path)
    return seconds


def _distributor_train(train_dir, features, epochs, timer_path):
    """Runs in each TorchDistributor process: Lightning's DDP over the prepared Parquet."""
    import lightning.pytorch as pl
    import numpy as np
    import pyarrow.dataset as ds
    import torch

    table = ds.dataset(train_dir, format="parquet").to_table(columns=["features", "label"])
    x = np.stack(table.column("features").to_numpy(zero_copy_only=False)).astype(np.float32)
    y = table.column("label").to_numpy().astype(np.int64)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y)),
                                         batch_size=BATCH, shuffle=True)
    torch.manual_seed(0)
    trainer = pl.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_epochs=epochs, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[_lightning_epochs(timer_path)])
    trainer.fit(_lightning_module(features), loader)


def run(rows, features, epochs):
    import torch
    from pyspark.ml.torch.distributor import TorchDistributor
    from pyspark.sql import SparkSession

    from horovod_spark.estimator import LightningEstimator, TorchEstimator
    from horovod_spark.store import Store

    spark = (SparkSession.builder.master("local[2]").appName("lightning_estimator_benchmark")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    root = tempfile.mkdtemp(prefix="hs-bench-lightning-")
    store = Store.create(root)
    timer = os.path.join(root, "epoch_seconds")
    df = make_dataframe(spark, rows, features).cache()
    df.count()
    common = dict(num_proc=2, feature_cols=["features"], label_cols=["label"], batch_size=BATCH, epochs=epochs,
                  random_seed=0, store=store, verbose=0, use_gpu=False)
    results = {}
    try:
        torch.manual_seed(0)
        model = _mlp(features)
        TorchEstimator(model=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR),
                       loss=torch.nn.functional.cross_entropy, callbacks=[_TorchEpochs(timer)], **common).fit(df)
        results["torch"] = _epochs(timer)
        torch.manual_seed(0)
        LightningEstimator(model=_lightning_module(features), callbacks=[_lightning_epochs(timer)], logger=False,
                           **common).fit(df)
        results["lightning"] = _epochs(timer)
        (dataset,) = store.list(store.get_intermediate_data_path())
        train_dir = store.fs_path(dataset + "/train")
        try:
            TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run(
                _distributor_train, train_dir, features, epochs, timer)
            results["torchdistributor"] = _epochs(timer)
        except Exception as exc:  # reported in the table, not hidden
            results["torchdistributor"] = "failed: %s: %s" % (type(exc).__name__, str(exc).splitlines()[0][:200])
    finally:
        spark.stop()
    return results


def _row(name, seconds, torch_median):
    if isinstance(seconds, str):
        return "| %s | %s | | |" % (name, seconds)
    median = statistics.median(seconds[1:] or seconds)
    return "| %s | %.3f | %s | %.2fx |" % (name, median, " ".join("%.3f" % s for s in seconds), median / torch_median)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--json", help="also write the raw numbers here")
    args = parser.parse_args(argv)
    results = run(args.rows, args.features, args.epochs)
    torch_median = statistics.median(results["torch"][1:] or results["torch"])
    print("%d rows x %d features, batch %d per rank, 2 ranks, %d epochs (median of epochs 2..%d)"
          % (args.rows, args.features, BATCH, args.epochs, args.epochs))
    print("| system | s/epoch (median) | every epoch, s | vs TorchEstimator |")
    print("| --- | --- | --- | --- |")
    for name in ("torch", "lightning", "torchdistributor"):
        print(_row({"torch": "TorchEstimator", "lightning": "Lightning estimator",
                    "torchdistributor": "TorchDistributor + Lightning DDP"}[name], results[name], torch_median))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
