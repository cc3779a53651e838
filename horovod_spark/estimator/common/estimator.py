"""The estimator base class of every framework's estimator: its Params and keywords (EstimatorParams),
fit and fit_on_parquet, save and load, and the hooks a framework implements."""
from typing import Optional

import cloudpickle
from pyspark.ml import Estimator
from pyspark.ml.util import MLReadable, MLWritable

from .data_source import DataFrameSource
from .estimator_persistence import HorovodEstimatorReader, HorovodEstimatorWriter
from .fit import run_fit
from .params import EstimatorParams, refuse_unknown_params
from .parquet_call import parquet_source


class HorovodEstimator(Estimator, EstimatorParams, MLReadable, MLWritable):
    """A framework's estimator declares its own Params (``declare_param``) and implements the hooks
    below; its keywords, setParams and accessors come from the declarations. ``save(path)``,
    ``write().overwrite().save(path)`` and ``<Estimator>.load(path)`` keep every Param
    (estimator_persistence.py)."""
    framework = None

    def refuse_keywords(self, method, unknown):
        # A ValueError with advice for the keywords of Horovod's estimators that are not Params here.
        refuse_unknown_params(type(self).__name__, unknown)

    def _fit(self, dataset):
        return run_fit(self, DataFrameSource(dataset))

    def fit_on_parquet(self, params=None, dataset_idx=None, *args, train_path: Optional[str] = None,
                       val_path: Optional[str] = None):
        """Fit on Parquet already in the store, in one of two forms (``parquet_call.py``).

        Horovod's ``fit_on_parquet(params=None, dataset_idx=None)``: the dataset
        ``horovod_spark.spark.common.util.prepare_data`` yielded as ``dataset_idx`` (None: the
        store's one dataset, ``store.get_train_data_path()``), with its validation rows if it has
        some; ``params`` overrides this estimator's Params.

        ``fit_on_parquet(train_path, val_path=None, params=None)`` (a str first argument, or
        ``train_path=``): paths relative to the store root, or absolute: a directory of Parquet
        files with the feature/label columns, or a dataset directory written by
        ``horovod_spark.data.prepare_data``. Validation rows come from ``val_path`` (or the
        dataset's val/)."""
        params, source = parquet_source(params, dataset_idx, args, train_path, val_path)
        est = self.copy(params) if params else self
        return run_fit(est, source)

    # -- framework hooks ---------------------------------------------------------------------------
    def _check_framework(self, cfg):
        """Check the framework Params; return a fit.FrameworkPlan."""
        raise NotImplementedError

    def _remote_trainer(self):
        """The importable function(TrainSpec) every rank runs; rank 0 returns the result dict."""
        raise NotImplementedError

    def _build_model(self, result: dict, cfg, run_id: str):
        raise NotImplementedError

    def _rank_env(self, cfg) -> dict:
        """Environment variables the framework sets for its ranks unless the user sets them."""
        return {}

    def _user_rank_env(self) -> dict:
        """Environment variables the user's Params set for the ranks."""
        return {}

    def reader_data_module(self) -> str:
        """The name of the data module whose reader the ranks read the prepared data with. A
        framework whose ``data_module`` Param may hold something else (a Lightning DataModule)
        says which reader it then uses."""
        return self.getOrDefault("data_module")

    # -- persistence -------------------------------------------------------------------------------
    def write(self):
        return HorovodEstimatorWriter(self)

    @classmethod
    def read(cls):
        return HorovodEstimatorReader(cls)

    def objects_to_bytes(self, objects: dict) -> bytes:
        """The Params whose values are not JSON ({name: value}: model, optimizer, loss, callbacks ...)
        as bytes for save(). By default cloudpickled together, so objects sharing state still share
        it once loaded; a framework whose objects pickle badly overrides this and objects_from_bytes."""
        return cloudpickle.dumps(objects)

    @classmethod
    def objects_from_bytes(cls, data: bytes) -> dict:
        """{name: value} from objects_to_bytes' bytes, in the process that loads the estimator."""
        return cloudpickle.loads(data)
