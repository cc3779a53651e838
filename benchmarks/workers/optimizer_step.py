"""One training step of a model with many small parameters, timed on each rank (see
benchmarks/optimizer_step.py, which launches this the way each system's users do).

    --mode local   plain torch optimizer, no communication: the compute alone (under
                   horovod-spark-run, N such processes at once, as busy as the real ranks)
    --mode hvd     under horovod-spark-run: hvd.DistributedOptimizer (--groups: Horovod's groups=;
                   --until-tuned: with HOROVOD_AUTOTUNE=1, time the steps after autotune's search)
    --mode ddp     under torchrun: torch DistributedDataParallel over gloo (buckets of 25 MB)
Rank 0 prints one BENCH_JSON line: the median over steps of the slowest rank's step time.
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _timing  # noqa: E402


def make_model(layers, width):
    torch.manual_seed(0)
    # Bias-free square layers: every parameter is width*width float32 (16 KiB at width 64).
    return torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(layers)])


def tune(hvd, step, limit=3000):
    """Steps until autotune's search has ended on every rank (they learn it at slightly different
    steps, so they agree through an allreduce); what it chose and how many steps it took."""
    from horovod_spark.common import basics
    steps, start = 0, time.perf_counter()
    while steps < limit:
        step()
        steps += 1
        searching = torch.tensor([float(basics.autotune_parameters()["searching"])])
        if not hvd.allreduce(searching, op=hvd.Max, name="autotune_searching").item():
            break
    params = basics.autotune_parameters()
    if params["searching"] or not params["enabled"]:
        raise RuntimeError("autotune did not finish in %d steps (is HOROVOD_AUTOTUNE=1 set?): %s" % (limit, params))
    return {"tuning_steps": steps, "tuning_s": time.perf_counter() - start,
            "fusion_threshold": params["fusion_threshold"], "response_cache": params["response_cache"]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["local", "hvd", "ddp"], required=True)
    p.add_argument("--groups", type=int, default=0, help="hvd only: DistributedOptimizer(groups=N); 0 = None")
    p.add_argument("--layers", type=int, default=256)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--until-tuned", action="store_true",
                   help="hvd only (with HOROVOD_AUTOTUNE=1): warm up until autotune's search has ended, then time")
    args = p.parse_args()
    if args.until_tuned and args.mode != "hvd":
        p.error("--until-tuned needs --mode hvd")
    torch.set_num_threads(1)  # two ranks share the two cores

    model = make_model(args.layers, args.width)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    max_across = lambda a: a  # noqa: E731
    rank = int(os.environ.get("HOROVOD_RANK", "0"))  # (local mode: only rank 0 reports)
    if args.mode == "hvd":
        import horovod_spark.torch as hvd
        hvd.init()
        rank = hvd.rank()
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                       groups=args.groups or None)
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        max_across = lambda a: hvd.allreduce(torch.from_numpy(a), op=hvd.Max, name="max_across").numpy()  # noqa: E731
    elif args.mode == "ddp":
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        model = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)

        def max_across(a):
            t = torch.from_numpy(a)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            return t.numpy()

    x = torch.randn(args.batch, args.width, generator=torch.Generator().manual_seed(rank))

    def step():
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()

    for _ in range(20):
        step()
    tuning = {}
    if args.until_tuned:
        tuning = tune(hvd, step)
    times = np.empty(args.steps)
    for i in range(args.steps):
        start = time.perf_counter()
        step()
        times[i] = time.perf_counter() - start
    times = max_across(times)
    if rank == 0:
        record = {"kind": "optimizer_step", "mode": args.mode, "groups": args.groups, "layers": args.layers,
                  "param_bytes": args.width * args.width * 4}
        record.update(_timing.summarize(times))
        record.update(tuning)
        _timing.emit(record)
    if args.mode == "ddp":
        # torch 2.13's gloo teardown now and then aborts ("terminate called without an active
        # exception") or hangs in destroy_process_group; the timing is out, so leave at once.
        import torch.distributed as dist
        dist.barrier()
        sys.stdout.flush()
        os._exit(0)
    elif args.mode == "hvd":
        import horovod_spark.torch as hvd
        hvd.shutdown()


if __name__ == "__main__":
    main()
