"""horovod_spark.run and HorovodRunner from a Spark Connect client, against a real Spark Connect
server started from the pip package over local[2] (one server for the module): results by rank,
rank output returned to the client, a failing rank's traceback, missing slots and MPI mode
refused at once, the dispatch between classic and remote sessions, and TorchDistributor's DDP."""
import io
import os
import sys
import time

import cloudpickle
import pytest

import horovod_spark
from horovod_spark.exceptions import HorovodSparkError, RankFailedError, SparkRankFailedError
from horovod_spark.spark import HorovodRunner

pytest.importorskip("pyspark.sql.connect.session")

pytestmark = pytest.mark.timeout(600)

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def remote():
    from support.spark_connect import remote_session
    with remote_session("local[2]") as session:
        yield session


def _allreduce(scale):
    import torch

    import horovod_spark.torch as hvd
    hvd.init()
    print("rank %d of %d says hello" % (hvd.rank(), hvd.size()), flush=True)
    print("rank %d on stderr" % hvd.rank(), file=sys.stderr, flush=True)
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item()
    return {"rank": hvd.rank(), "size": hvd.size(), "total": total * scale}


def _fail_on_rank_1():
    import horovod_spark.torch as hvd
    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("rank one cannot go on")
    time.sleep(120)  # cut short once rank 1 failed
    return "unreachable"


def test_the_remote_session_is_dispatched_to_spark_connect(remote):
    from horovod_spark.session import connect_session_in_use, is_connect_session
    assert is_connect_session(remote)
    assert connect_session_in_use() is remote


def test_run_returns_results_by_rank_and_the_ranks_output(remote):
    out, err = io.StringIO(), io.StringIO()
    results = horovod_spark.run(_allreduce, args=(10,), num_proc=2, stdout=out, stderr=err)
    assert results == [{"rank": 0, "size": 2, "total": 30.0}, {"rank": 1, "size": 2, "total": 30.0}]
    for rank in (0, 1):
        assert "[%d]<stdout>:rank %d of 2 says hello\n" % (rank, rank) in out.getvalue()
        assert "[%d]<stderr>:rank %d on stderr\n" % (rank, rank) in err.getvalue()


def test_a_failing_rank_raises_with_its_remote_traceback(remote):
    started = time.monotonic()
    with pytest.raises(SparkRankFailedError) as info:
        horovod_spark.run(_fail_on_rank_1, num_proc=2, stderr=io.StringIO())
    assert time.monotonic() - started < 100, "rank 0's sleep was not cut short"
    assert isinstance(info.value, RankFailedError)
    assert info.value.rank == 1 and info.value.exc_type == "ValueError"
    text = str(info.value)
    assert "ValueError: rank one cannot go on" in text
    assert "_fail_on_rank_1" in text and "Traceback" in text


def test_missing_slots_and_mpi_mode_fail_before_any_stage(remote):
    started = time.monotonic()
    with pytest.raises(HorovodSparkError, match=r"num_proc=3 ranks need 3 task slots.*local\[2\].*Spark Connect"):
        horovod_spark.run(_allreduce, args=(1,), num_proc=3)
    with pytest.raises(HorovodSparkError, match="use_mpi=True.*cannot work over Spark Connect"):
        horovod_spark.run(_allreduce, args=(1,), num_proc=2, use_mpi=True)
    assert time.monotonic() - started < 30  # a few configuration reads, no Spark job


def test_horovod_runner_returns_rank_zeros_result(remote, capsys):
    assert HorovodRunner(np=2).run(_allreduce, scale=2) == {"rank": 0, "size": 2, "total": 6.0}
    assert "[1]<stdout>:rank 1 of 2 says hello" in capsys.readouterr().out


def _ddp_allreduce(scale):
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    dist.barrier()
    dist.destroy_process_group()
    return {"rank": int(os.environ["RANK"]), "total": total.item() * scale}


def test_torch_distributor_runs_ddp_from_a_remote_session(remote):
    from horovod_spark import TorchDistributor
    distributor = TorchDistributor(num_processes=2, local_mode=False, use_gpu=False)
    assert distributor.run(_ddp_allreduce, 2) == {"rank": 0, "total": 6.0}


def test_cluster_facts_come_from_the_remote_sessions_configuration(remote):
    from horovod_spark import session as session_facts
    from horovod_spark.spark.connect.run import _report_interval_s
    assert session_facts.master(remote) == "local[2]"
    assert session_facts.known_slots(remote) == 2
    assert session_facts.default_parallelism(remote) == 2
    assert session_facts.active_session() is remote
    assert _report_interval_s(remote) == 2.0  # the server's default: progress reports every 2 s
