"""TorchEstimator: fit a torch.nn.Module on a Spark DataFrame with horovod_spark ranks."""
import io

from . import torch_payload
from .common.declared_params import declare_param
from .common.estimator import HorovodEstimator
from .common.fit import FrameworkPlan
from .torch_model import TorchModel, copy_module


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

    train_minibatch_fn = declare_param("train_minibatch_fn", "the training step, called per batch as "
                                       "train_minibatch(model, optimizer, transform_outputs, loss_fn, inputs, labels, "
                                       "sample_weights, backward_passes_per_step, batch_idx) -> (outputs, loss); it "
                                       "zeroes the gradients, back-propagates and steps the optimizer itself")
    loss_constructors = declare_param("loss_constructors", "instead of loss: functions taking no argument that return "
                                      "a loss, one (or one per label column), called on every rank")

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
