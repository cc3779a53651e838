"""horovod_spark allreduce worker: ``horovod-spark-run -np N python hs_allreduce.py --sizes ...``.

Uses the public ``horovod_spark.torch`` API the way a training script does: in-place
``allreduce_`` with a stable name per tensor (so steady-state steps can hit the response cache,
as DistributedOptimizer's per-parameter names do). ``--collectives`` adds ``allgather``,
``broadcast_``, ``reducescatter`` and ``alltoall``, each with a stable name too.
"""
import itertools
import sys
import time

import _timing
import numpy as np

try:
    import torch

    import horovod_spark.torch as hvd
    from horovod_spark.common import ops
except ImportError as exc:
    sys.exit("horovod_spark worker: cannot import horovod_spark.torch (%s); is the native core built?" % exc)

GRAD_COUNT = 256
GRAD_BYTES = 16 << 10


class Adapter:
    def __init__(self):
        self.rank = hvd.rank()
        self.size = hvd.size()
        self._max_ids = itertools.count()

    def alloc(self, count):
        return torch.zeros(count, dtype=torch.float32)

    def fill(self, buf, value):
        buf.fill_(value)

    def ends(self, buf):
        return [float(buf[0]), float(buf[-1])]

    def allreduce(self, buf, nbytes):
        hvd.allreduce_(buf, op=hvd.Sum, name="bench.%d" % nbytes)

    def collective(self, name, buf):
        tag = "bench.%s.%d" % (name, buf.numel())
        if name == "broadcast":
            return (lambda: hvd.broadcast_(buf, root_rank=0, name=tag)), (lambda: buf.numpy())
        last = [None]
        if name == "allgather":
            def op():
                last[0] = hvd.allgather(buf, name=tag)
        elif name == "reducescatter":
            def op():
                last[0] = hvd.reducescatter(buf, op=hvd.Sum, name=tag)
        else:
            def op():
                out = hvd.alltoall(buf, name=tag)
                last[0] = out[0] if isinstance(out, tuple) else out  # (output, received splits)
        return op, (lambda: last[0].numpy())

    def barrier(self):
        hvd.barrier()

    def max_across(self, arr):
        t = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float64).copy())
        return hvd.allreduce(t, op=hvd.Max, name="bench.max.%d" % next(self._max_ids)).numpy()


def bench_grouped(adapter, quick, with_grouped):
    """One DistributedOptimizer-like step (many small async allreduces) vs one big allreduce."""
    grads = [torch.zeros(GRAD_BYTES // 4, dtype=torch.float32) for _ in range(GRAD_COUNT)]
    big = torch.zeros(GRAD_COUNT * GRAD_BYTES // 4, dtype=torch.float32)
    total = GRAD_COUNT * GRAD_BYTES

    def one_big():
        hvd.allreduce_(big, op=hvd.Sum, name="bench.big")

    submits = []  # how long the 256 calls themselves take, step by step

    def many_async():
        start = time.perf_counter()
        handles = [hvd.allreduce_async_(g, op=hvd.Sum, name="bench.grad.%d" % i) for i, g in enumerate(grads)]
        submits.append(time.perf_counter() - start)
        for h in handles:
            hvd.synchronize(h)

    def grouped():
        hvd.grouped_allreduce_(grads, op=hvd.Sum, name="bench.grouped")

    # The same step with one bare call into the core per tensor (arguments prepared beforehand, no
    # Python layer at all): what the calls would cost if the torch API added nothing.
    bare_args = [("allreduce.bench.bare.%d" % i, g.data_ptr(), g.data_ptr(), ops.DTYPES["float32"], g.shape,
                  int(hvd.Sum), 1.0, 1.0, 0) for i, g in enumerate(grads)]

    def many_bare():
        start = time.perf_counter()
        handles = [ops.enqueue_allreduce_prechecked(*a) for a in bare_args]
        submits.append(time.perf_counter() - start)
        for h in handles:
            ops.wait(h)

    variants = [("one_big", one_big), ("async_many", many_async)]
    if with_grouped:
        variants += [("grouped_many", grouped), ("bare_many", many_bare)]
    for variant, step in variants:
        for t in grads + [big]:
            t.fill_(1.0)
        step()
        touched = [big] if variant == "one_big" else grads
        bad = [float(t[0]) for t in touched if abs(float(t[0]) - adapter.size) > 1e-6 or
               abs(float(t[-1]) - adapter.size) > 1e-6]
        if bad:
            raise RuntimeError("%s step gave %r, expected %d" % (variant, bad[:3], adapter.size))
        for t in grads + [big]:
            t.zero_()
        times, est, usage = _timing.time_op(step, total, quick, adapter.max_across, adapter.barrier)
        if adapter.rank == 0:
            rec = {"kind": "grouped", "system": "horovod_spark", "np": adapter.size, "variant": variant,
                   "bytes": total, "tensors": 1 if variant == "one_big" else GRAD_COUNT,
                   "tensor_bytes": total if variant == "one_big" else GRAD_BYTES, "warmup_est_s": est}
            rec.update(_timing.summarize(times))
            rec.update(usage)
        if variant in ("async_many", "bare_many"):
            # The calls of the timed steps (the last len(times)); every rank timed as many.
            calls = adapter.max_across(np.array(submits[-len(times):]))
            if adapter.rank == 0:
                rec["submit_median_s"] = float(np.median(calls))
        if adapter.rank == 0:
            _timing.emit(rec)


def main():
    args = _timing.parse_args()
    hvd.init()
    adapter = Adapter()
    try:
        import horovod_spark
        _timing.emit_identity(adapter, "horovod_spark", "horovod_spark %s" % horovod_spark.__version__)
        _timing.bench_sizes(adapter, "horovod_spark", _timing.sizes_of(args.sizes), args.quick, args.timings)
        _timing.bench_collectives(adapter, "horovod_spark", args.collectives,
                                  _timing.sizes_of(args.collective_sizes), args.quick, args.timings)
        if args.grouped:
            bench_grouped(adapter, args.quick, args.grouped_ref)
    except Exception as exc:
        _timing.report_failure("horovod_spark", adapter.rank, exc)
        raise
    _emit_core_stats(adapter)
    hvd.shutdown()


def _emit_core_stats(adapter):
    """Negotiation counters (response-cache hits, fused tensors), where the core exposes them."""
    from horovod_spark.common import _core
    stats = getattr(_core, "stats", None)
    if stats is not None and adapter.rank == 0:
        rec = {"kind": "core_stats", "system": "horovod_spark", "np": adapter.size}
        rec.update(stats())
        _timing.emit(rec)


if __name__ == "__main__":
    main()
