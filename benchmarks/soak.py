#!/usr/bin/env python
"""Soak of the collective core: thousands of mixed collectives on local ranks, every result checked
exactly against numpy, resident memory and open file descriptors checked flat after warm-up.

    .venv/bin/python benchmarks/soak.py                      # 10,000 collectives on 3 ranks
    .venv/bin/python benchmarks/soak.py --count 2000 --max-bytes 1M
    .venv/bin/python benchmarks/soak.py --configs default,nofusion,tcp

The collectives (soak_plan.py): allreduce (Average, Sum, Min, Max, Product; pre/postscale; in place
and out of place; asynchronous, polled and blocking), grouped allreduce, allgather with first
dimensions differing per rank, broadcast from varying roots, alltoall with and without splits,
reducescatter, barrier, process sets added/used/removed, join now and then; every dtype the core
supports; 1 byte to --max-bytes, mostly small; recurring names (the response cache) among fresh
ones; per-rank submission and wait orders. The count is split between launches, one per
configuration (default: fusion at its default threshold, and HOROVOD_FUSION_THRESHOLD=0). Every
rank checks every result bit for bit: inputs are small integers, so sums, products and extremes
are exact in every dtype, and the one rounding a scale factor makes is computed as the core
documents it (soak_values.py).

Memory and descriptors are read at checkpoints (after warm-up, after every tenth of the rest, at
the end; no process set registered at any of them), each after gc, with numpy's small-block cache
filled and freed heap memory handed back (malloc_trim), from /proc/self/status and /proc/self/fd.
The check is on RssAnon (heap, stacks, anonymous maps: where a leak shows) and the fd count. VmRSS
also counts RssShmem, the pages of the fixed-size shared-memory rings touched so far (it grows until
every ring has wrapped once, which for the control rings takes tens of thousands of collectives),
and RssFile (code, paged in as first used); both are printed. The ranks run with glibc's mmap
threshold fixed (ALLOCATOR_ENV). A launch passes when every result is exact and, on every rank,
RssAnon and the fd count at the end exceed their values after warm-up by no more than the
tolerances.
Exit status 0 on PASS, 1 on FAIL.
"""
import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))

import soak_plan  # noqa: E402
from soak_rank import soak_rank  # noqa: E402

CONFIGS = {
    "default": ("fusion on (default threshold)", {}),
    "nofusion": ("fusion off (HOROVOD_FUSION_THRESHOLD=0)", {"HOROVOD_FUSION_THRESHOLD": "0"}),
    "tcp": ("TCP, no shared memory (HOROVOD_SHM_DISABLE=1)", {"HOROVOD_SHM_DISABLE": "1"}),
}
ROW_KINDS = soak_plan.KINDS + ("join", "add_process_set", "remove_process_set")
# glibc raises its mmap threshold after the first large block is freed; later large blocks then
# come from a heap whose top malloc_trim does not hand back, so RSS keeps steps as large as the
# largest transient buffer. Fixed at its default, large blocks are always mapped and unmapped, and
# RSS follows live memory.
ALLOCATOR_ENV = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def parse_bytes(text):
    units = {"": 1, "K": 1 << 10, "M": 1 << 20}
    t = text.strip().upper().rstrip("IB").rstrip("B")
    unit = t[-1] if t and t[-1] in units else ""
    try:
        value = int(t[:-1] if unit else t) * units[unit]
    except ValueError:
        raise argparse.ArgumentTypeError("bad size %r (use e.g. 65536, 64K, 16M)" % text) from None
    if value < 64:
        raise argparse.ArgumentTypeError("size %r is too small: at least 64 bytes" % text)
    return value


def run_soak(count=10000, num_proc=3, seed=1, max_bytes=16 << 20, configs=("default", "nofusion"),
             rss_tolerance_mib=2.0, fd_tolerance=0, timeout=3600.0, env=None):
    """Run the launches; return a report dict (see ``format_report``); ``report["passed"]``."""
    from horovod_spark.launcher import run_local

    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        raise ValueError("unknown configuration(s) %s; choose from %s" % (unknown, ", ".join(CONFIGS)))
    shares = [count // len(configs) + (1 if i < count % len(configs) else 0) for i in range(len(configs))]
    launches = []
    for i, (config, share) in enumerate(zip(configs, shares)):
        warmup = max(1, share // 10)
        tag = "soak-" + config
        launch_seed = seed * 1000 + i  # each launch its own schedule
        t0 = time.perf_counter()
        ranks = run_local(soak_rank, args=(launch_seed, share, max_bytes, warmup, tag), num_proc=num_proc,
                          env=dict(ALLOCATOR_ENV, **CONFIGS[config][1], **(env or {})), timeout=timeout)
        wall = time.perf_counter() - t0
        launches.append(dict(config=config, count=share, wall_s=wall, ranks=ranks, schedule=ranks[0]["scheduled"],
                             warmup=ranks[0]["warmup"]))
    report = dict(count=count, num_proc=num_proc, seed=seed, max_bytes=max_bytes, launches=launches,
                  rss_tolerance_mib=rss_tolerance_mib, fd_tolerance=fd_tolerance)
    report["problems"] = problems(report)
    report["passed"] = not report["problems"]
    return report


def _point(rank_report, label):
    return next(p for p in rank_report["checkpoints"] if p["label"] == label)


def problems(report):
    out = []
    for launch in report["launches"]:
        total = sum(launch["schedule"].values())
        if total != launch["count"]:
            out.append("%s: the schedule holds %d collectives, not %d" % (launch["config"], total, launch["count"]))
        if any(r["scheduled"] != launch["schedule"] for r in launch["ranks"]):
            out.append("%s: the ranks built different schedules" % launch["config"])
        for r in launch["ranks"]:
            out.extend("%s: %s" % (launch["config"], f) for f in r["failures"])
            warm, end = _point(r, "warm-up"), _point(r, "end")
            grew = (end["anon"] - warm["anon"]) / 1024.0
            if grew > report["rss_tolerance_mib"]:
                out.append("%s: rank %d anonymous resident memory (RssAnon) grew %.2f MiB after warm-up "
                           "(tolerance %.1f MiB)" % (launch["config"], r["rank"], grew, report["rss_tolerance_mib"]))
            if end["fds"] - warm["fds"] > report["fd_tolerance"]:
                out.append("%s: rank %d open file descriptors went from %d to %d (tolerance %d)"
                           % (launch["config"], r["rank"], warm["fds"], end["fds"], report["fd_tolerance"]))
    return out


def format_report(report):
    lines = []
    mib = 1 << 20
    lines.append("soak: %d collectives on %d ranks, seed %d, sizes 1 B .. %s, %d launch(es)"
                 % (report["count"], report["num_proc"], report["seed"],
                    "%d MiB" % (report["max_bytes"] // mib) if report["max_bytes"] >= mib
                    else "%d KiB" % (report["max_bytes"] >> 10), len(report["launches"])))
    lines.append("")
    launches = report["launches"]
    head = "| collectives by kind | " + " | ".join(CONFIGS[la["config"]][0] for la in launches) + " |"
    lines += [head, "|" + " --- |" * (len(launches) + 1)]
    for kind in ROW_KINDS:
        lines.append("| %s | " % kind + " | ".join("%d" % la["schedule"].get(kind, 0) for la in launches) + " |")
    lines.append("| **total** | " + " | ".join("%d" % sum(la["schedule"].values()) for la in launches) + " |")
    lines.append("| wall time (s, launch included) | " + " | ".join("%.1f" % la["wall_s"] for la in launches) + " |")
    lines.append("| soak loop time (s, slowest rank) | " +
                 " | ".join("%.1f" % max(r["wall_s"] for r in la["ranks"]) for la in launches) + " |")
    lines.append("")
    lines.append("Memory in MiB, after warm-up -> at the end, from /proc/self/status: RSS = VmRSS = anon + file + shm. "
                 "anon = RssAnon (heap, stacks, anonymous maps: where a leak shows; checked); file = RssFile (code "
                 "and mapped files, as first touched); shm = RssShmem (pages of the fixed-size shared-memory rings "
                 "this rank has touched so far).")
    lines.append("")
    lines.append("| launch | rank | RSS | anon | anon growth | highest anon after warm-up | file | shm | fds |")
    lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")

    def change(a, b):
        return "%.1f -> %.1f" % (a / 1024, b / 1024)

    for la in launches:
        for r in la["ranks"]:
            warm, end = _point(r, "warm-up"), _point(r, "end")
            later = [p["anon"] for p in r["checkpoints"][r["checkpoints"].index(warm):]]
            lines.append("| %s | %d | %s | %s | %+.2f | %.1f | %s | %s | %d -> %d |" % (
                la["config"], r["rank"], change(warm["rss"], end["rss"]), change(warm["anon"], end["anon"]),
                (end["anon"] - warm["anon"]) / 1024, max(later) / 1024, change(warm["file"], end["file"]),
                change(warm["shmem"], end["shmem"]), warm["fds"], end["fds"]))
    lines.append("")
    lines.append("warm-up (collectives): " + ", ".join("%s %d" % (la["config"], la["warmup"]) for la in launches) +
                 " -- the largest op of every kind on both threads that run collectives (reducescatter at a range "
                 "of sizes), every kind of event once, distinct names until the response cache is full, then a "
                 "tenth of the launch in mixed collectives")
    lines.append("tolerances: anon growth <= %.1f MiB, fd growth <= %d"
                 % (report["rss_tolerance_mib"], report["fd_tolerance"]))
    if report["problems"]:
        lines.append("FAIL (%d problem(s)):" % len(report["problems"]))
        lines += ["  " + p for p in report["problems"][:60]]
    else:
        lines.append("PASS: every result exact, memory and descriptors flat")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=10000, help="collectives in all (split among the launches)")
    p.add_argument("--np", type=int, default=3, help="ranks")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-bytes", type=parse_bytes, default=16 << 20, help="largest input of one rank (16M)")
    p.add_argument("--configs", default="default,nofusion",
                   help="comma-separated launches, from: " + ", ".join(CONFIGS))
    p.add_argument("--rss-tolerance-mib", type=float, default=2.0)
    p.add_argument("--fd-tolerance", type=int, default=0)
    p.add_argument("--timeout", type=float, default=3600.0, help="seconds for each launch")
    p.add_argument("--json-out", help="also write the whole report (every checkpoint of every rank) here")
    args = p.parse_args(argv)
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    if args.count < 100 * len(configs):
        p.error("--count must be at least 100 per launch")
    if args.np < 2:
        p.error("--np must be at least 2")
    report = run_soak(args.count, args.np, args.seed, args.max_bytes, configs, args.rss_tolerance_mib,
                      args.fd_tolerance, args.timeout)
    print(format_report(report))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=1, default=str)
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
