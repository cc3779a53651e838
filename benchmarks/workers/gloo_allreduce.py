"""torch.distributed (gloo) allreduce worker: ``torchrun --standalone --nproc_per_node N gloo_allreduce.py``.

Reads rank/world size/master address from the environment torchrun sets, like any DDP script.
torchrun binds no rank to CPUs; the worker binds itself as the other launchers bind theirs
(``_timing.bind_to_share``). ``--collectives`` adds all_gather_into_tensor, broadcast,
reduce_scatter_tensor and all_to_all_single.
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

    def collective(self, name, buf):
        n = self.size
        if name == "broadcast":
            return (lambda: dist.broadcast(buf, src=0)), (lambda: buf.numpy())
        out = torch.empty(buf.numel() * n if name == "allgather" else buf.numel() // n
                          if name == "reducescatter" else buf.numel(), dtype=buf.dtype)
        if name == "allgather":
            op = lambda: dist.all_gather_into_tensor(out, buf)  # noqa: E731
        elif name == "reducescatter":
            op = lambda: dist.reduce_scatter_tensor(out, buf, op=dist.ReduceOp.SUM)  # noqa: E731
        else:
            op = lambda: dist.all_to_all_single(out, buf)  # noqa: E731
        return op, (lambda: out.numpy())

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
    _timing.bind_to_share()
    dist.init_process_group("gloo")
    adapter = Adapter()
    try:
        _timing.emit_identity(adapter, "gloo", "torch %s (gloo)" % torch.__version__)
        _timing.bench_sizes(adapter, "gloo", _timing.sizes_of(args.sizes), args.quick, args.timings)
        _timing.bench_collectives(adapter, "gloo", args.collectives, _timing.sizes_of(args.collective_sizes),
                                  args.quick, args.timings)
    except Exception as exc:
        _timing.report_failure("gloo", adapter.rank, exc)
        raise
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
