"""One rank that makes N calls of one kind, for benchmarks/callgrind_overhead.py to count.

``allreduce``: ``hvd.allreduce`` of a 4 KiB float32 tensor through horovod_spark.torch;
``allgather``, ``broadcast_``, ``reducescatter``, ``alltoall``: the same tensor's blocking call.
``allreduce_pair``: ``hvd.allreduce_`` in place of a 4 KiB float32 tensor, ``op=Sum``, on two
ranks: the steady-state small allreduce of benchmarks/allreduce.py (cached, speculative).
``optimizer_step``: one step of ``hvd.DistributedOptimizer`` (gradient hooks, allreduce of each
gradient, synchronize, SGD update) on a model of 16 bias-free 32x32 layers.
``torch_only``: the same model's step with a plain ``torch.optim.SGD``, the floor the
optimizer's count is compared with.
``optimizer_hooks``: the optimizer's own path alone, with the model's gradients already in place:
each parameter's post-accumulate-grad hook (what backward calls) and ``synchronize()`` (what
``step()`` calls before the update); no forward, backward or update.
"""
import argparse

import torch

DATA_CALLS = {
    "allgather": lambda hvd, t: hvd.allgather(t, name="x"),
    "broadcast_": lambda hvd, t: hvd.broadcast_(t, root_rank=0, name="x"),
    "reducescatter": lambda hvd, t: hvd.reducescatter(t, op=hvd.Sum, name="x"),
    "alltoall": lambda hvd, t: hvd.alltoall(t, name="x"),
}
KINDS = ("allreduce", "allreduce_pair", "optimizer_step", "torch_only", "optimizer_hooks") + tuple(DATA_CALLS)
LAYERS = 16


def main():
    p = argparse.ArgumentParser()
    p.add_argument("kind", choices=KINDS)
    p.add_argument("calls", type=int)
    args = p.parse_args()
    torch.set_num_threads(1)
    import horovod_spark.torch as hvd
    hvd.init()
    if args.kind == "allreduce":
        t = torch.ones(1024)
        for _ in range(args.calls):
            hvd.allreduce(t, name="x")
    elif args.kind == "allreduce_pair":
        t = torch.ones(1024)
        for _ in range(args.calls):
            hvd.allreduce_(t, op=hvd.Sum, name="bench.4096")
    elif args.kind in DATA_CALLS:
        t, call = torch.ones(1024), DATA_CALLS[args.kind]
        for _ in range(args.calls):
            call(hvd, t)
    else:
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(32, 32, bias=False) for _ in range(LAYERS)])
        opt = torch.optim.SGD(model.parameters(), lr=0.001)
        if args.kind in ("optimizer_step", "optimizer_hooks"):
            opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        x = torch.ones(4, 32)
        if args.kind == "optimizer_hooks":
            hooks_only(model, opt, args.calls)
            hvd.shutdown()
            return
        for _ in range(args.calls):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
    hvd.shutdown()


def hooks_only(model, opt, calls):
    params = list(model.parameters())
    for p in params:
        p.grad = torch.ones_like(p)
    # The hooks DistributedOptimizer registered, called as autograd calls them after accumulating.
    hooks = [(p, list(p._post_accumulate_grad_hooks.values())) for p in params]
    for _ in range(calls):
        for p, param_hooks in hooks:
            for hook in param_hooks:
                hook(p)
        opt.synchronize()
        opt._synchronized = False  # no step() follows, which would clear it


if __name__ == "__main__":
    main()
