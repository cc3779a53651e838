"""The parts of an elastic fit that need no cluster: its Params' checks, and rank 0's progress
lines travelling to the driver's printer over the fit's progress service (a real KV service on
loopback)."""
import io

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pyspark")

from horovod_spark.common import wire  # noqa: E402
from horovod_spark.common.kv_server import KVStoreServer  # noqa: E402
from horovod_spark.estimator import TorchEstimator  # noqa: E402
from horovod_spark.estimator.common.checks import check_common  # noqa: E402
from horovod_spark.estimator.common.elastic_fit import resolve_sizes  # noqa: E402
from horovod_spark.estimator.common.elastic_progress import (  # noqa: E402
    OP_LINE,
    ProgressChannel,
    RemoteLines,
    line_handler,
)
from horovod_spark.estimator.common.progress_driver import ProgressPrinter  # noqa: E402
from horovod_spark.estimator.common.progress_rank import ProgressReporter  # noqa: E402
from horovod_spark.store import Store  # noqa: E402


def _estimator(tmp_path, **params):
    net = torch.nn.Linear(2, 2)
    given = dict(num_proc=3, model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                 loss=torch.nn.functional.cross_entropy, feature_cols=["x"], label_cols=["y"],
                 store=Store.create(str(tmp_path / "store")))
    given.update(params)
    return TorchEstimator(**given)


def test_elastic_is_off_by_default_and_its_sizes_need_it(tmp_path):
    assert check_common(_estimator(tmp_path)).elastic is None
    settings = check_common(_estimator(tmp_path, elastic=True)).elastic
    assert resolve_sizes(settings, 3) == (1, 3)
    assert resolve_sizes(check_common(_estimator(tmp_path, elastic=True, min_num_proc=2)).elastic, 3) == (2, 3)
    with pytest.raises(ValueError, match="min_num_proc=2 applies to elastic fits only: pass elastic=True"):
        check_common(_estimator(tmp_path, min_num_proc=2))
    with pytest.raises(ValueError, match="min_num_proc=3 is more than max_num_proc=2"):
        check_common(_estimator(tmp_path, elastic=True, min_num_proc=3, max_num_proc=2))
    with pytest.raises(ValueError, match="need min_num_proc <= num_proc <= max_num_proc, got 4 <= 3 <= 3"):
        resolve_sizes(check_common(_estimator(tmp_path, elastic=True, min_num_proc=4)).elastic, 3)
    from horovod_spark.spark.backend import SparkBackend
    with pytest.raises(ValueError, match="drop backend="):
        check_common(_estimator(tmp_path, elastic=True, num_proc=None, backend=SparkBackend(num_proc=2)))


def test_rank_progress_reaches_the_driver_printer_over_the_service():
    out = io.StringIO()
    printer = ProgressPrinter(verbose=1, out=out, bar_factory=None)
    key = wire.make_secret()
    server = KVStoreServer(key, host="127.0.0.1")
    server.add_handler(OP_LINE, line_handler(printer))
    port = server.start()
    try:
        lines = RemoteLines(ProgressChannel(["127.0.0.1"], port, key), rank=0)
        reporter = ProgressReporter(True, 0.5, out=lines)
        reporter.train_begin(3, 0, 10, 0, "run")
        reporter.epoch_end(0, {"loss": 0.5}, 1.0)
        reporter.resumed(1, 3, 2)
        reporter.close()
    finally:
        server.stop()
    printer.close()
    text = out.getvalue()
    assert "epoch 1/3 - loss: 0.5000 - 1.0s" in text, text
    assert "[horovod_spark] training resumed at epoch 2/3 on 2 rank(s)" in text, text


def test_progress_lines_are_dropped_when_the_driver_is_gone():
    lines = RemoteLines(ProgressChannel(["127.0.0.1"], 1, b"k" * 32), rank=0)
    lines.write("a line nobody receives\n")  # no error: the fit trains on without progress
    lines.write("another\n")

