"""Estimator benchmark: one dataset (rows x float features, prepared once), one MLP, three comparisons.

(a) reader:    our per-rank Arrow reader vs plain pyarrow.dataset iteration of the same files
               (benchmarks/reader_throughput.py, target >= 0.8x of arrow -> numpy)
(b) fit:       one epoch of TorchEstimator.fit_on_parquet vs a hand-written DDP train function run by
               pyspark's TorchDistributor(num_processes=2, local_mode=False) over the same Parquet
               (target <= 1.2x its time); both wall times include starting the ranks
(c) transform: TorchModel.transform rows/s vs pyspark's predict_batch_udf on the same model, batch
               size and data (target >= 1x), and vs a model-free Arrow UDF floor (target >= 0.9x);
               benchmarks/estimator_transform.py

    python -m benchmarks.estimator [--parts transform] [--rows 200000] [--features 64]   # (c) only, ~1 min
    python -m benchmarks.estimator --parts all                                             # (a), (b), (c)
"""
import argparse
import json
import os
import posixpath
import shutil
import sys
import tempfile
import time

import cloudpickle

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

from benchmarks import estimator_transform  # noqa: E402

# The train functions below travel to the executors by value whatever this module is called.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

HIDDEN = 128
CLASSES = estimator_transform.CLASSES
PARTS = ("reader", "fit", "transform")


def _mlp(features: int):
    import torch
    return torch.nn.Sequential(torch.nn.Linear(features, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, HIDDEN),
                               torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES))


class _EpochTimer:
    """Callback: rank 0 writes how long its epoch took (training loop only) to a file."""

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


def _distributor_train(train_dir, features, batch_size, lr, seed):
    """A hand-written DDP epoch: each rank reads its contiguous 1/size of the rows (the
    row groups overlapping that range), then trains on full batches, the same number on every rank."""
    import os
    import time

    import numpy as np
    import pyarrow.dataset as ds
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // size))
    torch.manual_seed(seed)
    model = torch.nn.parallel.DistributedDataParallel(_mlp(features))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    started = time.perf_counter()
    dataset = ds.dataset(train_dir, format="parquet")
    groups = [g for f in sorted(dataset.get_fragments(), key=lambda f: f.path) for g in f.split_by_row_group()]
    counts = [g.count_rows() for g in groups]
    total = sum(counts)
    lo, hi = rank * total // size, (rank + 1) * total // size
    parts, offset = [], 0
    for group, n in zip(groups, counts):
        if offset < hi and offset + n > lo:
            start = max(lo - offset, 0)
            parts.append(group.to_table(columns=["features", "label"]).slice(start, min(hi - offset, n) - start))
        offset += n
    x = np.concatenate([p.column("features").combine_chunks().flatten().to_numpy().reshape(p.num_rows, -1)
                        for p in parts]).astype(np.float32, copy=False)
    y = np.concatenate([p.column("label").to_numpy() for p in parts]).astype(np.int64)
    steps = torch.tensor([len(y) // batch_size])
    dist.all_reduce(steps, op=dist.ReduceOp.MIN)
    model.train()
    for i in range(int(steps)):
        xb = torch.from_numpy(x[i * batch_size:(i + 1) * batch_size])
        yb = torch.from_numpy(y[i * batch_size:(i + 1) * batch_size])
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
    dist.barrier()
    seconds = time.perf_counter() - started
    dist.destroy_process_group()
    return {"epoch_seconds": seconds, "steps": int(steps), "loss": loss.item()}


def _best(runs):
    """The run with the shortest wall time, plus every run's wall time."""
    best = dict(min(runs, key=lambda r: r["wall_seconds"]))
    best["all_wall_seconds"] = [r["wall_seconds"] for r in runs]
    best["all_epoch_seconds"] = [r["epoch_seconds"] for r in runs]
    return best


def _transform_model(features: int):
    """(c)'s model when (b) does not fit one: the same MLP built directly, as a user would wrap a
    module trained elsewhere (inference costs the same whatever the weights)."""
    import torch

    from horovod_spark.estimator import TorchModel
    torch.manual_seed(0)
    return TorchModel(model=_mlp(features).eval(), feature_cols=["features"], label_cols=["label"],
                      output_shapes=[[CLASSES]])


def run(spark, rows: int, features: int, batch_size: int, passes: int, lr: float, store_root: str,
        repeats: int = 2, parts=PARTS, row_udf: bool = False):
    from pyspark.ml.functions import vector_to_array

    from benchmarks import reader_throughput

    results = {"rows": rows, "features": features, "batch_size": batch_size, "parts": list(parts),
               "arrow_batch_rows": spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch", "10000")}
    fitted = None
    if "reader" in parts or "fit" in parts:
        # (a) also prepares the dataset that (b) uses.
        results["reader"] = reader_throughput.run(spark=spark, rows=rows, features=features, batch_size=batch_size,
                                                  passes=passes, store_root=store_root, num_ranks=1)
    if "fit" in parts:
        fitted, alternate = _fit_first(results, store_root, features, batch_size, lr)
    if "transform" in parts:
        # (c) runs before any TorchDistributor job, whose torchelastic agents can linger for minutes
        # (see docs/performance.md) and would load the machine under the transform timings.
        model = fitted if fitted is not None else _transform_model(features)
        vectors = reader_throughput.make_dataframe(spark, rows, features)
        # The same values as array<float>: what transform costs without the JVM's vector -> array step.
        arrays = vectors.select(vector_to_array("features", "float32").alias("features"), "label")
        results["transform"] = {
            column: estimator_transform.compare(df, model, rows, features, repeats, row_udf)
            for column, df in (("vector", vectors), ("array<float>", arrays))}
    if "fit" in parts:
        alternate(repeats)
    results["load_average"] = os.getloadavg()
    return results


def _fit_first(results, store_root, features, batch_size, lr):
    """(b)'s first estimator fit (whose model (c) transforms) and a function running the rest of
    (b): the two systems alternate, so both see the same background load; the minimum is the
    uncontended estimate."""
    import torch
    from pyspark.ml.torch.distributor import TorchDistributor

    from horovod_spark.data.sharding import default_steps_per_epoch
    from horovod_spark.estimator import TorchEstimator
    from horovod_spark.store import Store

    store = Store.create(store_root)
    (dataset_dir,) = store.list(store.get_intermediate_data_path())
    train_dir = store.fs_path(posixpath.join(dataset_dir, "train"))
    # Same model init, optimizer, batch size per rank, data.
    torch.manual_seed(0)
    model = _mlp(features)
    timer_file = os.path.join(store_root, "epoch_seconds")
    est = TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=lr),
                         loss=torch.nn.functional.cross_entropy, feature_cols=["features"], label_cols=["label"],
                         batch_size=batch_size, epochs=1, random_seed=0, store=store, verbose=0,
                         callbacks=[_EpochTimer(timer_file)])
    distributor = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False)
    fits, dists = [], []
    # The reader's default: enough steps for every rank to cover its shard.
    estimator_steps = default_steps_per_epoch(results["reader"][0]["dataset_rows"], 2, batch_size)

    def fit_once():
        start = time.perf_counter()
        model = est.fit_on_parquet(dataset_dir)
        fits.append({"wall_seconds": time.perf_counter() - start, "epoch_seconds": float(open(timer_file).read()),
                     "loss": model.getHistory()["loss"][-1], "steps": estimator_steps})
        return model

    def distributor_once():
        start = time.perf_counter()
        out = distributor.run(_distributor_train, train_dir, features, batch_size, lr, 0)
        dists.append(dict(out, wall_seconds=time.perf_counter() - start))

    def alternate(repeats):
        distributor_once()
        for _ in range(repeats - 1):
            fit_once()
            distributor_once()
        results["fit"] = _best(fits)
        results["distributor"] = _best(dists)

    return fit_once(), alternate


def format_table(r) -> str:
    lines = []
    if "reader" in r:
        reader = {x["name"]: x for x in r["reader"]}
        plain = reader["arrow -> numpy"]
        lines += ["| comparison | horovod_spark | baseline | ratio | target |", "| --- | --- | --- | --- | --- |"]
        for name in ("shuffled", "in order"):
            ours = reader["reader, " + name]
            lines.append("| (a) reader rows/s, %s (vs pyarrow.dataset -> numpy) | %.0f | %.0f | %.2fx | >= 0.8x |"
                         % (name, ours["rows_per_s"], plain["rows_per_s"], ours["rows_per_s"] / plain["rows_per_s"]))
    if "fit" in r:
        fit, dist = r["fit"], r["distributor"]
        lines += [
            "| (b) one epoch, wall s incl. start (vs TorchDistributor) | %.1f | %.1f | %.2fx | <= 1.2x |"
            % (fit["wall_seconds"], dist["wall_seconds"], fit["wall_seconds"] / dist["wall_seconds"]),
            "| (b) training loop only, s (rank 0) | %.2f | %.2f | %.2fx | |"
            % (fit["epoch_seconds"], dist["epoch_seconds"], fit["epoch_seconds"] / dist["epoch_seconds"]),
            "",
            "every (b) run (s): fit wall %s, loop %s; TorchDistributor wall %s, loop %s" % tuple(
                " / ".join("%.2f" % v for v in values) for values in (
                    fit["all_wall_seconds"], fit["all_epoch_seconds"], dist["all_wall_seconds"],
                    dist["all_epoch_seconds"])),
            "(b): batch %d per rank; 2 ranks; steps per rank: estimator %d, distributor %d; train loss: estimator "
            "%.4f (epoch mean), distributor %.4f (last batch)" % (r["batch_size"], fit["steps"], dist["steps"],
                                                                  fit["loss"], dist["loss"]),
        ]
    if "transform" in r:
        lines += ["", estimator_transform.format_rows(r["transform"], r["rows"], r["features"],
                                                      r["arrow_batch_rows"])]
    lines.append("%d rows x %d float32 features + int label; MLP %d-%d-%d-%d; load average at the end %.1f"
                 % (r["rows"], r["features"], r["features"], HIDDEN, HIDDEN, CLASSES, r["load_average"][0]))
    return "\n".join(lines).lstrip("\n")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--passes", type=int, default=5, help="reader passes per variant in (a)")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--repeats", type=int, default=2, help="alternated runs of (b) and (c); the best counts")
    parser.add_argument("--parts", default="transform",
                        help="comma-separated, of %s, or 'all' (fit runs reader too: it prepares the data)"
                        % ",".join(PARTS))
    parser.add_argument("--row-udf", action="store_true", help="(c) also times a row-at-a-time UDF (slow)")
    parser.add_argument("--json", help="also write the raw results here")
    args = parser.parse_args(argv)
    parts = PARTS if args.parts == "all" else tuple(p.strip() for p in args.parts.split(",") if p.strip())
    unknown = [p for p in parts if p not in PARTS]
    if unknown or not parts:
        parser.error("--parts %r: choose from %s, or all" % (args.parts, ", ".join(PARTS)))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]").appName("benchmark_estimator")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.executorEnv.PYTHONPATH", REPO_ROOT)
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    store_root = tempfile.mkdtemp(prefix="hs-estimator-bench-")
    try:
        results = run(spark, args.rows, args.features, args.batch_size, args.passes, args.lr, store_root,
                      args.repeats, parts, args.row_udf)
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
