"""The code file of a fit's MLflow pyfunc model (MLflow's models-from-code): MLflow copies this file
into the logged model and runs it when the model is loaded, so that no pickled Python object of ours
travels with the model."""
from mlflow.models import set_model

from horovod_spark.estimator.common.mlflow_pyfunc import HorovodSparkPyfunc

set_model(HorovodSparkPyfunc())
