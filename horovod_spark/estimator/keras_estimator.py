"""KerasEstimator: fit a Keras 3 model (TensorFlow backend) on a Spark DataFrame with horovod_spark ranks."""
from . import keras_io, keras_payload, keras_persistence
from .common.declared_params import declare_param
from .common.estimator import HorovodEstimator
from .common.fit import FrameworkPlan
from .keras_model import KerasModel


class KerasEstimator(HorovodEstimator):
    """A Spark ML Estimator training a Keras 3 model data-parallel on ``num_proc`` Spark tasks.

    ``fit(df)`` writes the selected columns to Parquet in ``store`` (cached), runs ``model.fit`` on
    every rank over its own shard with ``horovod_spark.keras.DistributedOptimizer`` and the
    broadcast and metric-average callbacks (then the user's ``callbacks``), checkpoints each epoch
    under ``<store>/runs/<run_id>/checkpoints`` and returns a :class:`KerasModel`. A fit with the
    run_id of an interrupted one resumes after its last completed epoch. See docs/keras_estimator.md.

    ``model`` is a built ``keras.Model`` taking one input per feature column (a list of inputs
    when there are several). It may come compiled; ``optimizer`` (an optimizer or its name),
    ``loss`` and ``metrics`` (Keras names, objects or functions) override what it was compiled
    with. ``custom_objects`` are the custom layers/functions it needs to load, as for
    ``keras.models.load_model``. ``checkpoint_callback`` (a ``keras.callbacks.ModelCheckpoint``
    such as ``horovod_spark.keras.callbacks.BestModelCheckpoint(monitor='val_loss')``) picks the
    model returned: the best one it saved instead of the last.
    """
    framework = "keras"

    custom_objects = declare_param("custom_objects", "custom layers, models and functions the Keras model needs to "
                                   "load: {name: class or function}, as for keras.models.load_model", default={})
    checkpoint_callback = declare_param("checkpoint_callback", "a keras.callbacks.ModelCheckpoint run on rank 0; the "
                                        "model it saved last (the best one, with save_best_only) is the fitted model")
    backend_env = declare_param("backend_env", "environment variables added to every rank's: {name: value}",
                                default={})

    def get_model_class(self):
        """The Model class ``fit`` returns (Horovod's estimator method)."""
        return KerasModel

    def get_model_shapes(self):
        """(input shapes, output shapes) of the ``model`` Param, batch dimension included, -1 where unknown."""
        model = self.getOrDefault("model")
        if model is None:
            raise ValueError("get_model_shapes() needs the model Param: pass model=<a built keras.Model>")

        def shapes(tensors):
            return [[-1 if d is None else int(d) for d in t.shape] for t in tensors]
        return shapes(model.inputs), shapes(model.outputs)

    # -- HorovodEstimator hooks --------------------------------------------------------------------
    def objects_to_bytes(self, objects: dict) -> bytes:
        return keras_persistence.objects_to_bytes(objects)

    @classmethod
    def objects_from_bytes(cls, data: bytes) -> dict:
        return keras_persistence.objects_from_bytes(data)

    def _check_framework(self, cfg):
        payload, signature = keras_payload.check_and_pack(self, cfg)
        return FrameworkPlan(payload=payload, signature=signature)

    def _remote_trainer(self):
        from .keras_remote import train
        return train

    def _rank_env(self, cfg) -> dict:
        # Level 2 drops TensorFlow's C++ INFO and WARNING lines, which would reach the driver from every rank.
        return {"TF_CPP_MIN_LOG_LEVEL": "2"}

    def _user_rank_env(self) -> dict:
        env = self.getOrDefault("backend_env") or {}
        if not isinstance(env, dict):
            raise ValueError("backend_env must be a dict of environment variables for the ranks, got %s"
                             % type(env).__name__)
        return dict(env)

    def _build_model(self, result, cfg, run_id):
        custom_objects = self.getOrDefault("custom_objects") or {}
        model = keras_io.model_from_bytes(result["model"], custom_objects)
        # Compiled as it was trained (with a fresh, non-distributed optimizer), so that the user can
        # evaluate() or keep training it at once.
        args = keras_payload.compile_args(self, self.getOrDefault("model"))
        args.compile(model, args.build_optimizer())
        # Not _copyValues(): it would also copy the estimator's untrained `model` param.
        from .keras_data import input_shapes_for
        input_shapes = input_shapes_for(model, cfg.input_shapes, len(cfg.feature_cols))
        return KerasModel(model=model, feature_cols=cfg.feature_cols, label_cols=cfg.label_cols,
                          input_shapes=input_shapes, history=result["history"],
                          output_shapes=result["output_shapes"], run_id=run_id, custom_objects=custom_objects)
