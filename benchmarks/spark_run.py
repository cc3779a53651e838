"""Launch overhead of horovod_spark.run on one local[2] SparkSession.

    python benchmarks/spark_run.py [--repeats 7] [--num-proc 2]

Rows (median of --repeats after one warm-up each): an empty barrier job (the floor any
barrier-mode launcher pays), horovod_spark.run() of a no-op, run() of hvd.init + one allreduce
(through the core's raw API, and through horovod_spark.torch, which adds importing torch in every
rank; skipped when the native core does not import), and
TorchDistributor(local_mode=False).run(no-op) for comparison. The target is run()
of a no-op within 1.5 s of the empty barrier job, and below TorchDistributor.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO_ROOT)


def noop():
    return None


def one_allreduce_core():
    """hvd.init + one allreduce through the core's raw-buffer API: launch cost without torch."""
    import numpy as np

    from horovod_spark.common import basics, ops
    basics.init()
    buf = np.ones(4, dtype=np.float32)
    ops.wait(ops.allreduce_async("bench", buf.ctypes.data, buf.ctypes.data, "float32", (4,), ops.Sum))
    basics.shutdown()
    return float(buf[0])


def one_allreduce_torch():
    """The same through horovod_spark.torch: adds importing torch in every rank."""
    import torch

    import horovod_spark.torch as hvd
    hvd.init()
    out = hvd.allreduce(torch.ones(4), name="bench", op=hvd.Sum)
    hvd.shutdown()
    return float(out[0])


def _core_importable() -> bool:
    probe = subprocess.run([sys.executable, "-c", "import horovod_spark.torch"], cwd=REPO_ROOT,
                           env=dict(os.environ, PYTHONPATH=REPO_ROOT), capture_output=True, timeout=120)
    return probe.returncode == 0


def _time(fn, repeats):
    fn()  # warm-up: Python workers, imports, JIT of the first job
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--num-proc", type=int, default=2)
    opts = parser.parse_args()
    n = opts.num_proc

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    import cloudpickle
    from pyspark.sql import SparkSession

    import horovod_spark

    # Benchmark functions travel by value, so executors need only horovod_spark itself.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark = (SparkSession.builder.master("local[%d]" % n).appName("bench_spark_run")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.executorEnv.PYTHONPATH", REPO_ROOT)
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    sc = spark.sparkContext
    rows = []
    try:
        rows.append(("empty barrier job", _time(
            lambda: sc.parallelize(range(n), n).barrier().mapPartitions(lambda it: []).collect(),
            opts.repeats)))
        rows.append(("run(noop)", _time(
            lambda: horovod_spark.run(noop, num_proc=n, verbose=0), opts.repeats)))
        for name, fn in (("run(init + 1 allreduce, core)", one_allreduce_core),
                         ("run(init + 1 allreduce, torch)", one_allreduce_torch)):
            if _core_importable():
                rows.append((name, _time(lambda: horovod_spark.run(fn, num_proc=n, verbose=0),
                                         opts.repeats)))
            else:
                rows.append((name, None))
        try:
            from pyspark.ml.torch.distributor import TorchDistributor
            distributor = TorchDistributor(num_processes=n, local_mode=False, use_gpu=False)
            rows.append(("TorchDistributor(noop)", _time(lambda: distributor.run(noop), opts.repeats)))
        except ImportError as exc:
            print("TorchDistributor unavailable: %s" % exc)
    finally:
        spark.stop()

    floor = statistics.median(rows[0][1])
    print("\nlocal[%d], num_proc=%d, %d repeats (seconds)" % (n, n, opts.repeats))
    print("%-32s %8s %8s %8s %12s" % ("launch", "median", "min", "max", "vs barrier"))
    for name, samples in rows:
        if samples is None:
            print("%-32s %8s   (native core not importable: skipped)" % (name, "-"))
            continue
        med = statistics.median(samples)
        print("%-32s %8.3f %8.3f %8.3f %+12.3f" % (name, med, min(samples), max(samples), med - floor))


if __name__ == "__main__":
    main()
