"""Local jobs bind each rank to its own CPUs, and the core sees the ranks' masks together."""
import io
import os
import subprocess
import sys

import pytest

import horovod_spark
from horovod_spark.common.config import ConfigError
from horovod_spark.launcher import cpu_binding, run_local
from horovod_spark.launcher.local_job import LocalJob
from horovod_spark.launcher.supervisor import RankSupervisor

pytestmark = pytest.mark.timeout(120)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__)))


def _cores(n):
    """n cores of hardware threads numbered as Linux does: core k's threads are k, k + n, ..."""
    return lambda cpu: cpu % n


@pytest.mark.parametrize("num_proc, cpus, core, expected", [
    (2, [0, 1], lambda c: c, [[0], [1]]),
    (2, [0, 1, 2, 3], lambda c: c, [[0, 1], [2, 3]]),
    (3, range(8), lambda c: c, [[0, 1, 2], [3, 4, 5], [6, 7]]),
    # Two cores of two hardware threads (0/2 and 1/3): whole cores while they last...
    (2, [0, 1, 2, 3], _cores(2), [[0, 2], [1, 3]]),
    (1, [0, 1, 2, 3], _cores(2), [[0, 1, 2, 3]]),
    # ...then single threads, a core's threads next to each other.
    (3, [0, 1, 2, 3], _cores(2), [[0, 2], [1], [3]]),
    (4, [0, 1, 2, 3], _cores(2), [[0], [2], [1], [3]]),
    # Only the launcher's own CPUs are handed out.
    (2, [2, 3, 6, 7], lambda c: c, [[2, 3], [6, 7]]),
])
def test_plan_gives_contiguous_shares(num_proc, cpus, core, expected):
    assert cpu_binding.plan(num_proc, list(cpus), core) == expected


def test_plan_binds_nothing_with_more_ranks_than_cpus():
    assert cpu_binding.plan(3, [0, 1], lambda c: c) is None
    assert cpu_binding.plan(0, [0, 1], lambda c: c) is None


def test_core_of_reads_this_machines_topology():
    cpus = cpu_binding.allowed_cpus()
    assert cpus and all(isinstance(c, int) for c in cpus)
    assert len({cpu_binding.core_of(c) for c in cpus}) <= len(cpus)


def _placement():
    import torch

    import horovod_spark.torch as hvd
    from horovod_spark.common import _core

    hvd.init()
    try:
        hvd.allreduce(torch.ones(4), name="works")
        return {"mask": sorted(os.sched_getaffinity(0)), "omp": os.environ.get("OMP_NUM_THREADS"),
                **_core.cpu_placement()}
    finally:
        hvd.shutdown()


def test_ranks_run_on_their_own_cpus_and_the_core_still_spins():
    num_proc = 2
    plan = cpu_binding.plan(num_proc)
    if plan is None:
        pytest.skip("fewer than 2 CPUs")
    env = {"OMP_NUM_THREADS": ""}  # unset: the launcher's default applies
    results = run_local(_placement, num_proc=num_proc, env=env, timeout=90)
    assert [r["mask"] for r in results] == plan
    assert [r["omp"] for r in results] == [str(len(cpus)) for cpus in plan]
    union = len({c for cpus in plan for c in cpus})
    for rank, r in enumerate(results):
        assert r["local_cpus"] == union, "rank %d: %r" % (rank, r)
        assert r["shared"] is False, "rank %d thinks the ranks share CPUs though each has its own: %r" % (rank, r)


def test_unbound_ranks_confined_to_one_cpu_know_they_share_it():
    # The launcher's thread runs on one CPU only, so the ranks it starts inherit that one CPU.
    before = os.sched_getaffinity(0)
    cpu = min(before)
    os.sched_setaffinity(0, {cpu})
    try:
        results = run_local(_placement, num_proc=2, env={"HOROVOD_CPU_BIND": "0"}, timeout=90)
    finally:
        os.sched_setaffinity(0, before)
    for rank, r in enumerate(results):
        assert r["mask"] == [cpu]
        assert r["local_cpus"] == 1 and r["shared"] is True, "rank %d: %r" % (rank, r)


def test_more_ranks_than_cpus_are_not_bound():
    cpus = cpu_binding.allowed_cpus()
    job = LocalJob(["true"], len(cpus) + 1)
    try:
        assert job.cpus is None
    finally:
        job.close()


def test_a_bad_setting_is_refused_before_anything_starts():
    with pytest.raises(ConfigError, match="HOROVOD_CPU_BIND='sometimes'.*set it to 1, true, yes or on"):
        LocalJob(["true"], 2, env={"HOROVOD_CPU_BIND": "sometimes"})


def test_a_rank_that_cannot_be_bound_fails_with_the_reason():
    no_such_cpu = max(cpu_binding.allowed_cpus()) + 4096
    sup = RankSupervisor([[sys.executable, "-c", "print('ran')"]], [dict(os.environ)], cpus=[[no_such_cpu]],
                         stdout=io.StringIO(), stderr=io.StringIO())
    sup.start()
    try:
        failure = sup.wait(30)
    finally:
        sup.stop()
    assert failure is not None and failure.returncode == 126
    assert "cannot bind this rank to CPUs" in sup.stderr_tail(0) and "HOROVOD_CPU_BIND=0" in sup.stderr_tail(0)


def test_the_cli_binds_its_ranks_and_says_so_when_verbose():
    plan = cpu_binding.plan(2)
    if plan is None:
        pytest.skip("fewer than 2 CPUs")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO_ROOT] + [p for p in os.environ.get("PYTHONPATH", "")
                                                                     .split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, "-m", "horovod_spark.launcher", "-np", "2", "--verbose", sys.executable,
                           "-c", "import os; print(os.environ['HOROVOD_RANK'], sorted(os.sched_getaffinity(0)))"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert sorted(proc.stdout.splitlines()) == ["[%d]<stdout>:%d %s" % (r, r, plan[r]) for r in range(2)]
    assert "CPUs by rank " + " ".join(",".join(map(str, cpus)) for cpus in plan) in proc.stderr
