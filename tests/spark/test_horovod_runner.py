"""HorovodRunner (sparkdl's API) on a local[2] SparkSession and on the driver alone: rank 0's return
value, np checks, a failing rank's traceback, rank output streaming into the cell while the job
runs, driver_log_verbosity="log_callback_only" with log_to_driver and the Keras LogCallback."""
import io
import os
import subprocess
import sys
import time
import uuid

import cloudpickle
import pytest

import horovod_spark
from horovod_spark.exceptions import RankFailedError
from horovod_spark.spark import HorovodRunner
from horovod_spark.spark.notebook.driver_log import MARKER, RankOutputFilter

pyspark = pytest.importorskip("pyspark")

pytestmark = pytest.mark.timeout(300)

# Functions below travel by value, like a notebook's.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


# -- rank functions ---------------------------------------------------------------------------

def _train(scale, tag="x"):
    import torch

    import horovod_spark.torch as hvd
    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item()
    return {"rank": hvd.rank(), "size": hvd.size(), "total": total, "value": scale * (hvd.rank() + 1), "tag": tag}


def _fail_on_rank_1():
    import horovod_spark.torch as hvd
    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("rank one cannot go on")
    time.sleep(30)  # stopped by the runner once rank 1 failed
    return "unreachable"


def _wait_for_driver(flag_path):
    """Rank 0 prints a line, then goes on only once the driver has shown that line in the cell:
    this returns only if output streams while the job runs."""
    rank = int(os.environ["HOROVOD_RANK"])
    if rank == 0:
        print("ready %s" % os.path.basename(flag_path), flush=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(flag_path):
            if time.monotonic() > deadline:
                raise TimeoutError("the driver never showed rank 0's line while the job ran")
            time.sleep(0.05)
    return rank


def _noisy(token):
    from horovod_spark.spark import log_to_driver
    rank = int(os.environ["HOROVOD_RANK"])
    print("noise %s from %d" % (token, rank), flush=True)
    print("stderr noise %s from %d" % (token, rank), file=sys.stderr, flush=True)
    log_to_driver("signal %s from %d\nsecond line" % (token, rank))
    return rank


def _keras_fit_with_log_callback():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import numpy as np

    import horovod_spark.keras as hvd
    from horovod_spark.spark import LogCallback
    hvd.init()
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
    x = np.ones((16, 3), dtype="float32")
    model.fit(x, x[:, :1], batch_size=8, epochs=2, verbose=0, callbacks=[LogCallback(per_batch_log=True)])
    return hvd.rank()


class _Cell(io.StringIO):
    """Stands in for the notebook cell's stdout; creates ``flag_path`` when rank 0's line shows."""

    def __init__(self, flag_path=None):
        super().__init__()
        self.flag_path = flag_path

    def write(self, text):
        if self.flag_path and "[0]<stdout>:ready %s" % os.path.basename(self.flag_path) in text:
            open(self.flag_path, "w").close()
        return super().write(text)


# -- tests --------------------------------------------------------------------------------------

@pytest.mark.parametrize("np_", [2, -2])
def test_run_returns_rank_zeros_value(spark, np_):
    result = HorovodRunner(np=np_).run(_train, scale=10, tag="kw")
    assert result == {"rank": 0, "size": 2, "total": 3.0, "value": 10, "tag": "kw"}


def test_importable_from_both_paths_without_importing_pyspark():
    assert horovod_spark.HorovodRunner is HorovodRunner
    code = ("import sys, horovod_spark; r = horovod_spark.HorovodRunner(np=-2); "
            "import horovod_spark.spark as s; assert s.HorovodRunner is type(r); "
            "assert 'pyspark' not in sys.modules, 'pyspark was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60,
                   env=dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(horovod_spark.__file__))))


def test_np_zero_and_bad_arguments_are_refused():
    with pytest.raises(ValueError, match=r"np=0 is not supported: pass the number of processes.*defaultParallelism"
                                         r".*negative np"):
        HorovodRunner(np=0)
    with pytest.raises(TypeError, match="np must be an integer"):
        HorovodRunner(np=True)
    with pytest.raises(TypeError, match="np must be an integer"):
        HorovodRunner(np="2")
    with pytest.raises(ValueError, match="driver_log_verbosity='some'.*'all'.*'log_callback_only'"):
        HorovodRunner(np=2, driver_log_verbosity="some")
    with pytest.raises(TypeError, match="training function"):
        HorovodRunner(np=-1).run("not a function")


@pytest.mark.parametrize("np_", [2, -2])
def test_a_failing_rank_raises_with_its_traceback(spark, np_):
    started = time.monotonic()
    with pytest.raises(RankFailedError) as info:
        HorovodRunner(np=np_).run(_fail_on_rank_1)
    assert time.monotonic() - started < 30, "the other rank's sleep was not cut short"
    assert info.value.rank == 1
    text = str(info.value)
    assert "ValueError: rank one cannot go on" in text
    assert "_fail_on_rank_1" in text and "Traceback" in text


@pytest.mark.parametrize("np_", [2, -2])
def test_rank_output_streams_into_the_cell_while_the_job_runs(spark, np_, tmp_path, monkeypatch):
    cell = _Cell(str(tmp_path / ("flag-%s" % uuid.uuid4().hex)))
    monkeypatch.setattr(sys, "stdout", cell)
    assert HorovodRunner(np=np_).run(_wait_for_driver, flag_path=cell.flag_path) == 0
    assert "[0]<stdout>:ready" in cell.getvalue()


@pytest.mark.parametrize("np_", [2, -2])
def test_log_callback_only_shows_log_to_driver_lines_and_sends_the_rest_to_the_driver_log(spark, np_, capfd,
                                                                                         monkeypatch):
    token = uuid.uuid4().hex[:8]
    cell_out, cell_err = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", cell_out)
    monkeypatch.setattr(sys, "stderr", cell_err)
    HorovodRunner(np=np_, driver_log_verbosity="log_callback_only").run(_noisy, token=token)
    cell = cell_out.getvalue() + cell_err.getvalue()
    for rank in (0, 1):
        assert "[%d]<stdout>:signal %s from %d\n" % (rank, token, rank) in cell
        assert "[%d]<stdout>:second line\n" % rank in cell
        assert "noise %s" % token not in cell
    driver_log = capfd.readouterr().err
    assert "[1]<stdout>:noise %s from 1" % token in driver_log
    assert "[0]<stderr>:stderr noise %s from 0" % token in driver_log
    assert MARKER not in cell + driver_log

    # With "all" every line shows in the cell, the marked ones without their mark.
    cell_out.seek(0)
    cell_out.truncate()
    HorovodRunner(np=np_).run(_noisy, token=token)
    shown = cell_out.getvalue()
    assert "[1]<stdout>:noise %s from 1" % token in shown and "[0]<stdout>:signal %s from 0" % token in shown
    assert MARKER not in shown


def test_keras_log_callback_logs_each_epoch_once_on_the_first_rank(monkeypatch):
    pytest.importorskip("keras")
    cell = io.StringIO()
    monkeypatch.setattr(sys, "stdout", cell)
    assert HorovodRunner(np=-2, driver_log_verbosity="log_callback_only").run(_keras_fit_with_log_callback) == 0
    lines = cell.getvalue().splitlines()
    assert [line for line in lines if line.startswith("[0]<stdout>:epoch ") and "batch" not in line
            and "done" not in line] == ["[0]<stdout>:epoch 1/2", "[0]<stdout>:epoch 2/2"]
    assert sum("done in" in line and "loss=" in line for line in lines) == 2
    assert sum("batch" in line for line in lines) == 4  # 16 rows in batches of 8, 2 epochs, rank 0 only
    assert not any(line.startswith("[1]") for line in lines), lines


def test_output_filter_routes_lines_by_verbosity():
    cell, driver_log = io.StringIO(), io.StringIO()
    sink = RankOutputFilter("log_callback_only", cell=cell, driver_log=driver_log)
    sink.write("[horovod_spark] runner message\n[0]<stdout>:plain\n[1]<stdout>:%spicked\n" % MARKER)
    sink.write("2024-01-02 03:04:05.678 [0]<stderr>:%sstamped" % MARKER)
    sink.close()
    assert cell.getvalue() == ("[horovod_spark] runner message\n[1]<stdout>:picked\n"
                               "2024-01-02 03:04:05.678 [0]<stderr>:stamped\n")
    assert driver_log.getvalue() == "[0]<stdout>:plain\n"
