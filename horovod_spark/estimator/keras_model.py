"""KerasModel: the Spark ML Model a KerasEstimator returns (or built directly around a trained Keras model)."""
from . import keras_inference, keras_io
from .common.declared_params import declare_param
from .common.model import HorovodModel


class KerasModel(HorovodModel):
    """``transform(df)`` appends one prediction column per label (``output_cols``, default
    ``<label>__output``), typed by its label column's type in training as in Horovod (a vector for
    vector and array labels and for several values per row, else the label's scalar type; see
    common/output_columns.py); ``classification`` adds Spark ML's classifier columns. The model runs
    with ``predict_on_batch`` on whole Arrow batches in the executors, loaded once per Python worker.

    ``getModel()`` is the trained ``keras.Model`` (compiled as it was trained when it comes from a
    KerasEstimator, with a fresh optimizer); ``getHistory()`` the per-epoch metrics.
    ``model.write().overwrite().save(path)`` / ``KerasModel.load(path)``: the saved model carries its
    ``custom_objects``, so loading needs nothing but the path. ``feature_columns=`` / ``label_columns=``
    (Horovod's names) set ``feature_cols`` / ``label_cols``.
    """
    framework = "keras"
    _loader = staticmethod(keras_inference.load_model)
    _predictor = staticmethod(keras_inference.predict)

    custom_objects = declare_param("custom_objects", "custom layers, models and functions the Keras model needs to "
                                   "load: {name: class or function} (saved with the model, not as JSON)", default={})

    def model_bytes(self) -> bytes:
        model = self.getOrDefault("model")
        if model is None:
            raise ValueError("this KerasModel has no model: set one with setModel()")
        return keras_io.bundle(model, self.getOrDefault("custom_objects"))

    def set_model_bytes(self, data: bytes) -> None:
        model, custom_objects = keras_io.unbundle(data)
        self._set(model=model, custom_objects=custom_objects)

    def _input_shapes(self):
        # As Horovod's KerasModel: features take the model's declared input shapes unless set.
        from .keras_data import input_shapes_for
        return input_shapes_for(self.getOrDefault("model"), self.getOrDefault("input_shapes"),
                                len(self.getOrDefault("feature_cols") or []))

    def json_params(self):
        # custom_objects are classes and functions: they travel inside the model bytes instead.
        return {name: value for name, value in super().json_params().items() if name != "custom_objects"}

    @staticmethod
    def serialize(model) -> bytes:
        return keras_io.bundle(model, {})

    @staticmethod
    def deserialize(data: bytes):
        return keras_io.unbundle(data)[0]
