"""A/B: the Arrow reader with its hand-written Parquet page decoder against pyarrow alone.

Same files, same process, the two decoders alternating run by run (HS_BENCH_PARQUET_DECODER=hand
or pyarrow, read when a reader is made; for the fit it goes to the ranks' environment):

(1) decode:  every row group of the training files to numpy, one thread, CPU ms per pass
(2) reader:  make_reader("arrow") full passes, rank 0 of 1: shuffled, in order (a fresh iterator
             per pass), and chained (shuffled epochs from one iterator kept open)
(3) fit:     one epoch of TorchEstimator.fit_on_parquet, 2 ranks, the MLP of benchmarks/estimator.py;
             wall time from call to model, and rank 0's training loop

    python -m benchmarks.parquet_decoder_ab [--rows 200000] [--features 64] [--fits 4]
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)

SWITCH = "HS_BENCH_PARQUET_DECODER"
DECODERS = ("hand", "pyarrow")


class _EpochTimer:
    """Rank 0 writes its training loop's seconds and the decoder its environment selected."""

    def __init__(self, path):
        self.path = path

    def on_train_begin(self, rank, size):
        self.rank = rank

    def on_epoch_begin(self, epoch):
        self.started = time.perf_counter()

    def on_epoch_end(self, epoch, logs):
        if self.rank == 0:
            with open(self.path, "w") as f:
                f.write("%r %s" % (time.perf_counter() - self.started, os.environ.get(SWITCH, "hand")))


def _spread(values, scale=1.0, fmt="%.1f"):
    values = [v * scale for v in values]
    return (fmt + " [" + fmt + " .. " + fmt + "]") % (statistics.median(values), min(values), max(values))


def decode_ab(store, train_path, columns, passes):
    from horovod_spark.data.arrow_reader import ArrowReader
    readers = {}
    for decoder in DECODERS:
        os.environ[SWITCH] = decoder
        readers[decoder] = ArrowReader(store, train_path, batch_size=256, columns=columns)
    cpu = {d: [] for d in DECODERS}
    for decoder, reader in readers.items():
        for unit in range(reader.num_row_groups):
            reader._read_unit(unit)  # warm-up
    for _ in range(passes):
        for decoder, reader in readers.items():
            start = time.process_time()
            for unit in range(reader.num_row_groups):
                reader._read_unit(unit)
            cpu[decoder].append(time.process_time() - start)
    return cpu


def reader_ab(store, train_path, columns, passes):
    from horovod_spark.data import make_reader

    def fresh(decoder, shuffle):
        os.environ[SWITCH] = decoder
        reader = make_reader("arrow", store=store, path=train_path, batch_size=256, columns=columns, shuffle=shuffle)

        def one_pass():
            n = 0
            with reader.iter_epoch(one_pass.epoch) as batches:
                for batch in batches:
                    n += len(batch["label"])
            one_pass.epoch += 1
            return n
        one_pass.epoch = 0
        return one_pass

    paths = {(kind, d): fresh(d, kind == "shuffled") for kind in ("shuffled", "in order") for d in DECODERS}
    for one_pass in paths.values():
        one_pass()
    wall = {k: [] for k in paths}
    cpu = {k: [] for k in paths}
    rows = 0
    for _ in range(passes):
        for key, one_pass in paths.items():
            w, c = time.perf_counter(), time.process_time()
            rows = one_pass()
            wall[key].append(time.perf_counter() - w)
            cpu[key].append(time.process_time() - c)
    for decoder in DECODERS:  # chained: one open iterator, timed alone (its read-ahead runs on)
        os.environ[SWITCH] = decoder
        reader = make_reader("arrow", store=store, path=train_path, batch_size=256, columns=columns)
        key = ("chained", decoder)
        wall[key], cpu[key] = [], []
        with reader.iter_batches() as batches:
            for i in range(passes + 1):
                w, c = time.perf_counter(), time.process_time()
                for _ in range(reader.steps_per_epoch):
                    next(batches)
                if i:
                    wall[key].append(time.perf_counter() - w)
                    cpu[key].append(time.process_time() - c)
    return rows, wall, cpu


def fit_ab(store, dataset_dir, features, fits, work_dir):
    import torch

    from benchmarks.estimator import _mlp
    from horovod_spark.estimator import TorchEstimator

    timer_file = os.path.join(work_dir, "epoch_seconds")
    wall = {d: [] for d in DECODERS}
    loop = {d: [] for d in DECODERS}
    losses = {d: [] for d in DECODERS}
    for i in range(fits + 1):  # the first round warms up (JIT, page cache, Python workers)
        for decoder in (DECODERS if i % 2 == 0 else DECODERS[::-1]):
            torch.manual_seed(0)
            model = _mlp(features)
            est = TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
                                 loss=torch.nn.functional.cross_entropy, feature_cols=["features"],
                                 label_cols=["label"], batch_size=256, epochs=1, random_seed=0, store=store,
                                 verbose=0, callbacks=[_EpochTimer(timer_file)])
            est._rank_env = lambda cfg, decoder=decoder: {SWITCH: decoder}
            start = time.perf_counter()
            fitted = est.fit_on_parquet(dataset_dir)
            seconds = time.perf_counter() - start
            loop_seconds, seen = open(timer_file).read().split()
            assert seen == decoder, (seen, decoder)
            if i:
                wall[decoder].append(seconds)
                loop[decoder].append(float(loop_seconds))
                losses[decoder].append(fitted.getHistory()["loss"][-1])
    return wall, loop, losses


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--passes", type=int, default=7, help="passes per decoder in (1) and (2)")
    parser.add_argument("--fits", type=int, default=4, help="timed fits per decoder in (3), after one warm-up each")
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    import posixpath

    from pyspark.sql import SparkSession

    from benchmarks.reader_throughput import make_dataframe
    from horovod_spark.data import prepare_data
    from horovod_spark.store import Store

    spark = (SparkSession.builder.master("local[2]").appName("parquet_decoder_ab")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.executorEnv.PYTHONPATH", REPO_ROOT).getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    work_dir = tempfile.mkdtemp(prefix="hs-decoder-ab-")
    try:
        store = Store.create(work_dir)
        prepared = prepare_data(store, make_dataframe(spark, args.rows, args.features), ["features"], ["label"],
                                num_proc=1)
        columns = prepared.columns
        dataset_dir = posixpath.dirname(prepared.train_path)
        print("%d rows x %d float32 features + int label; load average %.1f at the start"
              % (prepared.train_rows, args.features, os.getloadavg()[0]))
        cpu = decode_ab(store, prepared.train_path, columns, args.passes)
        print("(1) decode, CPU ms per pass, median [min .. max] of %d:" % args.passes)
        for d in DECODERS:
            print("    %-8s %s" % (d, _spread(cpu[d], 1000)))
        print("    hand / pyarrow speed-up (medians): %.2fx"
              % (statistics.median(cpu["pyarrow"]) / statistics.median(cpu["hand"])))
        rows, wall, rcpu = reader_ab(store, prepared.train_path, columns, args.passes)
        print("(2) reader, rows/s per pass (wall) and rows per CPU-second, median [min .. max] of %d:" % args.passes)
        for kind in ("shuffled", "in order", "chained"):
            for d in DECODERS:
                print("    %-9s %-8s wall %s   cpu %s" % (kind, d, _spread([rows / s for s in wall[(kind, d)]], 1e-6,
                                                                          "%.2fM"),
                                                          _spread([rows / s for s in rcpu[(kind, d)]], 1e-6, "%.2fM")))
            print("    %-9s hand / pyarrow: wall %.2fx, cpu %.2fx" % (
                kind, statistics.median(wall[(kind, "pyarrow")]) / statistics.median(wall[(kind, "hand")]),
                statistics.median(rcpu[(kind, "pyarrow")]) / statistics.median(rcpu[(kind, "hand")])))
        fwall, floop, losses = fit_ab(store, dataset_dir, args.features, args.fits, work_dir)
        print("(3) fit, one epoch, 2 ranks, seconds, median [min .. max] of %d (after a warm-up round):" % args.fits)
        for d in DECODERS:
            print("    %-8s wall %s   loop %s   loss %s" % (d, _spread(fwall[d], 1, "%.2f"),
                                                            _spread(floop[d], 1, "%.3f"),
                                                            " ".join("%.4f" % x for x in losses[d])))
        print("    hand / pyarrow speed-up: wall %.3fx, loop %.3fx"
              % (statistics.median(fwall["pyarrow"]) / statistics.median(fwall["hand"]),
                 statistics.median(floop["pyarrow"]) / statistics.median(floop["hand"])))
        print("load average at the end %.1f" % os.getloadavg()[0])
    finally:
        spark.stop()
        shutil.rmtree(work_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
