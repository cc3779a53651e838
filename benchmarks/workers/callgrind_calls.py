"""One rank that makes N calls of one kind, for benchmarks/callgrind_overhead.py to count.

``allreduce``: ``hvd.allreduce`` of a 4 KiB float32 tensor through horovod_spark.torch.
``optimizer_step``: one step of ``hvd.DistributedOptimizer`` (gradient hooks, allreduce of each
gradient, synchronize, SGD update) on a model of 16 bias-free 32x32 layers.
``torch_only``: the same model's step with a plain ``torch.optim.SGD``, the floor the
optimizer's count is compared with.
"""
import argparse

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=("allreduce", "optimizer_step", "torch_only"))
    p.add_argument("calls", type=int)
    args = p.parse_args()
    torch.set_num_threads(1)
    import horovod_spark.torch as hvd
    hvd.init()
    if args.kind == "allreduce":
        t = torch.ones(1024)
        for _ in range(args.calls):
            hvd.allreduce(t, name="x")
    else:
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(32, 32, bias=False) for _ in range(16)])
        opt = torch.optim.SGD(model.parameters(), lr=0.001)
        if args.kind == "optimizer_step":
            opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        x = torch.ones(4, 32)
        for _ in range(args.calls):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
    hvd.shutdown()


if __name__ == "__main__":
    main()
