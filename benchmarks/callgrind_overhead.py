#!/usr/bin/env python
"""Instructions per call, counted by valgrind's callgrind: repeatable where wall-clock figures on a
shared machine are not.

Each workload (benchmarks/workers/callgrind_calls.py) runs as one rank under callgrind twice,
with N and N + K calls; the difference of the calling thread's counts, divided by K, is the cost of
one call with start-up and shutdown cancelled out. The engine thread is reported the same way, but
its count includes the polling it does while it waits, which depends on timing: read it as an
indication only.

    .venv/bin/python benchmarks/callgrind_overhead.py                # every workload, K=1000
    .venv/bin/python benchmarks/callgrind_overhead.py --kinds allreduce --calls 2000 --top 25

``allreduce``, ``torch_only`` and the blocking data collectives (``allgather``, ``broadcast_``,
``reducescatter``, ``alltoall``) run as a single rank: that measures what a call costs the caller
(Python API, tensor checks, queueing, the handoff to the engine and the wait); the transport's
share of a multi-rank call is not in it. ``optimizer_hooks`` and ``optimizer_step`` need two ranks
(on one rank DistributedOptimizer registers no hooks: there is nothing to average), so they run
under ``horovod-spark-run -np 2`` with rank 0 alone under callgrind; the other rank, much faster,
is always ready first, so rank 0 hardly waits and its count stays repeatable.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WORKER = os.path.join(HERE, "workers", "callgrind_calls.py")
KINDS = ("allreduce", "allreduce_pair", "optimizer_hooks", "optimizer_step", "torch_only", "allgather", "broadcast_",
         "reducescatter", "alltoall")
TWO_RANK_KINDS = ("allreduce_pair", "optimizer_hooks", "optimizer_step")
# Rank 0 under callgrind (%s: its options), the other rank as it is ("$@": the worker's command line).
_RANK0_UNDER = 'if [ "$HOROVOD_RANK" = 0 ]; then exec valgrind %s "$@"; else exec "$@"; fi'
_LINE = re.compile(r"\s*([\d,]+) \([^)]*\)\s+(.*)$")


def run_counted(kind, calls, outdir, timeout):
    """Run the worker under callgrind; return {thread number: {function: instructions}}."""
    prefix = os.path.join(outdir, "%s.%d" % (kind, calls))
    for name in os.listdir(outdir):  # an earlier run's files (--keep)
        if name.startswith(os.path.basename(prefix) + "."):
            os.remove(os.path.join(outdir, name))
    # A fixed hash seed: with salted str hashes, dict probing at import differs between the two runs
    # by thousands of instructions, which would show up as per-call cost.
    env = dict(os.environ, PYTHONHASHSEED="0", PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    tool = ["--tool=callgrind", "--separate-threads=yes", "--callgrind-out-file=%s.%%p" % prefix]
    worker = [sys.executable, WORKER, kind, str(calls)]
    if kind in TWO_RANK_KINDS:
        # Start-up under callgrind takes a minute or more: the other rank must wait that long.
        env.setdefault("HOROVOD_START_TIMEOUT", str(timeout))
        script = _RANK0_UNDER % " ".join(shlex.quote(t) for t in tool)
        cmd = [sys.executable, "-m", "horovod_spark.launcher", "-np", "2", "sh", "-c", script, "sh"] + worker
    else:
        cmd = ["valgrind"] + tool + worker
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError("%s under callgrind failed (exit %d):\n%s" % (kind, proc.returncode, proc.stderr[-3000:]))
    threads = {}
    for name in sorted(os.listdir(outdir)):
        path = os.path.join(outdir, name)
        # One file per thread, NAME.PID-NN; NAME.PID itself holds only the header.
        m = re.fullmatch(re.escape(os.path.basename(prefix)) + r"\.\d+-(\d+)", name)
        if m:
            threads[int(m.group(1))] = function_counts(path)
    return threads


def function_counts(path):
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    counts = {}
    for line in out.splitlines():
        m = _LINE.match(line)
        if m and "PROGRAM TOTALS" not in m.group(2):
            name = m.group(2).split(" [")[0]
            name = re.sub(r"^/tmp/python-build[^:]*/", "", name)  # pyenv's build directory
            counts[name] = counts.get(name, 0) + int(m.group(1).replace(",", ""))
    return counts


def per_call(small, large, calls):
    names = set(small) | set(large)
    return {n: (large.get(n, 0) - small.get(n, 0)) / calls for n in names}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kinds", default=",".join(KINDS), help="comma-separated: " + ", ".join(KINDS))
    p.add_argument("--base", type=int, default=100, help="calls in the first run (start-up is cancelled out)")
    p.add_argument("--calls", type=int, default=1000, help="extra calls in the second run (K)")
    p.add_argument("--top", type=int, default=12, help="functions to list per workload")
    p.add_argument("--timeout", type=int, default=1800)
    p.add_argument("--keep", metavar="DIR", help="keep callgrind's files in DIR (for callgrind_annotate --tree=caller)")
    args = p.parse_args()
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    for kind in kinds:
        if kind not in KINDS:
            p.error("unknown kind %r (choose from %s)" % (kind, ", ".join(KINDS)))
    rows = []
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hs-callgrind-") as tmp:
        outdir = args.keep or tmp
        for kind in kinds:
            small = run_counted(kind, args.base, outdir, args.timeout)
            large = run_counted(kind, args.base + args.calls, outdir, args.timeout)
            main_thread = per_call(small[1], large[1], args.calls)
            others = sum(sum(per_call(small.get(t, {}), large.get(t, {}), args.calls).values())
                         for t in set(small) | set(large) if t != 1)
            rows.append((kind, sum(main_thread.values()), others))
            print("\n### %s: top functions of the calling thread, instructions per call\n" % kind)
            print("| instructions | function |\n| ---: | --- |")
            for name, count in sorted(main_thread.items(), key=lambda kv: -kv[1])[:args.top]:
                print("| %.0f | `%s` |" % (count, name[:140]))
    print("\n| workload | calling thread, instructions per call | other threads (timing-dependent) |")
    print("| --- | ---: | ---: |")
    for kind, caller, others in rows:
        print("| %s | %.0f | %.0f |" % (kind, caller, others))


if __name__ == "__main__":
    main()
