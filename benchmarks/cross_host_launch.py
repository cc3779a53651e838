"""How benchmarks/cross_host.py starts each system across network-namespace hosts, the way its
users start it across machines, and collects the timing workers' records (those of
benchmarks/allreduce.py).

- horovod_spark: ranks through the launcher's rendezvous, each in its host's namespace
  (tests/support/netns_ranks.py).
- gloo: torch.distributed's env:// rendezvous on host 0.
- Open MPI: ``mpirun`` in the root namespace, its daemons started through ``plm_rsh_agent``.
- MPICH and Intel MPI: their hydra ``mpirun`` on host 0 (as on a cluster's first node), its
  proxies started through the ssh launcher (``-launcher-exec`` / ``-bootstrap-exec``).

The launchers' remote shell is one script (``remote_shell``) that takes ssh's arguments and runs
the command with ``ip netns exec`` on the named host. No system binds its ranks to cores: every
namespace host sees all of the machine's cores, so each MPI's per-host binding would stack the
ranks of different hosts on the same cores.
"""
import json
import os
import signal
import stat
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
for _path in (HERE, REPO, os.path.join(REPO, "tests")):  # allreduce.py's helpers, the namespace-host harness
    if _path not in sys.path:
        sys.path.insert(0, _path)

from allreduce import tool_path  # noqa: E402
from support.netns_ranks import NetnsRanks  # noqa: E402

WORKERS = os.path.join(HERE, "workers")
MARKER = "BENCH_JSON "
RANKS_PER_HOST = 2
IFACE = "eth0"  # each namespace host's link to the bridge (tests/support/netns_hosts.py)
SIDE_ENVS = {"mpich": os.path.join(REPO, ".bench-envs", "mpich"),
             "intelmpi": os.path.join(REPO, ".bench-envs", "intelmpi")}


def worker_env():
    return {"PYTHONPATH": os.pathsep.join([REPO, WORKERS]), "PYTHONUNBUFFERED": "1",
            "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}


def parse_records(lines):
    return [json.loads(line[line.index(MARKER) + len(MARKER):]) for line in lines if MARKER in line]


def oversubscribed(hosts):
    """Whether the ranks of all hosts together outnumber the machine's cores (which no MPI can
    see from inside one namespace host)."""
    return hosts.n * RANKS_PER_HOST > (os.cpu_count() or 1)


def stop_group(proc):
    """Stop a process started with ``start_new_session`` and everything it started."""
    if proc.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=5)
            return
        except subprocess.TimeoutExpired:
            continue


def collect(procs, timeout):
    """Every process's stdout, once all exit 0; on failure, time-out or interrupt every process
    group is stopped first."""
    deadline = time.monotonic() + timeout
    outs = []
    try:
        for p in procs:
            try:
                out, err = p.communicate(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise RuntimeError("timed out after %.0f s" % timeout) from None
            if p.returncode != 0:
                raise RuntimeError("exit %d: %s" % (p.returncode, (out + err)[-2000:]))
            outs.append(out)
    except BaseException:
        for p in procs:
            stop_group(p)
        raise
    return outs


def remote_shell(directory):
    """The script a launcher runs in place of ssh: ``SCRIPT [ssh options] HOST COMMAND...`` runs
    COMMAND on namespace host HOST, under that host's name."""
    path = os.path.join(directory, "netns_ssh.sh")
    with open(path, "w") as f:
        f.write('#!/bin/sh\n'
                '# ssh options that take a value, then flags such as -x and -q: none matter here.\n'
                'while [ $# -gt 0 ]; do\n'
                '  case "$1" in -o|-p|-l|-i|-F) shift 2 ;; -*) shift ;; *) break ;; esac\n'
                'done\n'
                'host="$1"; shift\n'
                'exec ip netns exec "$host" unshare --uts sh -c "hostname $host && $*"\n')
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


def run_horovod_spark(hosts, sizes, hierarchical, timeout):
    env = worker_env()
    env["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "1" if hierarchical else "0"
    if oversubscribed(hosts):  # as the MPIs are told (mpi_yield_when_idle, I_MPI_WAIT_MODE)
        env["HOROVOD_YIELD_WHEN_IDLE"] = "1"
    argv = [sys.executable, os.path.join(WORKERS, "hs_allreduce.py"), "--sizes", sizes, "--quick"]
    with NetnsRanks(hosts, [RANKS_PER_HOST] * hosts.n, argv, env=env, marker=MARKER) as job:
        codes = job.wait(timeout)
        if codes != [0] * job.size:
            raise RuntimeError("ranks exited %s:\n%s" % (codes, job.stderr_tails()))
        return job.lines[0]


def run_gloo(hosts, sizes, timeout):
    n = hosts.n * RANKS_PER_HOST
    procs = []
    for rank in range(n):
        env = dict(os.environ, **worker_env())
        env.update(RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank % RANKS_PER_HOST),
                   LOCAL_WORLD_SIZE=str(RANKS_PER_HOST), MASTER_ADDR=hosts.addr(0), MASTER_PORT="29517",
                   GLOO_SOCKET_IFNAME=IFACE, OMP_NUM_THREADS="1")
        argv = [sys.executable, os.path.join(WORKERS, "gloo_allreduce.py"), "--sizes", sizes, "--quick"]
        procs.append(hosts.popen(rank // RANKS_PER_HOST, argv, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True))
    return parse_records(collect(procs, timeout)[0].splitlines())


def openmpi_command(hosts, agent, worker_args):
    mpirun = tool_path("mpirun")
    if mpirun is None:
        raise RuntimeError("mpirun not found next to %s or on PATH" % sys.executable)
    subnet = hosts.addr(0).rsplit(".", 1)[0] + ".0/24"
    return [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(hosts.n * RANKS_PER_HOST),
            "--host", ",".join("%s:%d" % (h, RANKS_PER_HOST) for h in hosts.names),
            # (without an explicit map, mpirun here piles every rank onto the first host)
            "--map-by", "ppr:%d:node" % RANKS_PER_HOST, "--bind-to", "none",
            "--mca", "plm_rsh_agent", agent,
            "--mca", "btl_tcp_if_include", subnet, "--mca", "oob_tcp_if_include", subnet,
            # Open MPI yields when idle by itself only where it sees the oversubscription.
            "--mca", "mpi_yield_when_idle", "1" if oversubscribed(hosts) else "0",
            "-x", "PYTHONPATH", "-x", "PATH", "-x", "PYTHONUNBUFFERED",
            sys.executable, os.path.join(WORKERS, "mpi_allreduce.py")] + worker_args


def run_openmpi(hosts, sizes, timeout, directory):
    cmd = openmpi_command(hosts, remote_shell(directory), ["--sizes", sizes, "--quick"])
    p = subprocess.Popen(cmd, env=dict(os.environ, **worker_env()), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    return parse_records(collect([p], timeout)[0].splitlines())


def side_env_bin(system):
    bindir = os.path.join(SIDE_ENVS[system], "bin")
    if not all(os.access(os.path.join(bindir, tool), os.X_OK) for tool in ("python", "mpirun")):
        raise RuntimeError("%s not installed in %s (run scripts/mpi_peers.sh %s)"
                           % (system, SIDE_ENVS[system], system))
    return bindir


def hydra_command(system, hosts, agent, worker_args):
    """(argv, environment) of MPICH's or Intel MPI's hydra ``mpirun`` across ``hosts``."""
    bindir = side_env_bin(system)
    cmd = [os.path.join(bindir, "mpirun")]
    env = worker_env()
    # Intel MPI's mpirun execs mpiexec.hydra from PATH: this environment's bin first.
    env["PATH"] = bindir + os.pathsep + env["PATH"]
    if system == "mpich":
        cmd += ["-launcher", "ssh", "-launcher-exec", agent, "-bind-to", "none"]
        # The namespace hosts share one kernel's shared memory and processes, so UCX would reach the
        # other hosts' ranks through them; machines apart have TCP only. Ranks of one host still
        # meet in MPICH's own shared memory.
        env.update(UCX_TLS="tcp,self", UCX_NET_DEVICES=IFACE)
        # (MPICH's ranks busy-poll whatever is set: neither MPIR_CVAR_CH4_PROGRESS_THROTTLE nor
        # MPIR_CVAR_POLLS_BEFORE_YIELD made them sleep or changed the times; there is no
        # counterpart of Open MPI's mpi_yield_when_idle to set.)
    else:
        cmd += ["-bootstrap", "ssh", "-bootstrap-exec", agent]
        env.update(I_MPI_FABRICS="shm:ofi", FI_PROVIDER="tcp", FI_TCP_IFACE=IFACE, I_MPI_PIN="0")
        if oversubscribed(hosts):
            # Intel MPI spins otherwise: 4 KiB took ms, not µs, with more ranks than cores.
            env["I_MPI_WAIT_MODE"] = "1"
    cmd += ["-hosts", ",".join(hosts.names), "-ppn", str(RANKS_PER_HOST), "-np", str(hosts.n * RANKS_PER_HOST),
            "-iface", IFACE, os.path.join(bindir, "python"), os.path.join(WORKERS, "mpi_allreduce.py")]
    return cmd + worker_args, env


def run_hydra(system, hosts, sizes, timeout, directory):
    cmd, env = hydra_command(system, hosts, remote_shell(directory), ["--sizes", sizes, "--quick"])
    p = hosts.popen(0, cmd, env=dict(os.environ, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return parse_records(collect([p], timeout)[0].splitlines())


def run_system(system, hosts, sizes, timeout, directory):
    """Records of one system's run across ``hosts``; raises on failure."""
    if system in ("hs_flat", "hs_hier"):
        return run_horovod_spark(hosts, sizes, system == "hs_hier", timeout)
    if system == "gloo":
        return run_gloo(hosts, sizes, timeout)
    if system == "openmpi":
        return run_openmpi(hosts, sizes, timeout, directory)
    return run_hydra(system, hosts, sizes, timeout, directory)


def sent_bytes(hosts):
    """Bytes each host has sent over its link so far (its veth's root end receives them)."""
    out = []
    for i in range(hosts.n):
        with open("/sys/class/net/%s/statistics/rx_bytes" % hosts.root_link(i)) as f:
            out.append(int(f.read()))
    return out


def check_crossed(records, hosts, before, after):
    """Raise when some host sent fewer bytes over its link than the timed allreduces need: ranks
    that met through something the namespace hosts share (memory, processes) instead of the network."""
    timed = sum(r["bytes"] * r["iters"] for r in records if r.get("kind") == "allreduce")
    # Every host must at least send its share of the other hosts' results, (n-1)/n of each message.
    need = timed * (hosts.n - 1) // hosts.n
    for i, (b, a) in enumerate(zip(before, after)):
        if a - b < need:
            raise RuntimeError("%s sent %d bytes over its link, less than the %d its timed allreduces need: its "
                               "ranks did not talk over the network" % (hosts.name(i), a - b, need))

