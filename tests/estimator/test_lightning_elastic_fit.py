"""An elastic LightningEstimator fit (``elastic=True``) on local-cluster[3,1,1024], three executor
JVMs with one rank each: during epoch 2 the rank 2's executor JVM is SIGKILLed (by the rank itself,
from a Lightning callback, so the kill follows training progress). The fit goes on with the
survivors from the start of the interrupted epoch, grows back to three ranks when Spark reschedules
the lost task, finishes every epoch, and its model classifies held-out rows well."""
import os
import re
import sys

import cloudpickle
import pytest

pytest.importorskip("pyspark")
torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

from support import lightning_estimator_models as models  # noqa: E402

from horovod_spark.estimator import LightningEstimator  # noqa: E402
from horovod_spark.store import Store  # noqa: E402

# Generous: Spark and three ranks on a small shared machine.
pytestmark = pytest.mark.timeout(900)

cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(models)

EPOCHS = 4


@pytest.fixture(scope="module")
def spark_master():
    return "local-cluster[3,1,1024]"


def test_lightning_fit_survives_an_executor_killed_mid_epoch(spark, tmp_path, capsys):
    df = models.data_frame(spark, 900, 0, partitions=3).cache()
    marker = str(tmp_path / "killed")
    callbacks = [models.KillExecutorAtBatch(marker, rank=2, epoch=1, step=5),
                 models.AwaitReplacementAtEpochEnd(marker, size=3)]
    torch.manual_seed(0)
    est = LightningEstimator(num_proc=3, model=models.Classifier(), feature_cols=["features"], label_cols=["label"],
                             validation=0.2, batch_size=16, epochs=EPOCHS, random_seed=0,
                             store=Store.create(str(tmp_path / "store")), run_id="killed", callbacks=callbacks,
                             elastic=True)
    model = est.fit(df)
    out, err = capsys.readouterr()
    sys.stdout.write(out)
    sys.stderr.write(err)
    assert os.path.exists(marker), "the callback never killed an executor"
    history = model.getHistory()
    assert len(history["val_loss"]) == EPOCHS, history
    ranks = history["num_ranks"]
    assert ranks[0] == 3 and ranks[1] in (2, 3) and ranks[-1] == 3, (ranks, err)
    assert "lost worker 2 (rank 2)" in err, err
    assert re.search(r"training resumed at epoch 2/%d on [23] rank\(s\)" % EPOCHS, out), out
    assert models.held_out_accuracy(model.getModel()) > 0.85
