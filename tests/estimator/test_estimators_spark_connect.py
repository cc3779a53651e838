"""TorchEstimator fit -> transform and KerasEstimator fit from a Spark Connect client, against a
real Spark Connect server over local[2] started from the pip package (one for the module): the
data is prepared into the store with DataFrame operations only, the ranks run through the
Connect launcher, and the model's predictions come back through a Connect query."""
import contextlib
import io
import sys

import cloudpickle
import pytest
from support.keras_data import CLASSES, accuracy, classification_df, two_input_model

pytest.importorskip("pyspark.sql.connect.session")
torch = pytest.importorskip("torch")
pytest.importorskip("keras")

from horovod_spark.estimator import KerasEstimator, TorchEstimator, TorchModel  # noqa: E402
from horovod_spark.store import Store  # noqa: E402

pytestmark = pytest.mark.timeout(600)
NUM_PROC = 2

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class TwoInputNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, CLASSES)

    def forward(self, vec, arr):
        return self.fc(torch.cat([vec, arr], dim=1))


@pytest.fixture(scope="module")
def remote():
    from support.spark_connect import remote_session
    with remote_session("local[%d]" % NUM_PROC) as session:
        yield session


@pytest.fixture(scope="module")
def class_df(remote):
    return classification_df(remote, n=400).coalesce(1)


def test_torch_estimator_fit_and_transform(remote, class_df, tmp_path):
    torch.manual_seed(0)
    model = TwoInputNet()
    est = TorchEstimator(num_proc=NUM_PROC, model=model, optimizer=torch.optim.Adam(model.parameters(), lr=0.05),
                         loss=torch.nn.functional.cross_entropy, feature_cols=["vec", "arr"], label_cols=["label"],
                         batch_size=32, epochs=3, random_seed=7, validation=0.25, store=Store.create(str(tmp_path)))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        fitted = est.fit(class_df)
    history = fitted.getHistory()
    assert len(history["loss"]) == 3 and history["loss"][-1] < history["loss"][0], history
    assert "val_loss" in history
    predicted = fitted.transform(class_df)
    assert predicted.count() == 400
    assert accuracy(predicted) > 0.6
    # Save and load go through the Connect session; overwrite (JVM-side) is refused, naming why.
    path = str(tmp_path / "model")
    fitted.save(path)
    loaded = TorchModel.load(path)
    assert loaded.transform(class_df).select("label__output").collect() == \
        predicted.select("label__output").collect()
    with pytest.raises(ValueError, match="overwrite.*cannot run over Spark Connect"):
        fitted.write().overwrite().save(path)
    # Reusing the prepared data works over Spark Connect too: its cache key comes from the plan.
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        est.copy({est.epochs: 1}).fit(class_df)
    assert "reusing prepared data" in printed.getvalue()


def test_keras_estimator_fit(remote, class_df, tmp_path):
    est = KerasEstimator(num_proc=NUM_PROC, model=two_input_model(), feature_cols=["vec", "arr"],
                         label_cols=["label"], batch_size=32, epochs=3, random_seed=7,
                         store=Store.create(str(tmp_path)))
    with contextlib.redirect_stdout(io.StringIO()):
        fitted = est.fit(class_df)
    history = fitted.getHistory()
    assert len(history["loss"]) == 3 and history["loss"][-1] < history["loss"][0], history
    assert accuracy(fitted.transform(class_df)) > 0.5
