"""Where users import things from: the public paths (new and documented older ones) name the same
objects, the command-line launcher answers to both module names, and the lowest layers import
nothing above them."""
import os
import subprocess
import sys

import pytest

import horovod_spark

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__)))  # the checkout
RANK_SCRIPT = "import horovod_spark.torch as hvd; hvd.init(); print('rank', hvd.rank(), 'of', hvd.size())"


def test_every_exception_is_in_one_module_and_the_older_paths_name_the_same_classes():
    import horovod_spark.common.exceptions as common_exceptions
    import horovod_spark.exceptions as exc
    import horovod_spark.keras as hvd_keras
    import horovod_spark.runner.errors as runner_errors
    import horovod_spark.spark as hs_spark
    import horovod_spark.store as store
    import horovod_spark.tensorflow as hvd_tf
    import horovod_spark.torch as hvd_torch
    from horovod_spark.common import kv_client
    from horovod_spark.data import petastorm_support

    for name in ("HorovodInternalError", "HorovodCollectiveError", "HorovodTimeoutError"):
        assert getattr(common_exceptions, name) is getattr(exc, name)
    for module in (hvd_torch, hvd_tf, hvd_keras):
        assert module.HorovodInternalError is exc.HorovodInternalError
    assert runner_errors.RankFailedError is exc.RankFailedError
    assert hs_spark.HorovodSparkError is exc.HorovodSparkError
    assert hs_spark.StartTimeoutError is exc.StartTimeoutError
    assert hs_spark.RankFailedError is exc.SparkRankFailedError
    assert store.StoreConnectionError is exc.StoreConnectionError
    assert petastorm_support.PetastormUnavailableError is exc.PetastormUnavailableError
    assert kv_client.KVError is exc.KVError
    from horovod_spark.common import _core
    assert exc.TransportError is _core.TransportError
    # What ported code catches: Horovod's RuntimeErrors; a Spark rank failure as both kinds.
    assert issubclass(exc.HorovodCollectiveError, (ValueError, RuntimeError))
    assert issubclass(exc.SparkRankFailedError, exc.HorovodSparkError)
    assert issubclass(exc.SparkRankFailedError, exc.RankFailedError)
    assert issubclass(exc.ConfigError, ValueError)


def test_rank_failures_survive_pickling_with_their_fields():
    import pickle

    from horovod_spark.exceptions import RankFailedError, SparkRankFailedError, StartTimeoutError
    local = pickle.loads(pickle.dumps(RankFailedError(2, 1, "Traceback ...", "rank 2 failed")))
    assert (local.rank, local.exit_code, local.remote_traceback) == (2, 1, "Traceback ...")
    spark = pickle.loads(pickle.dumps(SparkRankFailedError(1, "ValueError", "bad", "tb", "group", "host", {3: "X"})))
    assert (spark.rank, spark.exc_type, spark.job_group, spark.other_failures) == (1, "ValueError", "group", {3: "X"})
    assert "rank 1 on host failed: ValueError: bad (then also rank 3)" in str(spark)
    timeout = pickle.loads(pickle.dumps(StartTimeoutError("late", [0, 2], "group")))
    assert (str(timeout), timeout.missing) == ("late", [0, 2])


def test_launcher_names():
    import horovod_spark
    import horovod_spark.launcher as launcher
    import horovod_spark.runner.launch as runner_launch
    import horovod_spark.runner.local as runner_local
    from horovod_spark.launcher import cli, local_job
    from horovod_spark.spark import entry as driver

    assert launcher.run_local is runner_local.run_local is local_job.run_local
    assert runner_launch.main is cli.main
    assert horovod_spark.run is driver.run
    with pytest.raises(AttributeError):
        launcher.no_such_name  # noqa: B018


@pytest.mark.parametrize("module", ["horovod_spark.launcher", "horovod_spark.runner"])
def test_command_line_launcher_under_both_module_names(module):
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run([sys.executable, "-m", module, "-np", "2", sys.executable, "-c", RANK_SCRIPT],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(proc.stdout.splitlines()) == ["[0]<stdout>:rank 0 of 2", "[1]<stdout>:rank 1 of 2"]


def _modules_loaded_by(statement):
    code = ("import sys; %s; print(' '.join(sorted(m for m in sys.modules if m.startswith(('horovod_spark', "
            "'pyspark')))))" % statement)
    proc = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=ROOT),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return set(proc.stdout.split())


def test_layers_import_nothing_above_them():
    assert _modules_loaded_by("import horovod_spark.exceptions") == {"horovod_spark", "horovod_spark.exceptions"}
    common = _modules_loaded_by("import horovod_spark.common.config, horovod_spark.common.kv_server, "
                                "horovod_spark.common.rendezvous, horovod_spark.common.basics")
    assert {m for m in common if not m.startswith("horovod_spark.common")} == {"horovod_spark",
                                                                               "horovod_spark.exceptions"}
    launcher = _modules_loaded_by("import horovod_spark.launcher.cli, horovod_spark.launcher.local_job")
    assert not {m for m in launcher if m.startswith(("pyspark", "horovod_spark.spark", "horovod_spark.torch"))}
    # A Spark rank process starts with no pyspark (and no launcher) to import.
    rank = _modules_loaded_by("import horovod_spark.spark.task.rank_main")
    assert not {m for m in rank if m.startswith(("pyspark", "horovod_spark.launcher"))}
