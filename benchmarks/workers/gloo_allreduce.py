"""torch.distributed (gloo) allreduce worker: ``torchrun --standalone --nproc_per_node N gloo_allreduce.py``.

Reads rank/world size/master address from the environment torchrun sets, like any DDP script.
"""
import sys

import _timing
import numpy as np

try:
    import torch
    import torch.distributed as dist
except ImportError as exc:
    sys.exit("gloo worker: torch is not importable (%s)" % exc)


class Adapter:
    def __init__(self):
        self.rank = dist.get_rank()
        self.size = dist.get_world_size()

    def alloc(self, count):
        return torch.zeros(count, dtype=torch.float32)

    def fill(self, buf, value):
        buf.fill_(value)

    def ends(self, buf):
        return [float(buf[0]), float(buf[-1])]

    def allreduce(self, buf, nbytes):
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)

    def barrier(self):
        dist.barrier()

    def max_across(self, arr):
        t = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float64).copy())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.numpy()


def main():
    args = _timing.parse_args()
    if not dist.is_available() or not dist.is_gloo_available():
        sys.exit("gloo worker: this torch build has no gloo backend")
    dist.init_process_group("gloo")
    adapter = Adapter()
    try:
        _timing.bench_sizes(adapter, "gloo", [int(s) for s in args.sizes.split(",")], args.quick)
    except Exception as exc:
        _timing.report_failure("gloo", adapter.rank, exc)
        raise
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
