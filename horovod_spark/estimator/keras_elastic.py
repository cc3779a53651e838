"""A KerasEstimator rank's ``model.fit`` in an elastic fit (``elastic=True``), under ``hvd.elastic.run``.

The state (model and optimizer variables, next epoch, history) is committed at each epoch's end,
after rank 0 wrote the epoch's checkpoint, so a lost rank costs at most the epoch it interrupted.
After a reset every rank takes rank 0's committed state, rebuilds its readers for its new rank
and the new number of ranks (the interrupted epoch's rows are then shared out among the ranks
left, each row once, as in a fixed-size fit of that many ranks) and calls ``model.fit`` again from
the start of that epoch.
"""
import keras

from .common.elastic_rank import ElasticResume


class _CommitEachEpoch(keras.callbacks.Callback):
    """Last in the callback list: the epoch is recorded and checkpointed when it commits."""

    def __init__(self, state, trainer):
        super().__init__()
        self.state = state
        self.trainer = trainer

    def on_epoch_end(self, epoch, logs=None):
        state, trainer = self.state, self.trainer
        state.epoch = epoch + 1  # Keras numbers epochs from initial_epoch, so this one is absolute
        state.history = trainer.history.to_dict()
        state.output_shapes = trainer.output_shapes
        state.commit()


def fit_elastic(trainer):
    from .keras_rank_callback import EstimatorCallback
    hvd, spec = trainer.hvd, trainer.spec
    if not trainer.optimizer.built:
        # The state tracks the optimizer's variables: they must exist before its first commit.
        trainer.optimizer.build(trainer.model.trainable_variables)
    state = hvd.elastic.KerasState(trainer.model, trainer.optimizer, epoch=spec.start_epoch,
                                   history=trainer.history.to_dict(), output_shapes=trainer.output_shapes)
    resume = ElasticResume(trainer, state)

    @hvd.elastic.run
    def fit(state):
        resume.restore(state)
        if state.epoch < spec.epochs:
            trainer._fit(EstimatorCallback(trainer), start_epoch=state.epoch,
                         more_callbacks=[_CommitEachEpoch(state, trainer)])

    fit(state)
