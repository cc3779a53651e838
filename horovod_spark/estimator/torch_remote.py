"""What every rank runs for TorchEstimator.fit: rebuild model and optimizer, resume if asked,
train on this rank's shard, validate, checkpoint (rank 0), write TensorBoard scalars and report
progress (rank 0).

Determinism: the reader's order is a function of (seed, epoch) and torch's RNG is reseeded from
(seed, epoch, rank) at every epoch, so a run resumed after epoch k trains epochs k+1... exactly
as the uninterrupted run would have.
"""
import io
import os
import threading
import time

import numpy as np

from . import torch_sample_weights
from .common import rank_device
from .common.checkpoint import CheckpointStore, resumes
from .common.history import EpochMetrics, History
from .common.rank_data import report_cache, set_mp_start_method, val_batches
from .common.rank_trainer import RankTrainer
from .common.shapes import label_arrays, model_inputs, per_row_shape

CHECKPOINT_FORMAT = 1


def train(spec):
    set_mp_start_method(spec)
    import horovod_spark.torch as hvd
    # Building the first optimizer imports torch._dynamo (seconds of CPU). Start it now, so it
    # runs while hvd.init() waits for the other ranks; torch itself is fully imported by now,
    # so the two threads cannot deadlock on import locks.
    threading.Thread(target=_preload_dynamo, name="hs-preload-dynamo", daemon=True).start()
    hvd.init()
    try:
        trainer = _Trainer(spec, hvd)
        if spec.elastic:
            from .torch_elastic import train_elastic
            return train_elastic(trainer)
        rank_device.report_devices(hvd, trainer.cpu_fallback)
        return trainer.run()
    finally:
        hvd.shutdown()


def _preload_dynamo():
    try:
        import torch._dynamo  # noqa: F401
    except Exception:
        pass  # the optimizer's own import will raise it, with its real context


def _epoch_seed(seed: int, epoch: int, rank: int) -> int:
    return int(np.random.SeedSequence([seed, epoch, rank]).generate_state(1)[0])


def load_checkpoint(data: bytes) -> dict:
    import torch
    # Written by this run's own rank 0 into the user's store: as trusted as the pickled model.
    state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
    if state.get("format") != CHECKPOINT_FORMAT:
        raise ValueError("checkpoint format %r is not %r" % (state.get("format"), CHECKPOINT_FORMAT))
    return state


class _Trainer(RankTrainer):
    def __init__(self, spec, hvd):
        import torch

        from . import torch_metrics, torch_minibatch, torch_payload
        self.spec, self.hvd, self.torch = spec, hvd, torch
        self.rank, self.size = hvd.rank(), hvd.size()
        # Ranks sharing a host would otherwise each start a thread per core and fight over them.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, hvd.local_size())))
        parts = torch_payload.unpack(spec.payload)
        self.device = rank_device.torch_device(spec.use_gpu, hvd)
        # Reported once before a fixed-size fit, at each (re)start of an elastic one (rank_device).
        self.cpu_fallback = rank_device.cpu_fallback(spec.use_gpu, spec.gpu_notice, self.device.type == "cpu",
                                                     rank_device.TORCH_NO_GPU)
        self.model = parts["model"].to(self.device)
        losses = [make() for make in parts["loss"]] if parts.get("loss_constructed") else parts["loss"]
        self.losses = losses * len(spec.label_cols) if len(losses) == 1 else losses
        self.row_losses = [torch_sample_weights.per_row(f) for f in self.losses] if spec.sample_weight_col else None
        self.loss_weights = parts.get("loss_weights") or [1.0] * len(spec.label_cols)
        step_fn = parts.get("train_minibatch_fn")
        self.train_minibatch = torch_minibatch.resolve(step_fn) if step_fn is not None else None
        self.unapplied_backward = False  # a user step's backward the optimizer has not stepped on yet
        self.metrics = [torch_metrics.resolve(m) for m in parts["metrics"]]
        multi = len(spec.label_cols) > 1
        self.names = ["loss"] + (["%s_loss" % c for c in spec.label_cols] if multi else []) + \
            torch_metrics.metric_names(parts["metrics"], spec.label_cols)
        self.callbacks = parts["callbacks"]
        self.float_dtype = next((p.dtype for p in self.model.parameters() if p.is_floating_point()), torch.float32)

        optimizer = torch_payload.build_optimizer(parts["optimizer"], self.model)
        self.history = History()
        self.output_shapes = None
        if resumes(spec):
            state = load_checkpoint(spec.store.read_bytes(spec.resume_path))
            self.model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            self.history = History(state["history"])
            self.output_shapes = state.get("output_shapes")
        if not spec.elastic:
            # An elastic fit's state.sync() broadcasts instead, after every reset too.
            hvd.broadcast_parameters(self.model.state_dict(), root_rank=0)
        compression = self.compression(parts["compression"])
        self.optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=self.model.named_parameters(),
                                                  compression=compression,
                                                  backward_passes_per_step=spec.backward_passes_per_step)
        if self.train_minibatch is not None:
            self.optimizer.register_step_post_hook(lambda *_: setattr(self, "unapplied_backward", False))
        self.transformation_fn = parts["transformation_fn"]
        self.checkpoints = CheckpointStore(spec.store, spec.run_id, keep=spec.keep_checkpoints)
        self.place()

    # -- the loop ----------------------------------------------------------------------------------
    def run(self):
        spec = self.spec
        self.reporter.train_begin(spec.epochs, spec.start_epoch, self.train_reader.steps_per_epoch, self.val_steps,
                                  spec.run_id)
        self._callback("on_train_begin", self.rank, self.size)
        for epoch in range(spec.start_epoch, spec.epochs):
            self.epoch(epoch)
        return self.finish()

    def epoch(self, epoch):
        """Train and validate one epoch, record it, and checkpoint it (rank 0)."""
        started = time.monotonic()
        self._callback("on_epoch_begin", epoch)
        self.torch.manual_seed(_epoch_seed(self.spec.seed, epoch, self.rank))
        logs = self._train_epoch(epoch)
        # Before the checkpoint: an epoch whose weights went NaN is never written as one to resume from.
        self.loss_guard.check_weights(self._nonfinite_parameters(), epoch, self.train_reader.steps_per_epoch)
        if self.val_reader is not None:
            logs.update(self._validate(epoch))
        # Elastic fits also record on how many ranks each epoch ran (a lost rank shows as fewer).
        recorded = dict(logs, num_ranks=self.size) if self.spec.elastic else logs
        self.history.append(recorded)
        self._callback("on_epoch_end", epoch, dict(logs))
        if self.rank == 0:
            self.checkpoints.write(epoch + 1, self._checkpoint_bytes(epoch + 1))
        self.scalars.epoch_end(epoch, recorded)
        self.reporter.epoch_end(epoch, logs, time.monotonic() - started)

    def finish(self):
        spec = self.spec
        self._callback("on_train_end", self.history.to_dict())
        self.close_scalars()
        self.reporter.train_end()
        report_cache(spec, self.rank, self.train_reader, self.val_reader)
        if self.rank != 0:
            return None
        buf = io.BytesIO()
        self.torch.save(self._cpu_state(), buf)
        return {"model_state": buf.getvalue(), "history": self.history.to_dict(),
                "output_shapes": self.output_shapes, "epochs": self.history.epochs}

    def _train_epoch(self, epoch):
        torch = self.torch
        self.model.train()
        metrics = EpochMetrics(self.names)
        steps = self.train_reader.steps_per_epoch
        passes = self.spec.backward_passes_per_step
        self.optimizer.zero_grad()
        with self.train_reader.iter_epoch(epoch) as batches:
            for step, batch in enumerate(batches):
                inputs, labels, weights = self._tensors(batch)
                if self.train_minibatch is not None:
                    outputs, labels, values = self._user_step(inputs, labels, weights, step)
                else:
                    outputs = self._outputs(self._forward(inputs), labels)
                    loss, values = self._loss(outputs, labels, weights)
                    # Accumulated over `passes` batches, the mean keeps the gradient's scale.
                    (loss / passes if passes > 1 else loss).backward()
                    if (step + 1) % passes == 0 or step + 1 == steps:
                        self.optimizer.step()
                        self.optimizer.zero_grad()
                with torch.no_grad():
                    values.update(self._metrics(outputs, labels))
                logs = {name: float(v) for name, v in values.items()}
                self.loss_guard.check(logs["loss"], epoch, step)
                metrics.add(logs, len(labels[0]))
                if self.output_shapes is None:
                    self.output_shapes = [per_row_shape(o) for o in outputs]
                self._callback("on_batch_end", epoch, step, logs)
                self.reporter.step(epoch, step + 1, metrics.means())
        if self.unapplied_backward:  # as Horovod: a user step's last accumulation window is applied
            self.optimizer.step()
        return self._reduced(metrics, "train.%d" % epoch, "")

    def _validate(self, epoch):
        torch = self.torch
        self.model.eval()
        metrics = EpochMetrics(self.names)
        with torch.no_grad():
            for batch in val_batches(self.val_reader, epoch, self.rank, self.size,
                                     self.spec.validation_steps_per_epoch):
                inputs, labels, weights = self._tensors(batch)
                outputs = self._outputs(self._forward(inputs), labels)
                _, values = self._loss(outputs, labels, weights)
                values.update(self._metrics(outputs, labels))
                metrics.add({name: float(v) for name, v in values.items()}, len(labels[0]))
        return self._reduced(metrics, "val.%d" % epoch, "val_")

    def _nonfinite_parameters(self):
        with self.torch.no_grad():
            return [name for name, p in self.model.named_parameters() if not self.torch.isfinite(p).all()]

    def _reduced(self, metrics, name, prefix):
        torch, hvd = self.torch, self.hvd
        summed = hvd.allreduce(torch.from_numpy(metrics.vector()), op=hvd.Sum, name="estimator.metrics." + name)
        return {prefix + k: v for k, v in metrics.means(summed.numpy()).items()}

    # -- one batch -------------------------------------------------------------------------------
    def _forward(self, inputs):
        try:
            return self.model(*inputs)
        except Exception as exc:
            # The model's own message (e.g. "mat1 and mat2 shapes cannot be multiplied") names no
            # column: say what was fed, from where.
            fed = ", ".join("%r: %s %s" % (name, tuple(t.shape), str(t.dtype).replace("torch.", ""))
                            for name, t in zip(self.spec.feature_cols, inputs))
            raise ValueError("the model failed on a batch of its inputs (%s; one argument per feature column, in "
                             "feature_cols order, shaped by input_shapes): %s: %s. Make the model's forward() take "
                             "these shapes, or change feature_cols / input_shapes"
                             % (fed, type(exc).__name__, exc)) from exc

    def _tensors(self, batch):
        spec = self.spec
        features = model_inputs([batch[c] for c in spec.feature_cols], spec.input_shapes)
        labels = label_arrays([batch[c] for c in spec.label_cols], spec.label_shapes)
        inputs = [self._tensor(a, integer_dtype=None) for a in features]
        labels = [self._tensor(a, integer_dtype=self.torch.long) for a in labels]
        weights = None
        if spec.sample_weight_col:
            weights = self._tensor(batch[spec.sample_weight_col], integer_dtype=None).to(self.float_dtype).reshape(-1)
        return inputs, labels, weights

    def _tensor(self, values, integer_dtype):
        torch = self.torch
        values = np.asarray(values)
        # from_numpy cannot share read-only (Arrow-backed) memory.
        tensor = torch.from_numpy(values if values.flags.writeable else values.copy())
        if tensor.is_floating_point() or tensor.dtype == torch.bool:
            tensor = tensor.to(self.float_dtype)
        elif integer_dtype is not None:
            tensor = tensor.to(integer_dtype)  # class-index losses want int64
        return tensor.to(self.device, non_blocking=True)

    def _outputs(self, result, labels):
        outputs = list(result) if isinstance(result, (list, tuple)) else [result]
        if len(outputs) != len(labels):
            raise ValueError("the model returned %d output(s) for %d label column(s) %s: return one output per label "
                             "column" % (len(outputs), len(labels), self.spec.label_cols))
        for i, (out, label) in enumerate(zip(outputs, labels)):
            # A label stored as (rows,) against a (rows, 1) output would broadcast to (rows, rows)
            # in the loss: a label with as many values as the output takes its shape (as Horovod's
            # transform_outputs does), and, being then element-wise, its floating dtype (Horovod
            # feeds every label as float). Class indices against (rows, classes) logits differ in
            # size and stay integers for cross_entropy.
            if isinstance(out, self.torch.Tensor) and label.numel() == out.numel():
                if label.shape != out.shape:
                    label = label.reshape(out.shape)
                if out.is_floating_point() and not label.is_floating_point():
                    label = label.to(out.dtype)
                labels[i] = label
        return outputs

    def _user_step(self, inputs, labels, weights, step):
        """One batch through the user's ``train_minibatch`` (torch_minibatch.py), which zeroes,
        back-propagates and steps itself. Returns (outputs, labels, logged values) as the built-in
        step has them."""
        seen = {}

        def mark_backward(grad):
            self.unapplied_backward = True

        def transform_outputs(outputs, labels):
            labels = list(labels)
            outputs = self._outputs(outputs, labels)
            seen["labels"] = labels
            return outputs, labels

        def loss_fn(outputs, labels, sample_weights):
            loss, seen["values"] = self._loss(outputs, labels, sample_weights)
            if loss.requires_grad:
                loss.register_hook(mark_backward)
            return loss

        outputs, loss = self.train_minibatch(self.model, self.optimizer, transform_outputs, loss_fn, inputs,
                                             list(labels), weights, self.spec.backward_passes_per_step, step)
        labels = seen.get("labels", labels)
        outputs = self._outputs(outputs, labels)
        values = seen.get("values")
        if values is None:  # a step with a loss of its own: log it, and each label's as the built-in loss has it
            with self.torch.no_grad():
                values = self._loss(outputs, labels, weights)[1]
        values["loss"] = loss.detach() if isinstance(loss, self.torch.Tensor) else self.torch.tensor(float(loss))
        return outputs, labels, values

    def _loss(self, outputs, labels, weights):
        total, values = 0.0, {}
        for i, (fn, weight, out, label, name) in enumerate(zip(self.losses, self.loss_weights, outputs, labels,
                                                               self.spec.label_cols)):
            if weights is not None:
                value = torch_sample_weights.weighted_mean(self.row_losses[i](out, label), weights)
            else:
                value = fn(out, label)
                if value.dim() != 0:
                    value = value.mean()
            if len(labels) > 1:
                values["%s_loss" % name] = value.detach()
            total = total + (value * weight if weight != 1.0 else value)
        values["loss"] = total.detach()
        return total, values

    def _metrics(self, outputs, labels):
        values = {}
        multi = len(labels) > 1
        for out, label, col in zip(outputs, labels, self.spec.label_cols):
            for name, fn in self.metrics:
                values["%s_%s" % (col, name) if multi else name] = fn(out, label)
        return values

    # -- checkpoints -----------------------------------------------------------------------------
    def _cpu_state(self):
        return {k: v.detach().cpu() for k, v in self.model.state_dict().items()}

    def _checkpoint_bytes(self, epochs_done):
        buf = io.BytesIO()
        self.torch.save({"format": CHECKPOINT_FORMAT, "epochs_done": epochs_done, "model": self._cpu_state(),
                         "optimizer": self.optimizer.state_dict(), "history": self.history.to_dict(),
                         "output_shapes": self.output_shapes}, buf)
        return buf.getvalue()

    def _callback(self, hook, *args):
        for callback in self.callbacks:
            fn = getattr(callback, hook, None)
            if fn is not None:
                fn(*args)
