"""A TorchEstimator rank's loop in an elastic fit (``elastic=True``): the fixed-size loop of
torch_remote.py, epoch by epoch, under ``hvd.elastic.run``.

The state (model, optimizer, next epoch, history) is committed at each epoch's end, after rank 0
wrote the epoch's checkpoint, so a lost rank costs at most the epoch it interrupted. After a reset
every rank takes rank 0's committed state, rebuilds its readers for its new rank and the new
number of ranks (the interrupted epoch's rows are then shared out among the ranks left, each row
once, as in a fixed-size fit of that many ranks) and runs the epoch again from its start.
"""
from .common.elastic_rank import ElasticResume


def train_elastic(trainer):
    hvd = trainer.hvd
    spec = trainer.spec
    state = hvd.elastic.TorchState(trainer.model, trainer.optimizer, epoch=spec.start_epoch,
                                   history=trainer.history.to_dict(), output_shapes=trainer.output_shapes)
    resume = ElasticResume(trainer, state)

    @hvd.elastic.run
    def fit(state):
        resume.restore(state)
        for epoch in range(state.epoch, spec.epochs):
            trainer.epoch(epoch)
            state.epoch = epoch + 1
            state.history = trainer.history.to_dict()
            state.output_shapes = trainer.output_shapes
            state.commit()
        return trainer.finish()

    trainer.reporter.train_begin(spec.epochs, spec.start_epoch, trainer.train_reader.steps_per_epoch, trainer.val_steps,
                                 spec.run_id)
    trainer._callback("on_train_begin", trainer.rank, trainer.size)
    return fit(state)
