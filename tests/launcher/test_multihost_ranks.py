"""Ranks on separate namespace hosts through the launcher's rendezvous (no Spark): placements the
Spark scheduler would not make (1, 2 and 3 ranks per host), and a host whose link is cut or whose
processes are killed in the middle of training.

Each test builds its own hosts (a fraction of a second), so a cut link never outlives its test.
"""
import sys
import time

import pytest
from support.netns_hosts import hosts_fixture
from support.netns_ranks import NetnsRanks

pytestmark = pytest.mark.timeout(180)

netns_hosts = hosts_fixture(3, scope="function")

# A lost host must be reported by every surviving rank within this many seconds.
FAULT_REPORT_S = 10.0


def _program(name):
    return [sys.executable, "-m", "support.netns_rank_programs", name]


def test_uneven_placement_one_two_three_ranks_per_host(netns_hosts):
    with NetnsRanks(netns_hosts, [1, 2, 3], _program("checks")) as job:
        assert job.wait(timeout=120) == [0] * 6, job.stderr_tails()
    seen = [job.lines[r][0] for r in range(6)]
    hosts = [netns_hosts.name(h) for h in job.host_of]
    addr_of = {netns_hosts.name(i): netns_hosts.addr(i) for i in range(3)}
    for rank, s in enumerate(seen):
        local = [r for r, h in enumerate(hosts) if h == s["host"]]
        crossing = [h for h in dict.fromkeys(hosts) if hosts.count(h) > local.index(rank)]
        assert s["host"] == hosts[rank]
        assert (s["local_rank"], s["local_size"]) == (local.index(rank), len(local)), s
        assert (s["cross_rank"], s["cross_size"]) == (crossing.index(s["host"]), len(crossing)), s
        want = {addr_of[h]: 3 * hosts.count(h) for h in addr_of if h != s["host"]}
        if len(local) > 1:
            want[addr_of[s["host"]]] = len(local) - 1
        assert {ip: c for ip, c in s["tcp_by_ip"].items() if ip in addr_of.values()} == want, (rank, s)
        assert s["shm"] == (len(local) > 1), (rank, s)
        failed = {k: v for k, v in s["checks"].items() if v is not True}
        assert not failed, failed


def _fault_during_training(hosts, inflict):
    """Start 2 ranks on each of 3 hosts training; once all run, ``inflict`` a fault on host 2.
    Returns the job and the time of the fault."""
    job = NetnsRanks(hosts, [2, 2, 2], _program("train_until_error")).start()
    try:
        job.wait_for(lambda j: all(j.lines[r] for r in range(6)), 90, "every rank to train")
        t0 = time.time()
        inflict(2)
        return job, t0
    except BaseException:
        job.close()
        raise


def _check_survivors_report(job, t0, lost_host):
    survivors = [r for r in range(6) if job.host_of[r] != 2]
    job.wait_for(lambda j: all(len(j.lines[r]) > 1 for r in survivors), FAULT_REPORT_S + 5,
                 "every surviving rank to report the error")
    for r in survivors:
        report = job.lines[r][1]
        delay = report["time"] - t0
        assert delay < FAULT_REPORT_S, "rank %d reported after %.1f s: %s" % (r, delay, report["error"])
        assert lost_host in report["error"], "rank %d's error does not name %s: %s" % (r, lost_host, report["error"])
    assert job.wait(timeout=30)[:4] == [0] * 4  # survivors end on their own: nothing hangs


def test_cut_link_fails_every_surviving_rank_naming_the_lost_host(netns_hosts):
    job, t0 = _fault_during_training(netns_hosts, netns_hosts.link_down)
    try:
        _check_survivors_report(job, t0, netns_hosts.name(2))
        # The cut-off host's own ranks find themselves alone just as fast (the first to notice
        # names the others' silence; its neighbour may then see it leave first).
        job.wait_for(lambda j: len(j.lines[4]) > 1 and len(j.lines[5]) > 1, 5, "the cut-off host's ranks to fail")
        errors = [job.lines[r][1] for r in (4, 5)]
        assert all(e["time"] - t0 < FAULT_REPORT_S for e in errors), errors
        assert any("stopped answering" in e["error"] for e in errors), errors
    finally:
        job.close()


def test_killed_host_fails_every_surviving_rank_naming_it(netns_hosts):
    job, t0 = _fault_during_training(netns_hosts, netns_hosts.kill_host_processes)
    try:
        _check_survivors_report(job, t0, netns_hosts.name(2))
    finally:
        job.close()


netns_hosts_two_nics = hosts_fixture(3, scope="function", extra_iface=True)


def _one_allreduce(hosts, env):
    with NetnsRanks(hosts, [2, 2, 2], _program("init_and_allreduce"), env=env) as job:
        assert job.wait(timeout=90) == [0] * 6, job.stderr_tails()
    return [job.lines[r][0] for r in range(6)]


@pytest.mark.parametrize("nics", [None, "eth1,eth0"], ids=["automatic", "named-first-unreachable"])
def test_ranks_use_the_interface_that_reaches_the_other_hosts(netns_hosts_two_nics, nics):
    hosts = netns_hosts_two_nics  # eth0 on the shared bridge; eth1 on a subnet of its own
    reports = _one_allreduce(hosts, {"HOROVOD_GLOO_IFACE": nics} if nics else {})
    for r, rep in enumerate(reports):
        assert rep.get("sum") == 15.0, rep
        other_hosts = {hosts.addr(h) for h in range(3) if h != r // 2}
        assert {ip: c for ip, c in rep["tcp_by_ip"].items() if ip in other_hosts} == dict.fromkeys(other_hosts, 6)


def test_no_interface_reaches_the_others_fails_naming_hosts_and_interfaces(netns_hosts_two_nics):
    hosts = netns_hosts_two_nics
    reports = _one_allreduce(hosts, {"HOROVOD_GLOO_IFACE": "eth1", "HOROVOD_START_TIMEOUT": "6"})
    for r, rep in enumerate(reports):
        error = rep.get("error", "")
        assert error.startswith("ConnectionError: hvd.init() on rank %d (host %s) cannot reach 2 other host(s)"
                                % (r, hosts.name(r // 2))), rep
        for h in range(3):
            if h != r // 2:
                assert "host %s (ranks %d, %d): tried 10.78.%d.1 (eth1)" % (hosts.name(h), 2 * h, 2 * h + 1, h) \
                    in error, error
        assert "HOROVOD_GLOO_IFACE=eth1" in error
        assert rep["after_init_s"] < 6 + 3, "rank %d failed %.1f s into hvd.init()" % (r, rep["after_init_s"])
