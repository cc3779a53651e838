"""Timing loop shared by the per-system allreduce workers.

Each worker wraps its system in a small adapter (alloc / fill / allreduce / barrier / max_across)
and calls ``bench_sizes``; rank 0 prints one ``BENCH_JSON {...}`` line per size, which the driver
(benchmarks/allreduce.py) picks out of whatever prefixes the launcher adds to the output.
"""
import argparse
import json
import resource
import sys
import time

import numpy as np

MARKER = "BENCH_JSON "

# Per-size time budget and iteration bounds. The iteration count is derived from a warm-up
# estimate agreed across ranks (max), so every rank runs the same number of collectives.
FULL = dict(budget_s=1.0, min_iters=10, max_iters=20000)
QUICK = dict(budget_s=0.25, min_iters=5, max_iters=2000)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="allreduce timing worker (run under a launcher)")
    parser.add_argument("--sizes", required=True, help="comma-separated message sizes in bytes")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--grouped", action="store_true",
                        help="also time many small async allreduces vs one large (horovod_spark only)")
    parser.add_argument("--grouped-ref", action="store_true",
                        help="with --grouped, also time grouped_allreduce_ of the same tensors")
    return parser.parse_args(argv)


def emit(record):
    sys.stdout.write(MARKER + json.dumps(record) + "\n")
    sys.stdout.flush()


def warmup_count(nbytes, quick):
    if nbytes >= (16 << 20):
        return 2 if quick else 3
    if nbytes >= (256 << 10):
        return 5 if quick else 10
    return 20 if quick else 50


def time_op(op, nbytes, quick, max_across, barrier):
    """Per-op times of ``op`` (one collective step), as the max over ranks of each iteration.

    Returns (times, warmup_estimate_s, per-op rusage of the busiest rank). Every rank must call
    this with the same arguments.
    """
    limits = QUICK if quick else FULL
    warm = warmup_count(nbytes, quick)
    t0 = time.perf_counter()
    for _ in range(warm):
        op()
    local_est = (time.perf_counter() - t0) / warm
    est = float(max_across(np.array([local_est]))[0])
    iters = int(min(limits["max_iters"], max(limits["min_iters"], limits["budget_s"] / max(est, 1e-9))))
    times = np.empty(iters, dtype=np.float64)
    barrier()
    clock = time.perf_counter
    before = resource.getrusage(resource.RUSAGE_SELF)
    for i in range(iters):
        t = clock()
        op()
        times[i] = clock() - t
    after = resource.getrusage(resource.RUSAGE_SELF)
    # Sleeps (voluntary switches) and CPU burnt per op tell a polling wait from a blocking one.
    usage = max_across(np.array([after.ru_nvcsw - before.ru_nvcsw, after.ru_nivcsw - before.ru_nivcsw,
                                 (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)],
                                dtype=np.float64) / iters)
    # The slowest rank defines when an iteration is done for the job as a whole.
    return max_across(times), est, {"vol_csw_per_op": float(usage[0]), "invol_csw_per_op": float(usage[1]),
                                    "cpu_s_per_op": float(usage[2])}


def summarize(times):
    return {
        "iters": int(times.size),
        "median_s": float(np.median(times)),
        "min_s": float(times.min()),
        "p90_s": float(np.percentile(times, 90)),
        "p99_s": float(np.percentile(times, 99)),
        "mean_s": float(times.mean()),
    }


def bench_sizes(adapter, system, sizes, quick):
    """Time in-place float32 Sum allreduce for each size; rank 0 emits one record per size."""
    rank, nranks = adapter.rank, adapter.size
    for nbytes in sizes:
        count = nbytes // 4
        buf = adapter.alloc(count)
        # Fast-but-wrong must not pass for fast: check one real reduction before timing.
        adapter.fill(buf, 1.0)
        adapter.allreduce(buf, nbytes)
        got = adapter.ends(buf)
        if any(abs(v - nranks) > 1e-6 for v in got):
            raise RuntimeError("%s allreduce of %d bytes gave %r, expected %d everywhere"
                               % (system, nbytes, got, nranks))
        # Zeros stay zeros under Sum, so repeated in-place reductions never reach inf/NaN.
        adapter.fill(buf, 0.0)
        times, est, usage = time_op(lambda buf=buf, nbytes=nbytes: adapter.allreduce(buf, nbytes), nbytes, quick,
                                    adapter.max_across, adapter.barrier)
        if rank == 0:
            rec = {"kind": "allreduce", "system": system, "np": nranks, "bytes": nbytes,
                   "warmup_est_s": est}
            rec.update(summarize(times))
            rec.update(usage)
            rec["algbw_GBps"] = nbytes / rec["median_s"] / 1e9
            emit(rec)


def report_failure(system, rank, exc):
    sys.stderr.write("%s worker rank %d failed: %s: %s\n" % (system, rank, type(exc).__name__, exc))
    sys.stderr.flush()
