#!/usr/bin/env python
"""Allreduce across separate hosts: network-namespace hosts on this machine, 2 ranks per host.

For 2 and 3 hosts, with host links limited by tc tbf (default 1, 10 and 25 gbit), times float32
Sum allreduce (default 4 KiB, 4 MiB, 64 MiB) of: horovod_spark flat and with
HOROVOD_HIERARCHICAL_ALLREDUCE=1, Open MPI, MPICH, Intel MPI and torch.distributed gloo, each
started across the hosts as its users start it across machines (benchmarks/cross_host_launch.py).
The timing workers are those of benchmarks/allreduce.py. Needs root (tests/support/netns_hosts.py);
MPICH and Intel MPI come from the side environments of scripts/mpi_peers.sh.

    sudo python benchmarks/cross_host.py                       # everything (several minutes)
    sudo python benchmarks/cross_host.py --hosts 2 --links none --sizes 64M

Bus bandwidth (busbw) = algbw x 2(n-1)/n for n ranks, as in nccl-tests; on limited links it is
also given as a fraction of the link rate. Each rank's CPU seconds over the timed loop
(getrusage) give the CPU time per byte, which tells a run the cores limit from a slow algorithm.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from allreduce import cpu_model, fmt_load, fmt_size, fmt_time, loadavg, markdown_table, parse_sizes  # noqa: E402
from cross_host_launch import RANKS_PER_HOST, REPO, check_crossed, run_system, sent_bytes  # noqa: E402
from support.netns_hosts import NetnsHosts, rate_bits, unavailable_reason  # noqa: E402

OURS = ("hs_flat", "hs_hier")
MPIS = ("openmpi", "mpich", "intelmpi")
SYSTEMS = OURS + MPIS + ("gloo",)
ALIASES = {"mpi": "openmpi"}  # the name Open MPI had here before MPICH and Intel MPI joined it
LABELS = {"hs_flat": "horovod_spark flat", "hs_hier": "horovod_spark hierarchical", "openmpi": "Open MPI",
          "mpich": "MPICH", "intelmpi": "Intel MPI", "gloo": "gloo"}
GOAL_SIZE = 64 << 20
GOAL_VS_MPI, GOAL_VS_GLOO, GOAL_LINK_FRACTION = 1.0, 2.0, 0.9
# Ranks that keep this share of the cores busy through an allreduce are limited by the cores.
CPU_BOUND_SHARE = 0.8


def parse_systems(text):
    """``--systems``: names from SYSTEMS (or an alias), comma-separated, in the order given."""
    systems = [ALIASES.get(s.strip(), s.strip()) for s in text.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown or not systems:
        raise argparse.ArgumentTypeError("unknown system %s (choose from %s)"
                                         % (", ".join(unknown) or "(none given)", ",".join(SYSTEMS)))
    return list(dict.fromkeys(systems))


def parse_links(text):
    """``--links``: tc rates such as 10gbit, or 'none' for an unlimited link."""
    links = [x.strip() for x in text.split(",") if x.strip()]
    for link in links:
        if link != "none":
            try:
                rate_bits(link)
            except ValueError as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None
    if not links:
        raise argparse.ArgumentTypeError("no link rate given (e.g. 10gbit or none)")
    return links


def parse_hosts(text):
    try:
        counts = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 2:
        raise argparse.ArgumentTypeError("--hosts %r: host counts of at least 2, comma-separated (e.g. 2,3)" % text)
    return counts


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", type=parse_hosts, default=parse_hosts("2,3"),
                   help="host counts, comma-separated (default 2,3)")
    p.add_argument("--links", type=parse_links, default=parse_links("1gbit,10gbit,25gbit"),
                   help="link rates (tc syntax) or 'none' (default 1gbit,10gbit,25gbit)")
    p.add_argument("--sizes", type=parse_sizes, default=parse_sizes("4K,4M,64M"))
    p.add_argument("--systems", type=parse_systems, default=list(SYSTEMS),
                   help="subset of %s" % ",".join(SYSTEMS))
    p.add_argument("--timeout", type=float, default=240, help="seconds per system run")
    p.add_argument("--json-out", metavar="PATH")
    return p


def algorithm_note():
    """What the core does with HOROVOD_HIERARCHICAL_ALLREDUCE=1, as far as its settings tell."""
    code = ("from horovod_spark.common import _core; c = _core.config(); "
            "print(sorted(k for k in c if 'hierarch' in k and c[k]))")
    env = dict(os.environ, HOROVOD_HIERARCHICAL_ALLREDUCE="1", PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip()
    if out in ("", "[]"):
        return "this core has no hierarchical allreduce setting: the 'hierarchical' runs are flat rings"
    return "the core's settings with HOROVOD_HIERARCHICAL_ALLREDUCE=1: %s" % out


def interrupt_on_termination():
    """SIGTERM and SIGHUP unwind like Ctrl-C, so namespaces, bridges and ranks are removed."""
    def stop(signum, frame):
        raise KeyboardInterrupt("signal %d" % signum)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stop)


def measure(args):
    """Every system on every host count and link: (records, failures)."""
    sizes = ",".join(str(s) for s in args.sizes)
    results, failures = [], []
    with tempfile.TemporaryDirectory(prefix="cross-host-") as tmp:
        for nhosts in args.hosts:
            for link in args.links:
                with NetnsHosts(nhosts, link_rate=None if link == "none" else link) as hosts:
                    for system in args.systems:
                        sys.stderr.write("[cross_host] %d hosts, link %s: %s\n" % (nhosts, link, LABELS[system]))
                        sys.stderr.flush()
                        try:
                            before = sent_bytes(hosts)
                            recs = run_system(system, hosts, sizes, args.timeout, tmp)
                            check_crossed(recs, hosts, before, sent_bytes(hosts))
                        except Exception as exc:  # one system failing must not lose the others
                            failures.append("%d hosts, %s, %s: %s" % (nhosts, link, LABELS[system], exc))
                            continue
                        for r in recs:
                            r.update(sys_key=system, hosts=nhosts, link=link)
                            results.append(r)
    return results, failures


def main(argv=None):
    args = build_parser().parse_args(argv)
    reason = unavailable_reason()
    if reason:
        sys.exit("cross_host: " + reason)
    interrupt_on_termination()
    load_before = loadavg()
    results, failures = measure(args)
    load_after = loadavg()
    report(results, failures, args, load_before, load_after)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"results": results, "failures": failures, "cpu": cpu_model(), "cores": os.cpu_count(),
                       "load_before": load_before, "load_after": load_after}, f, indent=1)


def busbw(rec, nranks):
    return rec["bytes"] / rec["median_s"] / 1e9 * 2 * (nranks - 1) / nranks


def link_gbytes(link):
    return None if link == "none" else rate_bits(link) / 8e9


def cpu_use(rec, cores):
    """(CPU seconds of all ranks per byte allreduced, share of the cores the ranks kept busy), or
    None for records without every rank's CPU time."""
    ranks = rec.get("cpu_s_per_op_ranks")
    if not ranks:
        return None
    total = sum(ranks)
    return total / rec["bytes"], total / (rec["median_s"] * cores)


def link_load(rec, nhosts, link):
    """The least share of its rate each host's link ran at: every host sends at least 2(H-1)/H of
    each message for H hosts (reduce-scatter then allgather between hosts), fewer bytes than the
    2(n-1)/n of busbw when a host's ranks combine their data first, so busbw can exceed the rate."""
    return rec["bytes"] / rec["median_s"] * 2 * (nhosts - 1) / nhosts / 1e9 / link_gbytes(link)


def cpu_line(where, rec, nhosts, link, cores):
    """How much CPU ``rec``'s system spent per byte, the busbw these cores allow at that cost, and
    what limited the run: the link, the cores, or neither."""
    use = cpu_use(rec, cores)
    if use is None:
        return "%s: %s: no per-rank CPU times" % (where, LABELS[rec["sys_key"]])
    per_byte, share = use
    nranks = nhosts * RANKS_PER_HOST
    cap = cores / per_byte / 1e9 * 2 * (nranks - 1) / nranks
    text = "%s: %s %.2f ns CPU per byte (all ranks), ranks kept %.0f%% of %d cores busy; at that cost %d cores allow " \
           "busbw %.3f GB/s" % (where, LABELS[rec["sys_key"]], per_byte * 1e9, share * 100, cores, cores, cap)
    if link != "none":
        text += " (%.2f× the link)" % (cap / link_gbytes(link))
        if link_load(rec, nhosts, link) >= GOAL_LINK_FRACTION:
            return text + "; link-bound (the CPU time includes waiting for it)"
    return text + ("; CPU-bound" if share >= CPU_BOUND_SHARE else "; neither CPU- nor link-bound")


def report(results, failures, args, load_before, load_after):
    by = {(r["hosts"], r["link"], r["sys_key"], r["bytes"]): r for r in results if r.get("kind") == "allreduce"}
    configs = [(h, link) for h in args.hosts for link in args.links
               if any(r["hosts"] == h and r["link"] == link for r in results)]
    cores = os.cpu_count() or 1
    print("cross-host allreduce, %d ranks per host; CPU: %s, %d cores; load average %s before, %s after"
          % (RANKS_PER_HOST, cpu_model(), cores, fmt_load(load_before), fmt_load(load_after)))
    # (Open MPI's version string ends in a NUL)
    libraries = {r["sys_key"]: r["library"].replace("\x00", "").strip() for r in results if r.get("kind") == "library"}
    for system in args.systems:
        if system in libraries:
            print("- %s: %s" % (LABELS[system], libraries[system]))
    print(algorithm_note())
    print("cells: median latency, busbw GB/s, and on limited links (busbw ÷ link rate)")
    header = ["hosts", "link", "size"] + [LABELS[s] for s in args.systems]
    rows = []
    for nhosts, link in configs:
        gb = link_gbytes(link)
        for size in args.sizes:
            row = [str(nhosts), link, fmt_size(size)]
            for s in args.systems:
                r = by.get((nhosts, link, s, size))
                if r is None:
                    row.append("—")
                    continue
                bw = busbw(r, nhosts * RANKS_PER_HOST)
                cell = "%s, %.3f" % (fmt_time(r["median_s"]), bw)
                row.append(cell if gb is None else "%s (%.2f×)" % (cell, bw / gb))
            rows.append(row)
    print(markdown_table(header, rows))
    print()
    for line in goal_lines(by, configs):
        print(line)
    for f in failures:
        print("FAILED " + f)


def goal_lines(by, configs):
    """PASS/MISS lines for the 64 MiB goals, then the CPU each side spent per byte."""
    lines, cpu = [], []
    cores = os.cpu_count() or 1
    for nhosts, link in configs:
        n = nhosts * RANKS_PER_HOST
        at = {s: by[(nhosts, link, s, GOAL_SIZE)] for s in SYSTEMS if (nhosts, link, s, GOAL_SIZE) in by}
        ours = [at[s] for s in OURS if s in at]
        if not ours:
            continue
        best = min(ours, key=lambda r: r["median_s"])
        where = "%d hosts, link %s, %s" % (nhosts, link, fmt_size(GOAL_SIZE))
        mpis = [at[s] for s in MPIS if s in at]
        best_mpi = min(mpis, key=lambda r: r["median_s"]) if mpis else None
        for other, label, goal in ((best_mpi, "the best MPI", GOAL_VS_MPI), (at.get("gloo"), "gloo", GOAL_VS_GLOO)):
            if other is None:
                lines.append("MISS %s: no %s result to compare with" % (where, label))
                continue
            ratio = other["median_s"] / best["median_s"]
            name = label if other["sys_key"] == "gloo" else "%s (%s)" % (label, LABELS[other["sys_key"]])
            lines.append("%s %s: %s %.2f× %s (goal ≥ %.0f×)" % ("PASS" if ratio >= goal else "MISS", where,
                                                              LABELS[best["sys_key"]], ratio, name, goal))
        gb = link_gbytes(link)
        if gb:
            frac = busbw(best, n) / gb
            lines.append("%s %s: busbw %.2f× the link rate (goal ≥ %.1f×); the link ran at ≥ %.2f× its rate"
                         % ("PASS" if frac >= GOAL_LINK_FRACTION else "MISS", where, frac, GOAL_LINK_FRACTION,
                            link_load(best, nhosts, link)))
        cpu.append("CPU " + cpu_line(where, best, nhosts, link, cores))
        if best_mpi is not None:
            cpu.append("CPU " + cpu_line(where, best_mpi, nhosts, link, cores))
    return lines + cpu


if __name__ == "__main__":
    main()
