"""A store path that cannot be written or read fails at Store.create and at the start of fit,
before any Spark job, with a first line naming the path and the cause."""
import os
import sys
import uuid

import cloudpickle
import pytest

from horovod_spark.store import Store, StoreAccessError

pytestmark = pytest.mark.timeout(180)

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _blocked_path(tmp_path) -> str:
    """A path under a regular file: no process, root included, can create a directory there."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    return str(blocker / "store")


def test_store_create_refuses_an_unwritable_path_naming_it_and_the_cause(tmp_path):
    path = _blocked_path(tmp_path)
    with pytest.raises(StoreAccessError) as info:
        Store.create(path)
    first_line = str(info.value).splitlines()[0]
    assert path in first_line and "NotADirectoryError" in first_line, first_line


def test_store_create_leaves_no_probe_behind(tmp_path):
    store = Store.create(str(tmp_path / "store"))
    assert os.listdir(store.prefix_path) == []
    memory = Store.create("memory://store-check-%s/root" % uuid.uuid4().hex[:8], check=True)
    assert memory.list(memory.prefix_path) == []


def test_fit_checks_the_store_before_any_spark_job(spark, tmp_path):
    torch = pytest.importorskip("torch")
    from horovod_spark.estimator import TorchEstimator
    path = _blocked_path(tmp_path)
    store = Store.create(path, check=False)
    df = spark.createDataFrame([(float(i), float(i % 2)) for i in range(8)], ["x", "y"])
    model = torch.nn.Linear(1, 1)
    est = TorchEstimator(num_proc=2, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
                         loss=torch.nn.functional.mse_loss, feature_cols=["x"], label_cols=["y"],
                         batch_size=4, epochs=1, store=store, verbose=0)
    tracker = spark.sparkContext.statusTracker()
    jobs_before = tracker.getJobIdsForGroup()
    with pytest.raises(StoreAccessError) as info:
        est.fit(df)
    first_line = str(info.value).splitlines()[0]
    assert path in first_line and "NotADirectoryError" in first_line, first_line
    assert tracker.getJobIdsForGroup() == jobs_before
