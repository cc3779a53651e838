"""Steps of many tensors against one tensor of the same bytes, through the torch API with
DistributedOptimizer's op (Average), timed on each rank (median of rank 0):

    horovod-spark-run -np 2 python benchmarks/workers/hs_fused_steps.py
    PYTHONPATH=/path/to/other/checkout horovod-spark-run -np 2 python benchmarks/workers/hs_fused_steps.py

The second form times another build of horovod_spark the same way (an A/B of two revisions:
alternate the two commands). Shapes: 256 x 16 KiB, 16 x 4 MiB and 64 x 1 MiB, each as
`allreduce_async_` + `synchronize` per tensor, as one `grouped_allreduce_`, and as one
`allreduce_` of the same total size.
"""
import time

import numpy as np
import torch

import horovod_spark.torch as hvd


def median_us(fn, steps):
    for _ in range(max(3, steps // 10)):
        fn()
    hvd.barrier()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return np.median(times) * 1e6


def main():
    hvd.init()
    lines = []
    for label, count, elements, steps in [("256 x 16 KiB", 256, 4096, 600), ("16 x 4 MiB", 16, 1 << 20, 60),
                                          ("64 x 1 MiB", 64, 1 << 18, 60)]:
        tensors = [torch.ones(elements) for _ in range(count)]
        names = ["%s.%d" % (label, i) for i in range(count)]
        whole = torch.ones(count * elements)

        def per_tensor():
            handles = [hvd.allreduce_async_(t, name=n) for t, n in zip(tensors, names)]
            for h in handles:
                hvd.synchronize(h)

        def grouped():
            hvd.grouped_allreduce_(tensors, name=label + ".grouped")

        def one():
            hvd.allreduce_(whole, name=label + ".one")

        lines.append("%-13s per-tensor async %9.0f us   grouped %9.0f us   one tensor %9.0f us" % (
            label, median_us(per_tensor, steps), median_us(grouped, steps), median_us(one, steps)))
    if hvd.rank() == 0:
        print("\n".join(lines))
    hvd.shutdown()


if __name__ == "__main__":
    main()
