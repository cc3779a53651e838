"""Reader micro-benchmark: our per-rank Arrow reader vs plain pyarrow.dataset iteration.

Writes a rows x features float dataset with prepare_data (a VectorAssembler vector column plus a
label, as an estimator would see it), then times full passes over the same Parquet files:

- arrow batches:    ``dataset.to_batches(batch_size)``, Arrow record batches only
- arrow -> numpy:   the same, plus turning each batch into numpy arrays (what a model consumes)
- reader, ...:      ``make_reader("arrow", ...)`` batches (numpy) with and without shuffling

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
from horovod_spark.data.arrow_reader import table_to_numpy
from horovod_spark.store import Store


def make_dataframe(spark, rows: int, features: int):
    from pyspark.ml.feature import VectorAssembler
    from pyspark.sql import functions as F

    df = spark.range(rows, numPartitions=2).select(
        F.col("id"), *[F.rand(seed=i).alias("f%d" % i) for i in range(features)])
    assembled = VectorAssembler(inputCols=["f%d" % i for i in range(features)], outputCol="features").transform(df)
    return assembled.select("features", (F.col("id") % 10).cast("int").alias("label"))


def _time_rounds(passes: int, paths: Dict[str, callable]) -> List[Dict]:
    """Median over ``passes`` rounds, the paths taking turns in each round, so that a noisy
    neighbour on a shared machine slows all of them alike rather than one."""
    for one_pass in paths.values():
        one_pass()  # warm-up: page cache, Arrow's thread pool, first allocations
    timings = {name: [] for name in paths}
    rows = {name: 0 for name in paths}
    for _ in range(passes):
        for name, one_pass in paths.items():
            start = time.perf_counter()
            n = one_pass()
            timings[name].append((n, time.perf_counter() - start))
            rows[name] += n
    results = []
    for name, runs in timings.items():
        rates = sorted(n / seconds for n, seconds in runs)
        results.append({"name": name, "rows": rows[name], "seconds": sum(s for _, s in runs),
                        "rows_per_s": float(np.median(rates))})
    return results


def run(spark=None, rows: int = 200_000, features: int = 64, batch_size: int = 256, passes: int = 10,
        store_root: Optional[str] = None, num_ranks: int = 1) -> List[Dict]:
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
                                num_proc=num_ranks)
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
        baseline = results[1]["rows_per_s"]
        for r in results:
            r["vs_arrow_numpy"] = r["rows_per_s"] / baseline
            r["vs_arrow_batches"] = r["rows_per_s"] / results[0]["rows_per_s"]
        for r in results:
            r.update(prepare_seconds=prepare_seconds, dataset_rows=prepared.train_rows, features=features,
                     batch_size=batch_size, num_ranks=num_ranks)
        return results
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if own_session:
            spark.stop()


def format_table(results: List[Dict]) -> str:
    lines = ["%-18s %10s %9s %12s %10s %10s" % ("path", "rows", "seconds", "rows/s*", "vs numpy", "vs arrow")]
    for r in results:
        lines.append("%-18s %10d %9.3f %12.0f %9.2fx %9.2fx" % (r["name"], r["rows"], r["seconds"], r["rows_per_s"],
                                                               r["vs_arrow_numpy"], r["vs_arrow_batches"]))
    first = results[0]
    lines.append("* median over passes; the paths take turns pass by pass")
    lines.append("dataset: %d rows x %d float32 features + int label, batch %d, rank 0 of %d; prepare_data %.1fs"
                 % (first["dataset_rows"], first["features"], first["batch_size"], first["num_ranks"],
                    first["prepare_seconds"]))
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--passes", type=int, default=10)
    parser.add_argument("--num-ranks", type=int, default=1)
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    results = run(rows=args.rows, features=args.features, batch_size=args.batch_size, passes=args.passes,
                  num_ranks=args.num_ranks)
    print(format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
