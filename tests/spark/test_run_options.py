"""The options of Spark jobs: ``run``, ``run_elastic``, ``SparkBackend`` and ``HorovodRunner`` refuse
every bad value with its option's one wording, naming the call, before any Spark job exists."""
import pytest

import horovod_spark
from horovod_spark.spark.backend import SparkBackend
from horovod_spark.spark.notebook.horovod_runner import HorovodRunner
from horovod_spark.spark.run_options import ElasticSparkOptions, SparkRunOptions

pytest.importorskip("pyspark")


def test_options_resolve_the_drivers_defaults(monkeypatch):
    monkeypatch.setenv("HOROVOD_SPARK_START_TIMEOUT", "42")
    monkeypatch.setenv("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "90")
    options = SparkRunOptions.from_kwargs("horovod_spark.run", env={"A": 1}, nics="lo", verbose=0)
    assert options.num_proc is None and options.start_timeout == 42.0 and options.output.verbose == 0
    assert options.rank_env == {"A": "1", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "90", "HOROVOD_GLOO_IFACE": "lo"}
    assert options.with_default_num_proc(3).num_proc == 3
    assert SparkRunOptions.from_kwargs("x", num_proc=2).with_default_num_proc(3).num_proc == 2
    with pytest.raises(AttributeError):
        options.num_proc = 2
    with pytest.raises(ValueError, match=r"^horovod_spark.run\(num_proc=0\): pass a positive number of ranks"):
        options.with_default_num_proc(0)


def test_elastic_sizes_default_to_num_proc_and_are_checked_against_it():
    options = ElasticSparkOptions.from_kwargs("horovod_spark.run_elastic", num_proc=3, min_np=2)
    assert (options.num_proc, options.min_num_proc, options.max_num_proc) == (3, 2, 3)
    later = ElasticSparkOptions.from_kwargs("horovod_spark.run_elastic", max_num_proc=5)
    assert later.num_proc is None and later.with_default_num_proc(4).max_num_proc == 5
    with pytest.raises(ValueError, match=r"^horovod_spark.run_elastic: need min_num_proc <= num_proc <= "
                                         r"max_num_proc, got 6 <= 6 <= 5"):
        later.with_default_num_proc(6)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(num_proc=0), ValueError, r"^horovod_spark.run_elastic\(num_proc=0\): pass a positive number of ranks"),
    (dict(num_proc=2, min_num_proc=0), ValueError, r"^horovod_spark.run_elastic\(min_num_proc=0\)"),
    (dict(num_proc=2, max_num_proc=1), ValueError, r"got 2 <= 2 <= 1"),
    (dict(num_proc=2, reset_limit=-1), ValueError, r"reset_limit must be a whole number"),
    (dict(num_proc=2, env=["A=1"]), TypeError, r"^horovod_spark.run_elastic\(env=...\) takes a dict"),
    (dict(num_proc=2, start_timeout=0), ValueError, "start_timeout must be > 0 seconds"),
    (dict(num_proc=2, nics=[]), ValueError, "network interface names"),
    (dict(num_proc=2, executable=""), ValueError, "Python interpreter"),
])
def test_run_elastic_refuses_bad_options_before_any_job(spark, kwargs, error, match):
    jobs = len(spark.sparkContext.statusTracker().getJobIdsForGroup())
    with pytest.raises(error, match=match):
        horovod_spark.run_elastic(lambda: 0, **kwargs)
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup()) == jobs


@pytest.mark.parametrize("make, error, match", [
    (lambda: horovod_spark.run(lambda: 0, num_proc="2"), TypeError,
     r"^horovod_spark.run\(num_proc='2'\): pass a positive number of ranks \(num_proc must be a positive integer, "
     r"or None for the session's default parallelism\)$"),
    (lambda: horovod_spark.run(lambda: 0, num_proc=2, env={"A": None}), TypeError,
     r"^horovod_spark.run\(env=...\): entries must be str -> str"),
    (lambda: SparkBackend(num_proc=-1), ValueError, r"^SparkBackend\(num_proc=-1\): pass a positive number"),
    (lambda: SparkBackend(num_proc=2, start_timeout=-5).run(lambda: 0), ValueError,
     "start_timeout must be > 0 seconds"),
    (lambda: SparkBackend(num_proc=2).run(lambda: 0, nics=["a,b"]), ValueError, "network interface names"),
])
def test_spark_entry_points_refuse_bad_options_before_any_job(spark, make, error, match):
    jobs = len(spark.sparkContext.statusTracker().getJobIdsForGroup())
    with pytest.raises(error, match=match):
        make()
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup()) == jobs


def test_horovod_runner_passes_its_options_down(spark):
    assert HorovodRunner(np=1).run(lambda: 7) == 7
    assert HorovodRunner(np=-1).run(lambda: 8) == 8
