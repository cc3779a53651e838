#!/usr/bin/env python
"""Training-step time of a model with many small parameters (256 bias-free 64x64 layers, 16 KiB
of float32 each, 4 MiB in all; batch 16, SGD): what the per-step cost of averaging gradients is
when there are many of them. In one run, each started the way its users start it:

    compute only   N processes at once, each a plain torch.optim.SGD: the step without communication
                   (the ranks share the cores, so this, not one process alone, is the baseline)
    hvd            horovod-spark-run -np N: hvd.DistributedOptimizer, one allreduce per parameter
    hvd groups=1   the same with groups=1: every gradient in one grouped (packed) allreduce
    hvd groups=8   ... in 8 groups, launched as each group's gradients are ready
    ddp (gloo)     torchrun: torch DistributedDataParallel over gloo (its 25 MB buckets)

    .venv/bin/python benchmarks/optimizer_step.py [--np 2] [--steps 300] [--repeat 2]

Step time is the median over steps of the slowest rank's time; --repeat interleaves the variants
and keeps each one's best run. Each rank uses one intra-op thread (2 ranks share 2 cores).
"""
import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from allreduce import REPO, WORKERS, child_env, parse_records, tool_path  # noqa: E402

WORKER = os.path.join(WORKERS, "optimizer_step.py")


def command(variant, nranks, steps):
    py = sys.executable
    args = ["--steps", str(steps)]
    runner = tool_path("horovod-spark-run")
    hs_launcher = [runner] if runner else [py, "-m", "horovod_spark.launcher"]
    if variant == "compute only":
        return hs_launcher + ["-np", str(nranks), py, WORKER, "--mode", "local"] + args
    if variant.startswith("hvd"):
        launcher = hs_launcher
        groups = variant.split("groups=")[1] if "groups=" in variant else "0"
        return launcher + ["-np", str(nranks), py, WORKER, "--mode", "hvd", "--groups", groups] + args
    torchrun = tool_path("torchrun")
    launcher = [torchrun] if torchrun else [py, "-m", "torch.distributed.run"]
    return launcher + ["--standalone", "--nproc_per_node", str(nranks), WORKER, "--mode", "ddp"] + args


def run(variant, nranks, steps, timeout):
    cmd = command(variant, nranks, steps)
    sys.stderr.write("[bench] %-13s $ %s\n" % (variant, " ".join(os.path.relpath(c, REPO) if c.startswith(REPO) else c
                                                               for c in cmd)))
    proc = subprocess.run(cmd, cwd=REPO, env=child_env(), capture_output=True, text=True, timeout=timeout)
    records = [r for r in parse_records(proc.stdout) if r.get("kind") == "optimizer_step"]
    if proc.returncode != 0 or not records:
        raise RuntimeError("%s failed (exit %d):\n%s" % (variant, proc.returncode, (proc.stdout + proc.stderr)[-3000:]))
    return records[0]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--timeout", type=float, default=300)
    args = p.parse_args()
    variants = ["compute only", "hvd", "hvd groups=1", "hvd groups=8", "ddp (gloo)"]
    best = {}
    for _ in range(args.repeat):
        for v in variants:
            rec = run(v, args.np, args.steps, args.timeout)
            if v not in best or rec["median_s"] < best[v]["median_s"]:
                best[v] = rec
    local = best["compute only"]["median_s"]
    print("## Training step, %d x 16 KiB parameters, %d ranks (%s)" % (256, args.np, time.strftime("%Y-%m-%d %H:%M UTC",
                                                                                                 time.gmtime())))
    print()
    print("| variant | step time (median) | minus compute only | ÷ ddp (gloo) |")
    print("| --- | ---: | ---: | ---: |")
    ddp = best["ddp (gloo)"]["median_s"]
    for v in variants:
        t = best[v]["median_s"]
        extra = "" if v == "compute only" else "%.2f ms" % ((t - local) * 1e3)
        print("| %s | %.2f ms | %s | %.2f× |" % (v, t * 1e3, extra, t / ddp))


if __name__ == "__main__":
    main()
