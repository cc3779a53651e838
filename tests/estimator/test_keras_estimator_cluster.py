"""KerasEstimator fit -> transform on local-cluster[2,2,1024]: two executor JVMs, so the ranks,
the prepared data, the checkpoints and the inference UDF all cross process boundaries as on a
real cluster (the store is a local directory every executor can see, as NFS would be)."""
import posixpath

import numpy as np
import pytest
from support.keras_data import accuracy, classification_df, two_input_model

pyspark = pytest.importorskip("pyspark")
keras = pytest.importorskip("keras")

from horovod_spark.estimator import KerasEstimator  # noqa: E402
from horovod_spark.store import Store  # noqa: E402

pytestmark = pytest.mark.timeout(600)

WORKERS, CORES = 2, 2


@pytest.fixture(scope="module")
def spark_master():
    return "local-cluster[%d,%d,1024]" % (WORKERS, CORES)


def test_fit_transform_on_two_executors(spark, tmp_path):
    df = classification_df(spark, n=600).repartition(3).cache()
    store = Store.create(str(tmp_path / "store"))
    est = KerasEstimator(num_proc=WORKERS * CORES, model=two_input_model(lr=0.05), feature_cols=["vec", "arr"],
                         label_cols=["label"], validation="is_val", batch_size=16, epochs=4, random_seed=2,
                         store=store, run_id="cluster", verbose=0)
    model = est.fit(df)
    history = model.getHistory()
    assert set(history) == {"loss", "accuracy", "val_loss", "val_accuracy"}
    assert history["loss"][-1] < history["loss"][0] and history["val_accuracy"][-1] > 0.8, history
    assert [posixpath.basename(p) for p in store.list(store.get_checkpoint_path("cluster"))] == \
        ["epoch-00003.ckpt", "epoch-00004.ckpt"]

    pred = model.transform(df)
    assert pred.rdd.getNumPartitions() == 3
    assert accuracy(pred) > 0.8
    # Executors' predictions equal the driver's model on the same rows.
    rows = pred.orderBy("arr").select("vec", "arr", "label__output").collect()
    vec = np.array([r["vec"].toArray() for r in rows], dtype=np.float32)
    arr = np.array([r["arr"] for r in rows], dtype=np.float32)
    np.testing.assert_allclose(np.array([r["label__output"] for r in rows]),
                               model.getModel().predict_on_batch([vec, arr]), rtol=1e-5, atol=1e-6)
