"""Horovod's documented data workflow, ported by changing imports: ``prepare_data(...)`` from
``horovod_spark.spark.common.util`` as a context manager yielding a dataset index, then
``estimator.fit_on_parquet(dataset_idx=...)``; the indices follow Horovod's rules, and the earlier
``fit_on_parquet(train_path, ...)`` form still selects Parquet by path."""
import sys

import cloudpickle
import numpy as np
import pytest

pyspark = pytest.importorskip("pyspark")
torch = pytest.importorskip("torch")

from pyspark.ml.linalg import Vectors  # noqa: E402

from horovod_spark.estimator import TorchEstimator  # noqa: E402
from horovod_spark.estimator.common.data_source import ParquetSource  # noqa: E402
from horovod_spark.estimator.common.parquet_call import DatasetIndexSource, parquet_source  # noqa: E402
from horovod_spark.spark.common.store import Store  # noqa: E402
from horovod_spark.spark.common.util import clear_training_cache, get_dataset_properties, prepare_data  # noqa: E402

pytestmark = [pytest.mark.timeout(300), pytest.mark.legacy_stack]

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def df(spark):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 4))
    labels = (x[:, 0] - x[:, 1] > 0).astype(int)
    return spark.createDataFrame([(Vectors.dense(r.tolist()), int(label), float(i % 7)) for i, (r, label)
                                  in enumerate(zip(x, labels))], ["features", "label", "noise"]).cache()


def _estimator(store, **params):
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    return TorchEstimator(num_proc=2, model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1),
                          loss=torch.nn.functional.cross_entropy, feature_cols=["features"], label_cols=["label"],
                          batch_size=16, epochs=2, random_seed=0, store=store, verbose=0, **params)


def test_prepare_data_then_fit_on_parquet_by_dataset_index(df, tmp_path):
    clear_training_cache()
    store = Store.create(str(tmp_path / "store"))
    with prepare_data(2, store, df, label_columns=["label"], feature_columns=["features"], validation=0.2) as idx:
        assert idx == 0
        train_rows, val_rows, metadata, avg_row_size = get_dataset_properties(idx)
        assert train_rows + val_rows == 300 and 0 < val_rows < 120 and avg_row_size > 0
        assert set(metadata) == {"features", "label"}
        assert store.is_parquet_dataset(store.get_train_data_path(idx))
        # The estimator's own validation Param does not apply: the split was made by prepare_data.
        model = _estimator(store, validation=0.5).fit_on_parquet(dataset_idx=idx)
        history = model.getHistory()
        assert len(history["loss"]) == 2 and len(history["val_loss"]) == 2, history
        # The same DataFrame again while its index is known: the same index, the files reused.
        with prepare_data(2, store, df, ["label"], ["features"], validation=0.2) as again:
            assert again == idx
        # Another DataFrame while index 0 is in use takes the next one; every column but the labels
        # is a feature when feature_columns is None.
        with prepare_data(1, store, df.limit(100), ["label"], None) as other:
            assert other == 1 and set(get_dataset_properties(other)[2]) == {"features", "label", "noise"}
    # Horovod's other keyword, params=, overrides Params as fit() does.
    est = _estimator(store)
    assert len(est.fit_on_parquet(params={est.epochs: 1}, dataset_idx=0).getHistory()["loss"]) == 1


def test_prepare_data_refuses_bad_input_naming_it(df, tmp_path):
    store = Store.create(str(tmp_path / "store"))
    with pytest.raises(ValueError, match="num_processes must be a positive int"):
        with prepare_data(0, store, df, ["label"], ["features"]):
            pass
    with pytest.raises(ValueError, match=r"label column\(s\) \['nope'\] are not in the DataFrame"):
        with prepare_data(1, store, df, ["nope"], ["features"]):
            pass
    with pytest.raises(KeyError, match="no dataset 7 was prepared in this process"):
        get_dataset_properties(7)
    with pytest.raises(ValueError, match="dataset 5 has no training data"):
        _estimator(store).fit_on_parquet(dataset_idx=5)


def test_horovods_util_path_names_our_functions():
    from horovod_spark.data import dataset_index
    from horovod_spark.spark.common import util
    assert util.prepare_data is dataset_index.prepare_data
    assert util.get_dataset_properties is dataset_index.get_dataset_properties
    assert util.clear_training_cache is dataset_index.clear_training_cache


def test_which_form_of_fit_on_parquet_a_call_is():
    params, source = parquet_source(None, 3, (), None, None)
    assert params is None and isinstance(source, DatasetIndexSource) and source.dataset_idx == 3
    # The earlier form: a str first argument is the training path, the second the validation path.
    params, source = parquet_source("train", "val", ({"p": 1},), None, None)
    assert params == {"p": 1} and type(source) is ParquetSource and (source.train_path, source.val_path) == (
        "train", "val")
    params, source = parquet_source(None, None, (), "train", None)
    assert type(source) is ParquetSource and source.train_path == "train"
    with pytest.raises(TypeError, match="not a mix of both"):
        parquet_source(None, 2, (), "train", None)
    with pytest.raises(TypeError, match="params must be a param map"):
        parquet_source(5, None, (), None, None)
    with pytest.raises(TypeError, match=r"val_path must be a store path \(str\)"):
        parquet_source("train", 0, (), None, None)
