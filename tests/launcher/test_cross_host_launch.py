"""benchmarks/cross_host.py's launch helpers: its options, the ssh stand-in the MPI launchers run,
the check that ranks met over the network, and MPICH and Intel MPI started across two namespace
hosts (4 KiB only; skipped where namespaces or scripts/mpi_peers.sh's environments are missing).
"""
import argparse
import os
import subprocess
import sys

import pytest
from support.netns_hosts import hosts_fixture

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "benchmarks")
sys.path.insert(0, BENCHMARKS)

import cross_host  # noqa: E402
import cross_host_launch  # noqa: E402

pytestmark = pytest.mark.timeout(120)

netns_hosts = hosts_fixture(2)


def test_systems_option_accepts_every_mpi_and_the_old_open_mpi_name():
    assert cross_host.parse_systems("mpi,mpich,intelmpi,hs_hier") == ["openmpi", "mpich", "intelmpi", "hs_hier"]
    with pytest.raises(argparse.ArgumentTypeError, match="unknown system impi .*choose from"):
        cross_host.parse_systems("hs_flat,impi")
    with pytest.raises(argparse.ArgumentTypeError, match="tc rate"):
        cross_host.parse_links("1gbit,fast")
    with pytest.raises(argparse.ArgumentTypeError, match="at least 2"):
        cross_host.parse_hosts("1")


def test_ranks_that_sent_too_little_over_a_link_are_caught():
    records = [{"kind": "allreduce", "bytes": 1000, "iters": 10}, {"kind": "library"}]

    class TwoHosts:
        n = 2

        def name(self, i):
            return "h%d" % i

    cross_host_launch.check_crossed(records, TwoHosts(), [0, 0], [5000, 5000])
    with pytest.raises(RuntimeError, match="h1 sent 4999 bytes .* less than the 5000"):
        cross_host_launch.check_crossed(records, TwoHosts(), [0, 0], [5000, 4999])


def test_remote_shell_runs_on_the_named_host_past_ssh_options(netns_hosts, tmp_path):
    script = cross_host_launch.remote_shell(str(tmp_path))
    name = netns_hosts.name(1)
    done = subprocess.run([script, "-q", "-x", "-o", "BatchMode=yes", name, "hostname && ip -4 -o addr show eth0"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == name
    assert netns_hosts.addr(1) + "/" in done.stdout


@pytest.mark.parametrize("system", ["mpich", "intelmpi"])
def test_hydra_mpi_runs_across_namespace_hosts_over_their_links(netns_hosts, tmp_path, system):
    try:
        cross_host_launch.side_env_bin(system)
    except RuntimeError as exc:
        pytest.skip(str(exc))
    before = cross_host_launch.sent_bytes(netns_hosts)
    records = cross_host_launch.run_system(system, netns_hosts, "4096", 90, str(tmp_path))
    after = cross_host_launch.sent_bytes(netns_hosts)
    timed = [r for r in records if r.get("kind") == "allreduce"]
    assert [(r["bytes"], r["np"]) for r in timed] == [(4096, 4)], records
    assert len(timed[0]["cpu_s_per_op_ranks"]) == 4
    cross_host_launch.check_crossed(records, netns_hosts, before, after)
