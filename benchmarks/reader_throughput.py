"""Reader micro-benchmark: our per-rank Arrow reader vs plain pyarrow.dataset iteration.

Writes a rows x features float dataset with prepare_data (a VectorAssembler vector column plus a
label, as an estimator would see it), then times full passes over the same Parquet files:

- arrow batches:    ``dataset.to_batches(batch_size)``, Arrow record batches only
- arrow -> numpy:   the same, plus turning each batch into numpy arrays (what a model consumes)
- reader, ...:      ``make_reader("arrow", ...)`` batches (numpy): an epoch shuffled, an epoch in
                    file order (each a fresh iterator), and shuffled epochs streamed from one
                    iterator kept open (mean over all its passes)

``run()`` returns the rows for the estimator benchmark to reuse; ``python -m
benchmarks.reader_throughput`` prints them as a table.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Dict, List, Optional

import numpy as np
import pyarrow.dataset as ds

from horovod_spark.data import make_reader, prepare_data
from horovod_spark.data.prepare import DEFAULT_ROW_GROUP_BYTES
from horovod_spark.store import Store


def make_dataframe(spark, rows: int, features: int):
    from pyspark.ml.feature import VectorAssembler
    from pyspark.sql import functions as F

    df = spark.range(rows, numPartitions=2).select(
        F.col("id"), *[F.rand(seed=i).alias("f%d" % i) for i in range(features)])
    assembled = VectorAssembler(inputCols=["f%d" % i for i in range(features)], outputCol="features").transform(df)
    return assembled.select("features", (F.col("id") % 10).cast("int").alias("label"))


def _measure(one_pass):
    wall, cpu = time.perf_counter(), time.process_time()
    rows = one_pass()
    return rows, time.perf_counter() - wall, time.process_time() - cpu


def _summary(name: str, runs) -> Dict:
    """Wall rate: median over passes. CPU rate: rows per CPU-second of the whole process (all
    threads), which a busy shared machine disturbs far less than wall time."""
    return {"name": name, "rows": sum(r[0] for r in runs), "seconds": sum(r[1] for r in runs),
            "rows_per_s": float(np.median([r[0] / r[1] for r in runs])),
            "rows_per_cpu_s": sum(r[0] for r in runs) / max(sum(r[2] for r in runs), 1e-9)}


def _time_rounds(passes: int, paths: Dict[str, callable]) -> List[Dict]:
    """The paths take turns pass by pass, so that a noisy neighbour slows all of them alike."""
    for one_pass in paths.values():
        one_pass()  # warm-up: page cache, Arrow's thread pool, first allocations
    runs = {name: [] for name in paths}
    for _ in range(passes):
        for name, one_pass in paths.items():
            runs[name].append(_measure(one_pass))
    return [_summary(name, r) for name, r in runs.items()]


def _time_chained(store, path, columns, batch_size, num_ranks, passes) -> Dict:
    """Shuffled epochs from one iterator kept open, as a training loop would use it: read-ahead
    carries over epoch boundaries instead of starting cold each epoch. Timed on its own, since
    its read-ahead would otherwise run on into the next path's timing."""
    reader = make_reader("arrow", store=store, path=path, batch_size=batch_size, rank=0, num_ranks=num_ranks,
                         columns=columns)
    with reader.iter_batches() as batches:
        def one_epoch():
            return sum(len(next(batches)["label"]) for _ in range(reader.steps_per_epoch))
        one_epoch()  # warm-up
        runs = [_measure(one_epoch) for _ in range(passes)]
    return _summary("reader, chained", runs)


def run(spark=None, rows: int = 200_000, features: int = 64, batch_size: int = 256, passes: int = 10,
        store_root: Optional[str] = None, num_ranks: int = 1,
        row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES) -> List[Dict]:
    own_session = spark is None
    if own_session:
        from pyspark.sql import SparkSession
        spark = (SparkSession.builder.master("local[2]").appName("reader_throughput")
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
    tmp = None
    if store_root is None:
        store_root = tmp = tempfile.mkdtemp(prefix="hs-reader-bench-")
    try:
        store = Store.create(store_root)
        start = time.perf_counter()
        prepared = prepare_data(store, make_dataframe(spark, rows, features), ["features"], ["label"],
                                num_proc=num_ranks, row_group_bytes=row_group_bytes)
        prepare_seconds = time.perf_counter() - start
        columns = prepared.columns
        dataset = ds.dataset(store.fs_path(prepared.train_path), filesystem=store.filesystem(), format="parquet")

        def arrow_pass():
            return sum(b.num_rows for b in dataset.to_batches(columns=columns, batch_size=batch_size))

        def arrow_numpy_pass():
            n = 0
            for b in dataset.to_batches(columns=columns, batch_size=batch_size):
                arrays = {name: b.column(name).flatten().to_numpy().reshape(b.num_rows, -1)
                          if name == "features" else b.column(name).to_numpy() for name in columns}
                n += len(arrays["label"])
            return n

        def reader_pass(**options):
            reader = make_reader("arrow", store=store, path=prepared.train_path, batch_size=batch_size,
                                 rank=0, num_ranks=num_ranks, columns=columns, **options)

            def one_pass():
                n = 0
                with reader.iter_epoch(one_pass.epoch) as batches:
                    for batch in batches:
                        n += len(batch["label"])
                one_pass.epoch += 1
                return n
            one_pass.epoch = 0
            return one_pass

        results = _time_rounds(passes, {
            "arrow batches": arrow_pass,
            "arrow -> numpy": arrow_numpy_pass,
            "reader, shuffled": reader_pass(shuffle=True),
            "reader, in order": reader_pass(shuffle=False),
        })
        results.append(_time_chained(store, prepared.train_path, columns, batch_size, num_ranks, passes))
        wall_base, cpu_base = results[1]["rows_per_s"], results[1]["rows_per_cpu_s"]
        for r in results:
            r["vs_arrow_numpy"] = r["rows_per_s"] / wall_base
            r["cpu_vs_arrow_numpy"] = r["rows_per_cpu_s"] / cpu_base
        for r in results:
            r.update(prepare_seconds=prepare_seconds, dataset_rows=prepared.train_rows, features=features,
                     batch_size=batch_size, num_ranks=num_ranks, row_group_bytes=row_group_bytes)
        return results
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if own_session:
            spark.stop()


def format_table(results: List[Dict]) -> str:
    lines = ["%-18s %9s %8s %11s %9s %13s %9s" % ("path", "rows", "seconds", "rows/s", "vs numpy",
                                                  "rows/cpu-s", "vs numpy")]
    for r in results:
        lines.append("%-18s %9d %8.3f %11.0f %8.2fx %13.0f %8.2fx" % (
            r["name"], r["rows"], r["seconds"], r["rows_per_s"], r["vs_arrow_numpy"], r["rows_per_cpu_s"],
            r["cpu_vs_arrow_numpy"]))
    first = results[0]
    lines.append("rows/s: median over passes (epochs); the first four paths take turns pass by pass, chained "
                 "runs alone. rows/cpu-s: rows per CPU-second of the process, all threads.")
    lines.append("dataset: %d rows x %d float32 features + int label, %.1f MiB row groups, batch %d, rank 0 of %d; "
                 "prepare_data %.1fs" % (first["dataset_rows"], first["features"], first["row_group_bytes"] / 2**20,
                                         first["batch_size"], first["num_ranks"], first["prepare_seconds"]))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--passes", type=int, default=10)
    parser.add_argument("--num-ranks", type=int, default=1)
    parser.add_argument("--row-group-mib", type=float, default=DEFAULT_ROW_GROUP_BYTES / 2**20)
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    results = run(rows=args.rows, features=args.features, batch_size=args.batch_size, passes=args.passes,
                  num_ranks=args.num_ranks, row_group_bytes=int(args.row_group_mib * 2**20))
    print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
