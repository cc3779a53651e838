#!/usr/bin/env python
"""CUDA tensors: horovod_spark vs torch.distributed, in one run on one machine.

    python benchmarks/gpu.py                      # 4 MiB and 256 MiB, float32 and float16, + a training step
    python benchmarks/gpu.py --steps 10 --sizes 4M

Runs, each started the way its users start it, on the machine's first GPU:

    1 rank   horovod-spark-run -np 1 (its NCCL data plane)  vs  torchrun, NCCL
    2 ranks  horovod-spark-run -np 2 (host staging)  vs  torchrun, gloo with CUDA tensors (both
             ranks share the GPU: NCCL refuses two ranks on one device)

and measures an allreduce of each size and dtype (median ms of the slowest rank, the result on the
device) and a training step of a small ResNet (batch 64 of 32x32 images): DistributedOptimizer vs
DistributedDataParallel. Prints a markdown table with the GPU's name.

Without a CUDA device it prints "benchmarks/gpu.py: skipped: no CUDA device ..." and exits 0
(nothing to measure is not a failure; scripts/run_gpu_checks.sh reports it as a skip).
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from allreduce import REPO, WORKERS, child_env, parse_records, parse_size, tail, tool_path  # noqa: E402

WORKER = os.path.join(WORKERS, "gpu_worker.py")
RUNS = (("hs", None, 1), ("torch", "nccl", 1), ("hs", None, 2), ("torch", "gloo", 2))


def no_cuda_reason():
    """None when torch sees a CUDA device, else why not."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if torch.version.cuda is None:
        return "torch %s is a CPU build" % torch.__version__
    if not torch.cuda.is_available():
        return "torch %s (CUDA %s) sees none" % (torch.__version__, torch.version.cuda)
    return None


def command(system, backend, nranks, worker_args):
    py = sys.executable
    if system == "hs":
        runner = tool_path("horovod-spark-run")
        launcher = [runner] if runner else [py, "-m", "horovod_spark.launcher"]
        return launcher + ["-np", str(nranks), py, WORKER, "--system", "hs"] + worker_args
    torchrun = tool_path("torchrun")
    launcher = [torchrun] if torchrun else [py, "-m", "torch.distributed.run"]
    return launcher + ["--standalone", "--nproc_per_node", str(nranks), WORKER, "--system", "torch",
                       "--backend", backend] + worker_args


def run(system, backend, nranks, worker_args, timeout):
    cmd = command(system, backend, nranks, worker_args)
    sys.stderr.write("[bench] $ %s\n" % " ".join(os.path.relpath(c, REPO) if c.startswith(REPO) else c for c in cmd))
    env = child_env()
    env.setdefault("CUDA_VISIBLE_DEVICES", "0")  # every rank on the first GPU
    try:
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [], "timed out after %d s" % timeout
    records = parse_records(proc.stdout)
    if proc.returncode != 0:
        return records, "exit %d: %s" % (proc.returncode, tail(proc.stdout + proc.stderr, 8))
    return records, None


def slowest(records):
    """{(kind, bytes, dtype): ms of the slowest rank}."""
    out = {}
    for r in records:
        key = (r["kind"], r.get("bytes"), r.get("dtype"))
        out[key] = max(out.get(key, 0.0), r["ms"])
    return out


def human(nbytes):
    return "%d MiB" % (nbytes >> 20) if nbytes >= 1 << 20 else "%d KiB" % (nbytes >> 10)


def table(results, gpu):
    lines = ["GPU: %s" % gpu, "",
             "| measurement | ranks | horovod_spark ms | torch.distributed ms | backend | ours / theirs |",
             "| --- | --- | --- | --- | --- | --- |"]
    for nranks, backend in ((1, "nccl"), (2, "gloo")):
        ours, ours_err = results.get(("hs", nranks), ({}, None))
        theirs, theirs_err = results.get(("torch", nranks), ({}, None))
        for key in sorted(set(ours) | set(theirs), key=lambda k: (k[0] != "allreduce", k[1] or 0, k[2] or "")):
            kind, nbytes, dtype = key
            label = "allreduce %s %s" % (human(nbytes), dtype) if kind == "allreduce" else "ResNet training step"
            a, b = ours.get(key), theirs.get(key)
            ratio = "%.2f" % (a / b) if a and b else "-"
            lines.append("| %s | %d | %s | %s | %s | %s |" % (label, nranks, "%.2f" % a if a else "-",
                                                             "%.2f" % b if b else "-", backend, ratio))
        for who, err in (("horovod_spark", ours_err), ("torch.distributed (%s)" % backend, theirs_err)):
            if err:
                lines.append("| %s, %d rank(s), failed: %s | | | | | |" % (who, nranks, err.replace("\n", " ")[:300]))
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="4M,256M", help="allreduce sizes, comma-separated (default 4M,256M)")
    p.add_argument("--dtypes", default="float32,float16")
    p.add_argument("--steps", type=int, default=30, help="training steps measured (default 30)")
    p.add_argument("--timeout", type=int, default=300, help="seconds per run (default 300)")
    args = p.parse_args()
    reason = no_cuda_reason()
    if reason is not None:
        print("benchmarks/gpu.py: skipped: no CUDA device (%s); run it on a GPU machine" % reason)
        return 0
    import torch
    sizes = ",".join(str(parse_size(s)) for s in args.sizes.split(","))
    worker_args = ["--sizes", sizes, "--dtypes", args.dtypes, "--steps", str(args.steps)]
    results = {}
    for system, backend, nranks in RUNS:
        records, err = run(system, backend, nranks, worker_args, args.timeout)
        results[(system, nranks)] = (slowest(records), err)
    print(table(results, torch.cuda.get_device_name(0)))
    failed = [k for k, (_, err) in results.items() if err and k[0] == "hs"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
