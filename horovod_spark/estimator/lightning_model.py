"""LightningModel: the Spark ML Model a LightningEstimator returns (Horovod's
``horovod.spark.lightning.TorchModel``)."""
from .torch_model import TorchModel


class LightningModel(TorchModel):
    """A TorchModel around a trained ``lightning.pytorch.LightningModule`` (CPU, eval mode):
    ``transform(df)`` calls the module's ``forward`` with one tensor per feature column and appends
    one prediction column per label (``output_cols``, default ``<label>__output``).
    ``getHistory()`` holds what the module logged per epoch. Saves and loads like a TorchModel;
    loading needs Lightning where the module's class comes from it.
    """
    framework = "lightning"
