"""Where a small horovod_spark allreduce spends its time, layer by layer.

    horovod-spark-run -np 2 python benchmarks/workers/hs_latency_breakdown.py [--bytes 4096]

Times (median over iterations of the slowest rank), for one tensor of --bytes:
  torch_allreduce_   hvd.allreduce_ as a training script calls it
  core_direct        horovod_spark.common.ops.allreduce_async + wait: no torch layer
  torch_submit       just the hvd.allreduce_async_ call (returns before data moves)
  torch_synchronize  just hvd.synchronize on that handle
  barrier            hvd.barrier: one negotiation round with no data
and for a DistributedOptimizer-like step of --count tensors of --tensor-bytes:
  step_submit        the loop of allreduce_async_ calls
  step_synchronize   the loop of synchronize calls
  step_first_handle  from the end of submission until the first tensor's synchronize returns
  step_whole         both loops
  step_core_direct   the same step through horovod_spark.common.ops: no torch layer
  step_core_counters fused responses per step (from the core's counters, where it has them)
Pair it with --timeline-filename on the launcher and benchmarks/timeline_summary.py to split the
core's share into negotiation and data movement.
"""
import argparse
import time

import _timing
import numpy as np
import torch

import horovod_spark.torch as hvd
from horovod_spark.common import _core, ops


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bytes", type=int, default=4096)
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--count", type=int, default=256)
    p.add_argument("--tensor-bytes", type=int, default=16 << 10)
    p.add_argument("--steps", type=int, default=100)
    args = p.parse_args()
    hvd.init()
    rank = hvd.rank()
    max_ids = iter(range(1 << 30))

    def max_across(arr):
        t = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float64).copy())
        return hvd.allreduce(t, op=hvd.Max, name="breakdown.max.%d" % next(max_ids)).numpy()

    def measure(label, fn, iters, extra=None):
        for _ in range(max(10, iters // 10)):
            fn()
        hvd.barrier()
        times = np.empty(iters)
        for i in range(iters):
            times[i] = fn()
        times = max_across(times)
        if rank == 0:
            rec = {"kind": "breakdown", "what": label, "np": hvd.size()}
            rec.update(extra or {})
            rec.update(_timing.summarize(times))
            _timing.emit(rec)

    clock = time.perf_counter
    buf = torch.zeros(args.bytes // 4, dtype=torch.float32)
    ptr, shape = buf.data_ptr(), tuple(buf.shape)
    size_info = {"bytes": args.bytes}

    def torch_allreduce():
        t = clock()
        hvd.allreduce_(buf, op=hvd.Sum, name="bd.torch")
        return clock() - t

    def core_direct():
        t = clock()
        ops.wait(ops.allreduce_async("allreduce.bd.core", ptr, ptr, "float32", shape, ops.Sum))
        return clock() - t

    def torch_submit():
        t = clock()
        h = hvd.allreduce_async_(buf, op=hvd.Sum, name="bd.split")
        d = clock() - t
        hvd.synchronize(h)
        return d

    def torch_synchronize():
        h = hvd.allreduce_async_(buf, op=hvd.Sum, name="bd.split")
        t = clock()
        hvd.synchronize(h)
        return clock() - t

    def barrier():
        t = clock()
        hvd.barrier()
        return clock() - t

    for label, fn in (("torch_allreduce_", torch_allreduce), ("core_direct", core_direct),
                      ("torch_submit", torch_submit), ("torch_synchronize", torch_synchronize),
                      ("barrier", barrier)):
        measure(label, fn, args.iters, size_info)

    grads = [torch.zeros(args.tensor_bytes // 4, dtype=torch.float32) for _ in range(args.count)]
    names = ["bd.grad.%d" % i for i in range(args.count)]
    step_info = {"tensors": args.count, "tensor_bytes": args.tensor_bytes}
    split = {}

    def step_submit():
        t = clock()
        split["h"] = [hvd.allreduce_async_(g, op=hvd.Sum, name=n) for g, n in zip(grads, names)]
        d = clock() - t
        for h in split["h"]:
            hvd.synchronize(h)
        return d

    def step_synchronize():
        handles = [hvd.allreduce_async_(g, op=hvd.Sum, name=n) for g, n in zip(grads, names)]
        t = clock()
        for h in handles:
            hvd.synchronize(h)
        return clock() - t

    def step_first_handle():
        handles = [hvd.allreduce_async_(g, op=hvd.Sum, name=n) for g, n in zip(grads, names)]
        t = clock()
        hvd.synchronize(handles[0])
        d = clock() - t
        for h in handles[1:]:
            hvd.synchronize(h)
        return d

    def step_whole():
        t = clock()
        handles = [hvd.allreduce_async_(g, op=hvd.Sum, name=n) for g, n in zip(grads, names)]
        for h in handles:
            hvd.synchronize(h)
        return clock() - t

    core_names = ["allreduce.bd.core.%d" % i for i in range(args.count)]
    core_bufs = [(g.data_ptr(), tuple(g.shape)) for g in grads]

    def step_core_direct():
        t = clock()
        handles = [ops.allreduce_async(n, p, p, "float32", shp, ops.Sum) for n, (p, shp) in zip(core_names, core_bufs)]
        for h in handles:
            ops.wait(h)
        return clock() - t

    measure("step_submit", step_submit, args.steps, step_info)
    measure("step_synchronize", step_synchronize, args.steps, step_info)
    measure("step_first_handle", step_first_handle, args.steps, step_info)
    stats = getattr(_core, "stats", None)
    before = stats() if stats else None
    measure("step_whole", step_whole, args.steps, step_info)
    if stats and rank == 0:
        after = stats()
        # Includes the warm-up steps and the few small ops measure() adds; per step it is exact
        # enough to tell one fused response from hundreds.
        steps = args.steps + max(10, args.steps // 10)
        _timing.emit({"kind": "breakdown", "what": "step_core_counters", "np": hvd.size(),
                      "responses_per_step": (after["responses"] - before["responses"]) / steps,
                      "fused_tensors_per_step": (after["fused_tensors"] - before["fused_tensors"]) / steps,
                      "cached_requests_per_step": (after["requests_cached"] - before["requests_cached"]) / steps})
    measure("step_core_direct", step_core_direct, args.steps, step_info)
    hvd.shutdown()


if __name__ == "__main__":
    main()
