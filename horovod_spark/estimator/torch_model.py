"""TorchModel: the Spark ML Model a TorchEstimator returns (or built directly around a trained module)."""
import io

import cloudpickle

from . import torch_inference
from .common.model import HorovodModel


class TorchModel(HorovodModel):
    """``transform(df)`` appends one prediction column per label (``output_cols``, default
    ``<label>__output``), typed by its label column's type in training as in Horovod (a vector for
    vector and array labels and for several values per row, else the label's scalar type; see
    common/output_columns.py); ``classification`` adds Spark ML's classifier columns. The model runs
    on Arrow batches in the executors, deserialized once per Python worker.

    ``getModel()`` is the trained ``torch.nn.Module`` (CPU, eval mode); ``getHistory()`` the
    per-epoch metrics. ``model.write().overwrite().save(path)`` / ``TorchModel.load(path)``.
    ``feature_columns=`` / ``label_columns=`` (Horovod's names) set ``feature_cols`` / ``label_cols``.
    """
    framework = "torch"
    _loader = staticmethod(torch_inference.load_model)
    _predictor = staticmethod(torch_inference.predict)

    @staticmethod
    def serialize(model) -> bytes:
        # Executors that transform may have no GPU: a module given on one travels as a CPU copy.
        if any(t.device.type != "cpu" for t in list(model.parameters()) + list(model.buffers())):
            model = copy_module(model).cpu()
        return cloudpickle.dumps(model)

    @staticmethod
    def deserialize(data: bytes):
        return torch_inference.load_model(data)


def copy_module(model):
    """An independent copy of a module (the user's own stays untouched by training results)."""
    return cloudpickle.load(io.BytesIO(cloudpickle.dumps(model)))
