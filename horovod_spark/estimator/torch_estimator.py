"""TorchEstimator: fit a torch.nn.Module on a Spark DataFrame with horovod_spark ranks."""
import io

from pyspark import keyword_only

from . import torch_payload
from .common.estimator import HorovodEstimator
from .common.fit import FrameworkPlan
from .common.params import _param, refuse_unknown_params, with_accessors
from .torch_model import TorchModel, copy_module


@with_accessors
class TorchEstimator(HorovodEstimator):
    """A Spark ML Estimator training a PyTorch model data-parallel on ``num_proc`` Spark tasks.

    ``fit(df)`` writes the selected columns to Parquet in ``store`` (cached: fitting the same
    DataFrame again reuses it), runs every rank on its own shard with gradients averaged by
    ``horovod_spark.torch.DistributedOptimizer``, checkpoints each epoch under
    ``<store>/runs/<run_id>/checkpoints`` and returns a :class:`TorchModel`. A fit with the
    run_id of an interrupted one resumes after its last completed epoch. See docs/estimator.md.

    ``model`` is a ``torch.nn.Module`` called as ``model(*features)`` (one tensor per feature
    column); ``optimizer`` is built on ``model.parameters()``; ``loss(outputs, labels)``.
    ``loss_constructors`` (instead of ``loss``) are functions each rank calls to build its losses;
    ``train_minibatch_fn`` is Horovod's ``train_minibatch(model, optimizer, transform_outputs, loss_fn,
    inputs, labels, sample_weights, backward_passes_per_step, batch_idx) -> (outputs, loss)``, which
    replaces the built-in training step (see torch_minibatch.py).
    """
    framework = "torch"

    train_minibatch_fn = _param("train_minibatch_fn", "the training step, called per batch as train_minibatch(model, "
                                "optimizer, transform_outputs, loss_fn, inputs, labels, sample_weights, "
                                "backward_passes_per_step, batch_idx) -> (outputs, loss); it zeroes the gradients, "
                                "back-propagates and steps the optimizer itself")
    loss_constructors = _param("loss_constructors", "instead of loss: functions taking no argument that return a "
                               "loss, one (or one per label column), called on every rank")

    @keyword_only
    def __init__(self, *, num_proc=None, model=None, optimizer=None, loss=None, metrics=None, feature_cols=None,
                 label_cols=None, input_shapes=None, label_shapes=None, sample_weight_col=None, validation=None,
                 batch_size=None, val_batch_size=None, epochs=None, train_steps_per_epoch=None,
                 validation_steps_per_epoch=None, shuffle=None, random_seed=None, gradient_compression=None,
                 backward_passes_per_step=None, store=None, run_id=None, callbacks=None, transformation_fn=None,
                 verbose=None, use_gpu=None, data_module=None, backend=None,
                 inmemory_cache_all=None, nonfinite_loss=None, validate_finite=None, loss_weights=None,
                 shuffle_buffer_size=None, partitions_per_process=None, train_reader_num_workers=None,
                 val_reader_num_workers=None, reader_pool_type=None, mp_start_method=None, continuous_cols=None,
                 categorical_cols=None, train_minibatch_fn=None, loss_constructors=None,
                 elastic=None, min_num_proc=None, max_num_proc=None,
                 compress_sparse_cols=None, transformation_edit_fields=None, transformation_removed_fields=None,
                 **unknown):
        super().__init__()
        refuse_unknown_params(type(self).__name__, unknown)
        self._setDefault(train_minibatch_fn=None, loss_constructors=None)
        self.setParams(**self._input_kwargs)

    @keyword_only
    def setParams(self, *, num_proc=None, model=None, optimizer=None, loss=None, metrics=None, feature_cols=None,
                  label_cols=None, input_shapes=None, label_shapes=None, sample_weight_col=None, validation=None,
                  batch_size=None, val_batch_size=None, epochs=None, train_steps_per_epoch=None,
                  validation_steps_per_epoch=None, shuffle=None, random_seed=None, gradient_compression=None,
                  backward_passes_per_step=None, store=None, run_id=None, callbacks=None, transformation_fn=None,
                  verbose=None, use_gpu=None, data_module=None, backend=None,
                  inmemory_cache_all=None, nonfinite_loss=None, validate_finite=None, loss_weights=None,
                  shuffle_buffer_size=None, partitions_per_process=None, train_reader_num_workers=None,
                  val_reader_num_workers=None, reader_pool_type=None, mp_start_method=None, continuous_cols=None,
                  categorical_cols=None, train_minibatch_fn=None, loss_constructors=None,
                  elastic=None, min_num_proc=None, max_num_proc=None,
                  compress_sparse_cols=None, transformation_edit_fields=None, transformation_removed_fields=None,
                  **unknown):
        """Set the given params (keyword arguments only); None leaves a param as it is."""
        refuse_unknown_params(type(self).__name__, unknown)
        return self._set(**{k: v for k, v in self._input_kwargs.items() if v is not None})

    def get_model_class(self):
        """The Model class ``fit`` returns (Horovod's estimator method)."""
        return TorchModel

    # -- HorovodEstimator hooks --------------------------------------------------------------------
    def _check_framework(self, cfg):
        payload, signature = torch_payload.check_and_pack(self, cfg)
        return FrameworkPlan(payload=payload, signature=signature)

    def _remote_trainer(self):
        from .torch_remote import train
        return train

    def _build_model(self, result, cfg, run_id):
        import torch
        model = copy_module(self.getOrDefault("model")).cpu()
        model.load_state_dict(torch.load(io.BytesIO(result["model_state"]), map_location="cpu", weights_only=True))
        model.eval()
        # Not _copyValues(): it would also copy the estimator's untrained `model` param.
        return TorchModel(model=model, feature_cols=cfg.feature_cols, label_cols=cfg.label_cols,
                          input_shapes=cfg.input_shapes, history=result["history"],
                          output_shapes=result["output_shapes"], run_id=run_id)
