"""Learning-rate callbacks: a multiplier schedule over epochs, and Goyal et al.'s gradual warmup."""
import keras

from horovod_spark.common import basics as _basics


def _get_lr(optimizer):
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


def _is_momentum_sgd(optimizer):
    inner = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer
    return isinstance(inner, keras.optimizers.SGD) and inner.momentum != 0 and inner.built


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Set the learning rate to ``initial_lr * multiplier(epoch)`` for ``start_epoch <= epoch <
    end_epoch``. ``multiplier`` is a function of the epoch, or a number m, which as in Horovod 0.28
    means exponential decay: ``initial_lr * m ** (epoch - start_epoch)``.

    ``staircase=True`` changes it at the start of each epoch; ``False`` at every batch, with a
    fractional epoch (``epoch + batch / steps_per_epoch``; ``steps_per_epoch`` defaults to what
    ``fit`` reports). ``momentum_correction`` rescales SGD's momentum buffers by new_lr / old_lr
    when the rate changes, so the step size follows the new rate at once. The rate is logged as
    ``lr`` at the end of each epoch.
    """

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        self.initial_lr = initial_lr
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        if initial_lr is None:
            raise ValueError("%s needs initial_lr (the learning rate the schedule multiplies)" % type(self).__name__)
        if callable(multiplier):
            self.multiplier = multiplier
        else:
            self.multiplier = lambda epoch: multiplier ** (epoch - start_epoch)

    def _in_range(self, epoch):
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _set_lr(self, new_lr):
        optimizer = self.model.optimizer
        old_lr = _get_lr(optimizer)
        optimizer.learning_rate = new_lr
        if self.momentum_correction and old_lr > 0 and new_lr != old_lr and _is_momentum_sgd(optimizer):
            # Keras 3 compiles SGD's momentum coefficient into the train function as a constant, so
            # instead of changing it for one step (Horovod's way) scale the buffers it multiplies:
            # SGD's buffers hold lr-scaled steps, so this is the same correction.
            for buf in getattr(optimizer, "inner_optimizer", optimizer).momentums:
                buf.assign(buf * (new_lr / old_lr))

    def on_train_begin(self, logs=None):
        if isinstance(self.model.optimizer.learning_rate, keras.optimizers.schedules.LearningRateSchedule):
            raise ValueError("the optimizer's learning rate is a LearningRateSchedule; Horovod LR callbacks set a "
                             "constant learning rate, so give the optimizer a float learning rate")
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = (self.params or {}).get("steps")
            if not self.steps_per_epoch:
                raise ValueError("could not tell the number of steps per epoch; pass steps_per_epoch to %s"
                                 % type(self).__name__)

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self.current_epoch is None or not self._in_range(self.current_epoch):
            return
        if self.staircase:
            if batch == 0:
                self._set_lr(self.initial_lr * self.multiplier(self.current_epoch))
        else:
            epoch = self.current_epoch + float(batch) / self.steps_per_epoch
            self._set_lr(self.initial_lr * self.multiplier(epoch))

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = _get_lr(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramp the learning rate from ``initial_lr / size`` to ``initial_lr`` over the first
    ``warmup_epochs`` epochs, batch by batch (Goyal et al., "Accurate, Large Minibatch SGD").

    ``initial_lr`` is the full (already size-scaled) rate reached at the end of the warmup.
    """

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            # Shifted by one batch so the last batch of the warmup lands exactly on initial_lr.
            epoch += 1.0 / self.steps_per_epoch
            size = _basics.size()
            return 1.0 / size * (epoch * (size - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction, steps_per_epoch=steps_per_epoch)
        self.warmup_epochs = warmup_epochs
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and _basics.rank() == 0:
            print("\nEpoch %d: finished gradual learning rate warmup to %g."
                  % (epoch + 1, _get_lr(self.model.optimizer)))

