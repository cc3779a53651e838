#!/usr/bin/env python
"""Allreduce across separate hosts: network-namespace hosts on this machine, 2 ranks per host.

For 2 and 3 hosts, with host links limited by tc tbf (default 10gbit) and unlimited, times float32
Sum allreduce (default 4 KiB, 4 MiB, 64 MiB) of: horovod_spark flat and with
HOROVOD_HIERARCHICAL_ALLREDUCE=1 (ranks started through the launcher's rendezvous, each in its
host's namespace), Open MPI (mpirun starting its daemons in the namespaces through a
``plm_rsh_agent`` script), and torch.distributed gloo (env:// rendezvous on host 0). The timing
workers are those of benchmarks/allreduce.py. Needs root (tests/support/netns_hosts.py).

    sudo python benchmarks/cross_host.py                       # everything (a few minutes)
    sudo python benchmarks/cross_host.py --hosts 2 --links none --sizes 64M

Bus bandwidth (busbw) = algbw x 2(n-1)/n for n ranks, as in nccl-tests; on limited links it is
also given as a fraction of the link rate.
"""
import argparse
import json
import os
import stat
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))  # the namespace-host harness
sys.path.insert(0, REPO)
sys.path.insert(0, HERE)

from allreduce import cpu_model, fmt_size, fmt_time, markdown_table, parse_sizes, tool_path  # noqa: E402
from support.netns_hosts import NetnsHosts, _rate_bits, unavailable_reason  # noqa: E402
from support.netns_ranks import NetnsRanks  # noqa: E402

WORKERS = os.path.join(HERE, "workers")
MARKER = "BENCH_JSON "
RANKS_PER_HOST = 2
SYSTEMS = ("hs_flat", "hs_hier", "mpi", "gloo")
LABELS = {"hs_flat": "horovod_spark flat", "hs_hier": "horovod_spark hierarchical", "mpi": "Open MPI",
          "gloo": "gloo"}
GOAL_SIZE = 64 << 20
GOAL_VS_MPI, GOAL_VS_GLOO, GOAL_LINK_FRACTION = 1.0, 2.0, 0.9


def worker_env():
    return {"PYTHONPATH": os.pathsep.join([REPO, WORKERS]), "PYTHONUNBUFFERED": "1",
            "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}


def parse_records(lines):
    return [json.loads(line[line.index(MARKER) + len(MARKER):]) for line in lines if MARKER in line]


def run_horovod_spark(hosts, sizes, hierarchical, timeout):
    env = worker_env()
    env["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1" if hierarchical else "0"
    argv = [sys.executable, os.path.join(WORKERS, "hs_allreduce.py"), "--sizes", sizes, "--quick"]
    with NetnsRanks(hosts, [RANKS_PER_HOST] * hosts.n, argv, env=env, marker=MARKER) as job:
        codes = job.wait(timeout)
        if codes != [0] * job.size:
            raise RuntimeError("ranks exited %s:\n%s" % (codes, job.stderr_tails()))
        return job.lines[0]


def _collect(procs, timeout):
    deadline = time.monotonic() + timeout
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise RuntimeError("timed out after %.0f s" % timeout) from None
        if p.returncode != 0:
            raise RuntimeError("exit %d: %s" % (p.returncode, err[-2000:]))
        outs.append(out)
    return outs


def run_gloo(hosts, sizes, timeout):
    n = hosts.n * RANKS_PER_HOST
    procs = []
    for rank in range(n):
        env = dict(os.environ, **worker_env())
        env.update(RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank % RANKS_PER_HOST),
                   LOCAL_WORLD_SIZE=str(RANKS_PER_HOST), MASTER_ADDR=hosts.addr(0), MASTER_PORT="29517",
                   GLOO_SOCKET_IFNAME="eth0", OMP_NUM_THREADS="1")
        argv = [sys.executable, os.path.join(WORKERS, "gloo_allreduce.py"), "--sizes", sizes, "--quick"]
        procs.append(hosts.popen(rank // RANKS_PER_HOST, argv, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True))
    return parse_records(_collect(procs, timeout)[0].splitlines())


def rsh_agent(hosts, directory):
    """The script mpirun runs as ``AGENT HOST COMMAND...`` to start its daemon on HOST."""
    path = os.path.join(directory, "netns_rsh_agent.sh")
    with open(path, "w") as f:
        f.write('#!/bin/sh\nhost="$1"; shift\n'
                'exec ip netns exec "$host" unshare --uts sh -c "hostname $host && $*"\n')
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


def run_mpi(hosts, sizes, timeout, directory):
    mpirun = tool_path("mpirun")
    if mpirun is None:
        raise RuntimeError("mpirun not found next to %s or on PATH" % sys.executable)
    n = hosts.n * RANKS_PER_HOST
    subnet = hosts.addr(0).rsplit(".", 1)[0] + ".0/24"
    cmd = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(n),
           "--host", ",".join("%s:%d" % (h, RANKS_PER_HOST) for h in hosts.names),
           # (without an explicit map, mpirun here piles every rank onto the first host)
           "--map-by", "ppr:%d:node" % RANKS_PER_HOST,
           "--mca", "plm_rsh_agent", rsh_agent(hosts, directory),
           "--mca", "btl_tcp_if_include", subnet, "--mca", "oob_tcp_if_include", subnet,
           # Every namespace host sees all of the machine's cores, so Open MPI does not notice that
           # the ranks of all hosts together outnumber them, and its ranks busy-poll each other off
           # the CPU (two orders of magnitude slower); have them yield when idle, as it does by
           # itself when it sees oversubscription.
           "--mca", "mpi_yield_when_idle", "1" if n > (os.cpu_count() or 1) else "0",
           "-x", "PYTHONPATH", "-x", "PATH", "-x", "PYTHONUNBUFFERED",
           sys.executable, os.path.join(WORKERS, "mpi_allreduce.py"), "--sizes", sizes, "--quick"]
    env = dict(os.environ, **worker_env())
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    return parse_records(_collect([p], timeout)[0].splitlines())


def algorithm_note():
    """What the core does with HOROVOD_HIERARCHICAL_ALLREDUCE=1, as far as its settings tell."""
    code = ("from horovod_spark.common import _core; c = _core.config(); "
            "print(sorted(k for k in c if 'hierarch' in k and c[k]))")
    env = dict(os.environ, HOROVOD_HIERARCHICAL_ALLREDUCE="1", PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout.strip()
    if out in ("", "[]"):
        return "this core has no hierarchical allreduce setting: the 'hierarchical' runs are flat rings"
    return "the core's settings with HOROVOD_HIERARCHICAL_ALLREDUCE=1: %s" % out


def busbw(rec, nranks):
    return rec["bytes"] / rec["median_s"] / 1e9 * 2 * (nranks - 1) / nranks


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hosts", default="2,3", help="host counts, comma-separated (default 2,3)")
    p.add_argument("--links", default="10gbit,none", help="link rates (tc syntax) or 'none' (default 10gbit,none)")
    p.add_argument("--sizes", type=parse_sizes, default=parse_sizes("4K,4M,64M"))
    p.add_argument("--systems", default=",".join(SYSTEMS), help="subset of %s" % ",".join(SYSTEMS))
    p.add_argument("--timeout", type=float, default=240, help="seconds per system run")
    p.add_argument("--json-out", metavar="PATH")
    args = p.parse_args()
    reason = unavailable_reason()
    if reason:
        sys.exit("cross_host: " + reason)
    systems = [s for s in args.systems.split(",") if s]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        p.error("--systems: unknown %s (choose from %s)" % (", ".join(unknown), ",".join(SYSTEMS)))
    sizes = ",".join(str(s) for s in args.sizes)
    results, failures = [], []
    with tempfile.TemporaryDirectory(prefix="cross-host-") as tmp:
        for nhosts in [int(x) for x in args.hosts.split(",")]:
            for link in args.links.split(","):
                rate = None if link == "none" else link
                with NetnsHosts(nhosts, link_rate=rate) as hosts:
                    for system in systems:
                        sys.stderr.write("[cross_host] %d hosts, link %s: %s\n" % (nhosts, link, LABELS[system]))
                        try:
                            if system in ("hs_flat", "hs_hier"):
                                recs = run_horovod_spark(hosts, sizes, system == "hs_hier", args.timeout)
                            elif system == "gloo":
                                recs = run_gloo(hosts, sizes, args.timeout)
                            else:
                                recs = run_mpi(hosts, sizes, args.timeout, tmp)
                        except Exception as exc:  # one system failing must not lose the others
                            failures.append("%d hosts, %s, %s: %s" % (nhosts, link, LABELS[system], exc))
                            continue
                        for r in recs:
                            r.update(sys_key=system, hosts=nhosts, link=link)
                            results.append(r)
    report(results, failures, systems, args)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"results": results, "failures": failures, "cpu": cpu_model()}, f, indent=1)


def report(results, failures, systems, args):
    by = {(r["hosts"], r["link"], r["sys_key"], r["bytes"]): r for r in results if r.get("kind") == "allreduce"}
    configs = sorted({(r["hosts"], r["link"]) for r in results})
    print("cross-host allreduce, %d ranks per host; CPU: %s" % (RANKS_PER_HOST, cpu_model()))
    print(algorithm_note())
    print("cells: median latency, busbw GB/s, and on limited links (busbw ÷ link rate)")
    header = ["hosts", "link", "size"] + [LABELS[s] for s in systems]
    rows = []
    for nhosts, link in configs:
        link_gbps = None if link == "none" else _rate_bits(link) / 8e9
        for size in args.sizes:
            row = [str(nhosts), link, fmt_size(size)]
            for s in systems:
                r = by.get((nhosts, link, s, size))
                if r is None:
                    row.append("—")
                    continue
                bw = busbw(r, nhosts * RANKS_PER_HOST)
                cell = "%s, %.3f" % (fmt_time(r["median_s"]), bw)
                row.append(cell if link_gbps is None else "%s (%.2f×)" % (cell, bw / link_gbps))
            rows.append(row)
    print(markdown_table(header, rows))
    print()
    for nhosts, link in configs:
        n = nhosts * RANKS_PER_HOST
        ours = [by[k] for k in ((nhosts, link, "hs_flat", GOAL_SIZE), (nhosts, link, "hs_hier", GOAL_SIZE)) if k in by]
        if not ours:
            continue
        best = min(ours, key=lambda r: r["median_s"])
        where = "%d hosts, link %s, %s" % (nhosts, link, fmt_size(GOAL_SIZE))
        for other, goal in (("mpi", GOAL_VS_MPI), ("gloo", GOAL_VS_GLOO)):
            o = by.get((nhosts, link, other, GOAL_SIZE))
            if o is None:
                print("MISS %s: no %s result to compare with" % (where, LABELS[other]))
                continue
            ratio = o["median_s"] / best["median_s"]
            print("%s %s: horovod_spark %.2f× %s (goal ≥ %.0f×)"
                  % ("PASS" if ratio >= goal else "MISS", where, ratio, LABELS[other], goal))
        if link != "none":
            frac = busbw(best, n) / (_rate_bits(link) / 8e9)
            print("%s %s: busbw %.2f× the link rate (goal ≥ %.1f×)"
                  % ("PASS" if frac >= GOAL_LINK_FRACTION else "MISS", where, frac, GOAL_LINK_FRACTION))
    for f in failures:
        print("FAILED " + f)


if __name__ == "__main__":
    main()
