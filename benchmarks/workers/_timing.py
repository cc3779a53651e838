"""Timing loop shared by the per-system allreduce workers.

Each worker wraps its system in a small adapter (alloc / fill / allreduce / barrier / max_across,
and ``collective`` for the other collectives) and calls ``bench_sizes``; rank 0 prints one
``BENCH_JSON {...}`` line per size and timing, which the driver (benchmarks/allreduce.py) picks out
of whatever prefixes the launcher adds to the output.

Two timings: ``back_to_back`` (iteration after iteration, as a training loop issues them, so one
iteration's late rank overlaps the next) and ``barrier`` (a barrier before each iteration, so every
iteration starts with all ranks ready). Both time each iteration and keep the slowest rank's time.
"""
import argparse
import json
import os
import resource
import sys
import time

import numpy as np

MARKER = "BENCH_JSON "

# Per-size time budget and iteration bounds. The iteration count is derived from a warm-up
# estimate agreed across ranks (max), so every rank runs the same number of collectives.
FULL = dict(budget_s=1.0, min_iters=10, max_iters=20000)
QUICK = dict(budget_s=0.25, min_iters=5, max_iters=2000)
TIMINGS = ("back_to_back", "barrier")
# Sizes name each rank's input: allgather returns n times it, reducescatter 1/n of it, alltoall
# sends 1/n of it to every rank.
COLLECTIVES = ("allgather", "broadcast", "reducescatter", "alltoall")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="allreduce timing worker (run under a launcher)")
    parser.add_argument("--sizes", required=True, help="comma-separated message sizes in bytes")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--grouped", action="store_true",
                        help="also time many small async allreduces vs one large (horovod_spark only)")
    parser.add_argument("--grouped-ref", action="store_true",
                        help="with --grouped, also time grouped_allreduce_ of the same tensors")
    parser.add_argument("--timings", default="back_to_back",
                        help="comma-separated: %s" % ", ".join(TIMINGS))
    parser.add_argument("--collectives", default="",
                        help="comma-separated, also timed at --collective-sizes: %s" % ", ".join(COLLECTIVES))
    parser.add_argument("--collective-sizes", default="", help="comma-separated sizes in bytes")
    args = parser.parse_args(argv)
    args.timings = [t for t in args.timings.split(",") if t]
    args.collectives = [c for c in args.collectives.split(",") if c]
    bad = [t for t in args.timings if t not in TIMINGS] + [c for c in args.collectives if c not in COLLECTIVES]
    if bad:
        parser.error("unknown timing or collective %s (timings: %s; collectives: %s)"
                     % (", ".join(bad), ", ".join(TIMINGS), ", ".join(COLLECTIVES)))
    return args


def sizes_of(text):
    return [int(s) for s in text.split(",") if s]


def emit(record):
    sys.stdout.write(MARKER + json.dumps(record) + "\n")
    sys.stdout.flush()


def warmup_count(nbytes, quick):
    if nbytes >= (16 << 20):
        return 2 if quick else 3
    if nbytes >= (256 << 10):
        return 5 if quick else 10
    return 20 if quick else 50


def time_op(op, nbytes, quick, max_across, barrier, barrier_each=False, rank_of=None):
    """Per-op times of ``op`` (one collective step), as the max over ranks of each iteration;
    ``barrier_each``: an untimed barrier before every iteration; ``rank_of``: (rank, size), to
    also report every rank's CPU seconds per op (``cpu_s_per_op_ranks``).

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
    if barrier_each:
        for i in range(iters):
            barrier()
            t = clock()
            op()
            times[i] = clock() - t
    else:
        for i in range(iters):
            t = clock()
            op()
            times[i] = clock() - t
    after = resource.getrusage(resource.RUSAGE_SELF)
    # Sleeps (voluntary switches) and CPU burnt per op tell a polling wait from a blocking one.
    usage = max_across(np.array([after.ru_nvcsw - before.ru_nvcsw, after.ru_nivcsw - before.ru_nivcsw,
                                 (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)],
                                dtype=np.float64) / iters)
    stats = {"vol_csw_per_op": float(usage[0]), "invol_csw_per_op": float(usage[1]), "cpu_s_per_op": float(usage[2])}
    if rank_of is not None:
        # Each rank fills its own slot of zeros, so the max over ranks lists them all.
        rank, size = rank_of
        mine = np.zeros(size)
        mine[rank] = ((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)) / iters
        stats["cpu_s_per_op_ranks"] = [float(x) for x in max_across(mine)]
    # The slowest rank defines when an iteration is done for the job as a whole.
    return max_across(times), est, stats


def summarize(times):
    return {
        "iters": int(times.size),
        "median_s": float(np.median(times)),
        "min_s": float(times.min()),
        "p90_s": float(np.percentile(times, 90)),
        "p99_s": float(np.percentile(times, 99)),
        "mean_s": float(times.mean()),
    }


def _record(adapter, system, kind, nbytes, timing, times, est, usage, **extra):
    rec = {"kind": kind, "system": system, "np": adapter.size, "bytes": nbytes, "timing": timing,
           "warmup_est_s": est}
    rec.update(extra)
    rec.update(summarize(times))
    rec.update(usage)
    rec["algbw_GBps"] = nbytes / rec["median_s"] / 1e9
    emit(rec)


def bench_sizes(adapter, system, sizes, quick, timings=("back_to_back",)):
    """Time in-place float32 Sum allreduce for each size; rank 0 emits one record per size and timing."""
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
        for timing in timings:
            times, est, usage = time_op(lambda buf=buf, nbytes=nbytes: adapter.allreduce(buf, nbytes), nbytes,
                                        quick, adapter.max_across, adapter.barrier, timing == "barrier",
                                        rank_of=(rank, nranks))
            if rank == 0:
                _record(adapter, system, "allreduce", nbytes, timing, times, est, usage)


def expected_output(name, rank, nranks, count):
    """What ``name`` returns on ``rank`` when rank r's input is all r + 1 (as float64 numpy)."""
    inputs = [np.full(count, r + 1.0) for r in range(nranks)]
    if name == "allgather":
        return np.concatenate(inputs)
    if name == "broadcast":
        return inputs[0]
    if name == "reducescatter":
        return sum(inputs)[rank * count // nranks:(rank + 1) * count // nranks]
    return np.concatenate([x[rank * count // nranks:(rank + 1) * count // nranks] for x in inputs])


def bench_collectives(adapter, system, names, sizes, quick, timings=("back_to_back",)):
    """Time each collective of ``names`` on float32 inputs of each size. The adapter's
    ``collective(name, buf)`` returns (op, output): ``op()`` runs it once, ``output()`` gives the
    last result as numpy."""
    rank, nranks = adapter.rank, adapter.size
    for name in names:
        for nbytes in sizes:
            count = nbytes // 4
            if count % nranks:
                raise ValueError("%s of %d bytes: %d floats do not split into %d ranks" % (name, nbytes, count, nranks))
            buf = adapter.alloc(count)
            adapter.fill(buf, rank + 1.0)
            op, output = adapter.collective(name, buf)
            op()
            got, want = np.asarray(output(), dtype=np.float64), expected_output(name, rank, nranks, count)
            if got.shape != want.shape or not np.array_equal(got, want):
                raise RuntimeError("%s %s of %d bytes on rank %d gave %r..., expected %r..."
                                   % (system, name, nbytes, rank, got[:3], want[:3]))
            for timing in timings:
                times, est, usage = time_op(op, nbytes, quick, adapter.max_across, adapter.barrier,
                                            timing == "barrier")
                if rank == 0:
                    _record(adapter, system, name, nbytes, timing, times, est, usage)


def emit_identity(adapter, system, library):
    """Every rank: the CPUs it may run on (its binding); rank 0 also: the library it runs."""
    emit({"kind": "affinity", "system": system, "np": adapter.size, "rank": adapter.rank,
          "cpus": sorted(os.sched_getaffinity(0))})
    if adapter.rank == 0:
        emit({"kind": "library", "system": system, "np": adapter.size, "library": library})


def bind_to_share():
    """Binds this process to its rank's share of the CPUs it may use, as horovod-spark-run and the
    MPIs' launchers bind their ranks; for launchers that bind nothing (torchrun). The share:
    BENCH_CPUS_PER_RANK CPUs (0: leave the OS to place the rank), chosen by LOCAL_RANK."""
    per_rank = int(os.environ.get("BENCH_CPUS_PER_RANK", "0"))
    if per_rank <= 0:
        return
    cpus = sorted(os.sched_getaffinity(0))
    first = int(os.environ.get("LOCAL_RANK", "0")) * per_rank % len(cpus)
    os.sched_setaffinity(0, cpus[first:first + per_rank])


def report_failure(system, rank, exc):
    sys.stderr.write("%s worker rank %d failed: %s: %s\n" % (system, rank, type(exc).__name__, exc))
    sys.stderr.flush()
