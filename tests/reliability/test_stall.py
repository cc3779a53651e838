"""A collective some rank never joins fails horovod_spark.run after the stall shutdown time instead
of hanging, and the stall warning (missing ranks, tensor name) reaches the driver's log.

The Spark default stall shutdown time is shortened for the test through
HOROVOD_SPARK_STALL_SHUTDOWN_TIME_SECONDS, and the warning interval through run()'s env."""
import logging
import sys
import time

import cloudpickle
import pytest

import horovod_spark
from horovod_spark.spark import HorovodSparkError
from horovod_spark.spark.run_options import with_stall_shutdown as _with_stall_shutdown

pytest.importorskip("pyspark")
pytestmark = pytest.mark.timeout(180)

cloudpickle.register_pickle_by_value(sys.modules[__name__])

WARN_EVERY_SECOND = {"HOROVOD_STALL_CHECK_TIME_SECONDS": "1"}
# Generous: the shutdown time plus a slow machine's rank start-up and teardown; without the
# shutdown the run would only end with the test's timeout.
LIMIT_S = 60


def _rank_one_never_joins():
    import torch

    import horovod_spark.torch as hvd
    hvd.init()
    if hvd.rank() == 1:
        time.sleep(3600)
    return hvd.allreduce(torch.ones(1), name="lonely").item()


def _allreduce_against_broadcast():
    import torch

    import horovod_spark.torch as hvd
    hvd.init()
    if hvd.rank() == 0:
        return hvd.allreduce(torch.ones(1), name="shared").item()
    return hvd.broadcast(torch.ones(1), root_rank=0, name="shared").item()


@pytest.fixture
def short_spark_stall_default(monkeypatch):
    monkeypatch.delenv("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", raising=False)
    monkeypatch.setenv("HOROVOD_SPARK_STALL_SHUTDOWN_TIME_SECONDS", "4")


def test_a_rank_that_never_joins_fails_the_run_and_is_logged_on_the_driver(spark, caplog, short_spark_stall_default):
    caplog.set_level(logging.WARNING, logger="horovod_spark.spark.stall")
    started = time.monotonic()
    with pytest.raises(HorovodSparkError) as info:
        horovod_spark.run(_rank_one_never_joins, num_proc=2, env=WARN_EVERY_SECOND, verbose=0)
    assert time.monotonic() - started < LIMIT_S
    text = str(info.value)
    assert "lonely" in text and "stalled" in text and "[1]" in text, text
    assert "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS" in text, text
    warnings = [r.getMessage() for r in caplog.records if r.name == "horovod_spark.spark.stall"]
    assert warnings and "lonely" in warnings[0] and "missing ranks [1]" in warnings[0], warnings


def test_allreduce_against_broadcast_under_one_name_fails_the_run(spark, short_spark_stall_default):
    started = time.monotonic()
    with pytest.raises(HorovodSparkError) as info:
        horovod_spark.run(_allreduce_against_broadcast, num_proc=2, env=WARN_EVERY_SECOND, verbose=0)
    assert time.monotonic() - started < LIMIT_S
    assert "shared" in str(info.value), str(info.value)


def test_spark_ranks_get_a_stall_shutdown_time_unless_the_user_sets_one(monkeypatch):
    monkeypatch.delenv("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", raising=False)
    monkeypatch.delenv("HOROVOD_SPARK_STALL_SHUTDOWN_TIME_SECONDS", raising=False)
    assert _with_stall_shutdown({})["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] == "600.0"
    assert _with_stall_shutdown({"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "7"}) == {
        "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "7"}
    monkeypatch.setenv("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0")
    assert _with_stall_shutdown({})["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] == "0"
