"""One rank of benchmarks/gpu.py: allreduce of CUDA tensors and a ResNet-style training step,
through horovod_spark.torch (``--system hs``, under horovod-spark-run) or torch.distributed
(``--system torch --backend nccl|gloo``, under torchrun). Prints one ``BENCH_JSON`` line per
measurement: this rank's median milliseconds. ``--device cpu`` runs the same code on CPU tensors,
to check the worker on a machine without a GPU."""
import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

MARKER = "BENCH_JSON "
DTYPES = {"float32": torch.float32, "float16": torch.float16}


class _Block(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        return F.relu(x + self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x))))))


def resnet_small(classes=10):
    """A small ResNet for 32x32 images: 2 stages of 2 residual blocks (64 and 128 channels), about
    0.8 M parameters."""
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
        _Block(64), _Block(64),
        nn.Conv2d(64, 128, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(128), nn.ReLU(),
        _Block(128), _Block(128),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, classes))


class _Ours:
    def __init__(self):
        import horovod_spark.torch as hvd
        hvd.init()
        self.hvd = hvd
        self.rank, self.size, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()
        self.label = "horovod_spark (host staging)"

    def allreduce(self, t):
        self.hvd.allreduce_(t, op=self.hvd.Sum)  # returns with the result on the device

    def barrier(self):
        self.hvd.barrier()

    def wrap(self, model, optimizer):
        self.hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        return model, self.hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())

    def close(self):
        self.hvd.shutdown()


class _TorchDistributed:
    def __init__(self, backend):
        import torch.distributed as dist
        self.dist = dist
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        if torch.cuda.is_available():
            torch.cuda.set_device(self.local_rank % torch.cuda.device_count())
        dist.init_process_group(backend)
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.label = "torch.distributed (%s)" % backend

    def allreduce(self, t):
        self.dist.all_reduce(t)

    def barrier(self):
        self.dist.barrier()

    def wrap(self, model, optimizer):
        from torch.nn.parallel import DistributedDataParallel
        if next(model.parameters()).device.type != "cuda":
            return DistributedDataParallel(model), optimizer
        device = torch.cuda.current_device()
        return DistributedDataParallel(model, device_ids=[device], output_device=device), optimizer

    def close(self):
        self.dist.destroy_process_group()


def _itemsize(dtype):
    return torch.empty((), dtype=dtype).element_size()


def _emit(system, record):
    record.update(system=system.label, ranks=system.size, rank=system.rank)
    print(MARKER + json.dumps(record), flush=True)


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _median_ms(fn, iters, warmup, barrier):
    for _ in range(warmup):
        fn()
    _sync()
    times = []
    for _ in range(iters):
        barrier()
        _sync()
        started = time.perf_counter()
        fn()
        _sync()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--system", choices=("hs", "torch"), required=True)
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    p.add_argument("--sizes", default=str(4 << 20) + "," + str(256 << 20), help="bytes, comma-separated")
    p.add_argument("--dtypes", default="float32,float16")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    args = p.parse_args()
    system = _Ours() if args.system == "hs" else _TorchDistributed(args.backend)
    if args.device == "cuda":
        torch.cuda.set_device(system.local_rank % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
    try:
        for nbytes in (int(s) for s in args.sizes.split(",")):
            for name in args.dtypes.split(","):
                dtype = DTYPES[name]
                # Zeros: a sum of them stays finite however many times it is repeated in place.
                t = torch.zeros(nbytes // _itemsize(dtype), dtype=dtype, device=device)
                iters = 10 if nbytes >= 64 << 20 else 50
                ms = _median_ms(lambda: system.allreduce(t), iters, 3, system.barrier)
                _emit(system, {"kind": "allreduce", "bytes": nbytes, "dtype": name, "ms": ms})
        torch.manual_seed(0)
        net = resnet_small().to(device)
        model, optimizer = system.wrap(net, torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9))
        _emit(system, {"kind": "train_step", "ms": _train_step_ms(system, model, optimizer, device, args.steps)})
    finally:
        system.close()


def _train_step_ms(system, model, optimizer, device, steps):
    gen = torch.Generator(device="cpu").manual_seed(system.rank)
    x = torch.randn(64, 3, 32, 32, generator=gen).to(device)
    y = torch.randint(0, 10, (64,), generator=gen).to(device)

    def step():
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    return _median_ms(step, steps, 5, system.barrier)


if __name__ == "__main__":
    main()
