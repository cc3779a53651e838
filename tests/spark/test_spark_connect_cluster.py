"""horovod_spark.run from a Spark Connect client whose server runs local-cluster[2,1,1024]: two
executor JVMs, one slot each, so rank 0's task and rank 1's task live in different executors and
rendezvous through rank 0's executor."""
import io
import sys

import cloudpickle
import pytest

import horovod_spark
from horovod_spark.exceptions import HorovodSparkError

pytest.importorskip("pyspark.sql.connect.session")

pytestmark = pytest.mark.timeout(600)

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def remote():
    from support.spark_connect import remote_session
    with remote_session("local-cluster[2,1,1024]") as session:
        yield session


def _where():
    import os

    import torch

    import horovod_spark.torch as hvd
    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item()
    # Up the process tree (Python worker, pyspark daemon) to the executor JVM that ran the task.
    pid, executor = os.getppid(), "?"
    while pid > 1 and executor == "?":
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            argv = f.read().split(b"\0")
        if b"--executor-id" in argv:
            executor = argv[argv.index(b"--executor-id") + 1].decode()
        with open("/proc/%d/stat" % pid, "rb") as f:
            pid = int(f.read().rsplit(b")", 1)[1].split()[1])
    print("rank %d in executor %s" % (hvd.rank(), executor), flush=True)
    return hvd.rank(), total, executor


def test_ranks_in_two_executors_rendezvous_through_rank_zeros_task(remote):
    out = io.StringIO()
    results = horovod_spark.run(_where, num_proc=2, stdout=out)
    assert [r[:2] for r in results] == [(0, 3.0), (1, 3.0)]
    assert results[0][2] != results[1][2], results
    assert "[1]<stdout>:rank 1 in executor" in out.getvalue()


def test_more_ranks_than_the_two_executors_slots_fail_at_once(remote):
    with pytest.raises(HorovodSparkError, match=r"num_proc=3 ranks need 3 task slots.*has 2"):
        horovod_spark.run(_where, num_proc=3)
