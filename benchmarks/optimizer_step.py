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

With --autotune, the variants are hvd's settings instead (docs/performance.md, Autotune): the
defaults; HOROVOD_AUTOTUNE=1, timed after its search has ended (how many steps the search took and
what it chose are printed too); and each hand-picked point of a small grid of the settings autotune
tunes (HOROVOD_FUSION_THRESHOLD, the response cache through HOROVOD_CACHE_CAPACITY), the best of
which is the mark autotune should reach.

Step time is the median over steps of the slowest rank's time; --repeat interleaves the variants
and keeps each one's best run. Each rank uses one intra-op thread (2 ranks share 2 cores).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from allreduce import REPO, WORKERS, child_env, parse_records, tool_path  # noqa: E402

WORKER = os.path.join(WORKERS, "optimizer_step.py")


# --autotune: hand-picked settings (label, environment); the defaults are 128 MiB with the cache on.
HAND_PICKED = [("fusion 64 KiB", {"HOROVOD_FUSION_THRESHOLD": str(64 << 10)}),
               ("fusion 256 KiB", {"HOROVOD_FUSION_THRESHOLD": str(256 << 10)}),
               ("fusion 1 MiB", {"HOROVOD_FUSION_THRESHOLD": str(1 << 20)}),
               ("fusion 4 MiB", {"HOROVOD_FUSION_THRESHOLD": str(4 << 20)}),
               ("fusion 16 MiB", {"HOROVOD_FUSION_THRESHOLD": str(16 << 20)}),
               ("cache off", {"HOROVOD_CACHE_CAPACITY": "0"})]
AUTOTUNE_ENV = {"HOROVOD_AUTOTUNE": "1"}


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
        tuned = ["--until-tuned"] if variant == "hvd autotune" else []
        return launcher + ["-np", str(nranks), py, WORKER, "--mode", "hvd", "--groups", groups] + tuned + args
    torchrun = tool_path("torchrun")
    launcher = [torchrun] if torchrun else [py, "-m", "torch.distributed.run"]
    return launcher + ["--standalone", "--nproc_per_node", str(nranks), WORKER, "--mode", "ddp"] + args


def run(variant, nranks, steps, timeout, env=None):
    cmd = command(variant, nranks, steps)
    shown = " ".join(os.path.relpath(c, REPO) if c.startswith(REPO) else c for c in cmd)
    settings = "".join("%s=%s " % kv for kv in (env or {}).items())
    sys.stderr.write("[bench] %-13s $ %s%s\n" % (variant, settings, shown))
    proc = subprocess.run(cmd, cwd=REPO, env=dict(child_env(), **(env or {})), capture_output=True, text=True,
                          timeout=timeout)
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
    p.add_argument("--autotune", action="store_true", help="compare hvd's defaults, autotune and a grid of settings")
    args = p.parse_args()
    if args.autotune:
        return compare_settings(args)
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


def compare_settings(args):
    """--autotune: per-parameter hvd under its defaults, autotune and each hand-picked setting."""
    variants = [("defaults", "hvd", {}), ("autotune", "hvd autotune", AUTOTUNE_ENV)] + \
        [(label, "hvd", env) for label, env in HAND_PICKED]
    best = {}
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "autotune.csv")  # rank 0's trials (HOROVOD_AUTOTUNE_LOG)
        for _ in range(args.repeat):
            for label, variant, env in variants:
                rec = run(variant, args.np, args.steps, args.timeout,
                          dict(env, HOROVOD_AUTOTUNE_LOG=log) if label == "autotune" else env)
                if label == "autotune":
                    with open(log) as f:
                        rec["log"] = f.read()
                if label not in best or rec["median_s"] < best[label]["median_s"]:
                    best[label] = rec
    defaults = best["defaults"]["median_s"]
    picked = min((label for label, _ in HAND_PICKED + [("defaults", {})]), key=lambda k: best[k]["median_s"])
    tuned = best["autotune"]
    print("## Autotune on the training step, %d x 16 KiB parameters, %d ranks (%s)" % (
        256, args.np, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())))
    print()
    print("| setting | step time (median) | ÷ defaults |")
    print("| --- | ---: | ---: |")
    for label, _, _ in variants:
        t = best[label]["median_s"]
        mark = " (best hand-picked)" if label == picked else ""
        print("| %s%s | %.2f ms | %.2f× |" % (label, mark, t * 1e3, t / defaults))
    print()
    print("autotune chose fusion threshold %d bytes, response cache %s, after %d steps (%.1f s) of search; "
          "its step time is %.2f× the best hand-picked setting's (%s)." % (
              tuned["fusion_threshold"], "on" if tuned["response_cache"] else "off", tuned["tuning_steps"],
              tuned["tuning_s"], tuned["median_s"] / best[picked]["median_s"], picked))
    print()
    print("Its trials (HOROVOD_AUTOTUNE_LOG of that run):")
    print()
    print("```")
    print(tuned["log"].rstrip())
    print("```")


if __name__ == "__main__":
    main()
