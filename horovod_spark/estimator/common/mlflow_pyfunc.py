"""The MLflow pyfunc model of a fit: ``mlflow.pyfunc.load_model(uri).predict(pandas_df)`` gives the
values ``model.transform`` appends for the same rows.

The fitted model travels as its class, JSON Params and framework model bytes (local_predict.py),
and predicts in the loading process with the framework's own inference functions, the ones
transform() runs in Spark's workers: loading it needs horovod_spark and the framework, not Spark.
``unwrap_python_model().horovod_model`` is the fitted TorchModel / KerasModel / LightningModel
itself, whose ``transform`` works where a SparkSession is active.
"""
import logging
import os
import shutil
import tempfile
from importlib import metadata

import mlflow
import mlflow.pyfunc
import pandas as pd

from .local_predict import load_stage, predict_pandas, save_stage

ARTIFACT = "horovod_spark_model"
MODEL_NAME = "model"
# What serving the model needs installed, per framework; the versions are this driver's.
_REQUIREMENTS = {"torch": ("torch",), "keras": ("tensorflow", "keras"), "lightning": ("torch", "lightning")}
# Loaded by MLflow from its source when the model loads (models-from-code), rather than unpickled.
MODEL_CODE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mlflow_model_code.py")
_ALWAYS = ("mlflow", "pyspark", "pandas", "numpy", "cloudpickle", "pyarrow")


class HorovodSparkPyfunc(mlflow.pyfunc.PythonModel):
    """The pyfunc wrapper around a fitted horovod_spark model. predict takes any DataFrame with the
    feature columns (Spark ML vectors, arrays, scalars) and returns one: MLflow accepts DataFrame
    hints as they are, without a signature (no hints at all would make it warn at import)."""

    def load_context(self, context):
        self.horovod_model = load_stage(context.artifacts[ARTIFACT])

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        return predict_pandas(self.horovod_model, model_input)


class _NoSignatureNotice(logging.Filter):
    """Drops MLflow's notice that a DataFrame hint gives no signature: the model has none by design
    (see HorovodSparkPyfunc), so the notice would be a warning the user did nothing to cause."""

    def filter(self, record):
        return "Failed to infer model signature" not in record.getMessage()


class SavedStage:
    """A temporary directory holding a fitted model for the pyfunc artifact."""

    def __init__(self, model):
        self.directory = tempfile.mkdtemp(prefix="hs-mlflow-model-")
        try:
            save_stage(model, self.directory)
        except BaseException:
            self.cleanup()
            raise

    def cleanup(self):
        shutil.rmtree(self.directory, ignore_errors=True)


def save_for_pyfunc(model) -> SavedStage:
    """``model`` written where ``log_pyfunc`` picks it up (on the fit's thread: the model may change later)."""
    return SavedStage(model)


def log_pyfunc(run_id: str, saved: SavedStage, framework: str):
    """Log ``saved`` as the pyfunc model ``model`` of the MLflow run ``run_id``; its ModelInfo."""
    notice = _NoSignatureNotice()
    pyfunc_logger = logging.getLogger("mlflow.pyfunc")
    pyfunc_logger.addFilter(notice)
    try:
        return mlflow.models.Model.log(artifact_path=None, name=MODEL_NAME, flavor=mlflow.pyfunc, run_id=run_id,
                                       python_model=MODEL_CODE, artifacts={ARTIFACT: saved.directory},
                                       pip_requirements=requirements(framework))
    finally:
        pyfunc_logger.removeFilter(notice)


def requirements(framework: str):
    """Pinned requirements of the logged model (given, since MLflow would otherwise infer them by
    loading the model in a subprocess)."""
    pins = []
    for name in _ALWAYS + _REQUIREMENTS.get(framework, ()):
        try:
            pins.append("%s==%s" % (name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            continue
    try:
        pins.append("horovod-spark==%s" % metadata.version("horovod-spark"))
    except metadata.PackageNotFoundError:
        pass   # a source checkout: the loading environment must provide horovod_spark itself
    return pins
