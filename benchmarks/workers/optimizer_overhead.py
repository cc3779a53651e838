"""DistributedOptimizer's own Python cost per step, apart from the collectives it starts:

    horovod-spark-run -np 2 python benchmarks/workers/optimizer_overhead.py

256 parameters of 16 KiB with gradients already in place. Each round times (a) the 256 gradient
hooks firing (what backward triggers) and the optimizer's synchronize(), and (b) the same 256
tensors through bare `allreduce_async_` + `synchronize`. (a) - (b) is the optimizer's overhead.
Medians over rounds, rank 0.
"""
import time

import numpy as np
import torch

import horovod_spark.torch as hvd


def main():
    hvd.init()
    torch.set_num_threads(1)
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64, bias=False) for _ in range(256)])
    params = list(model.parameters())
    for p in params:
        p.grad = torch.ones_like(p)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=1e-3), named_parameters=model.named_parameters())
    # The hooks DistributedOptimizer registered, called as autograd calls them after accumulating.
    hooks = [(p, list(p._post_accumulate_grad_hooks.values())) for p in params]
    names = ["bare.%d" % i for i in range(len(params))]
    rows = {"hooks": [], "optimizer synchronize": [], "bare submit": [], "bare synchronize": []}
    for i in range(330):
        t0 = time.perf_counter()
        for p, param_hooks in hooks:
            for hook in param_hooks:
                hook(p)
        t1 = time.perf_counter()
        opt.synchronize()
        t2 = time.perf_counter()
        opt._synchronized = False  # (no step() follows)
        handles = [hvd.allreduce_async_(p.grad, name=n) for p, n in zip(params, names)]
        t3 = time.perf_counter()
        for h in handles:
            hvd.synchronize(h)
        t4 = time.perf_counter()
        if i >= 30:
            for key, value in zip(rows, (t1 - t0, t2 - t1, t3 - t2, t4 - t3)):
                rows[key].append(value)
    if hvd.rank() == 0:
        med = {k: np.median(v) * 1e6 for k, v in rows.items()}
        print("  ".join("%s %.0f us" % kv for kv in med.items()))
        print("optimizer overhead per step: %.0f us" % (med["hooks"] + med["optimizer synchronize"] -
                                                       med["bare submit"] - med["bare synchronize"]))
    hvd.shutdown()


if __name__ == "__main__":
    main()
