"""A LightningEstimator rank in an elastic fit (``elastic=True``): the Trainer's fit under
``hvd.elastic.run``.

At each epoch's end, after rank 0 wrote the epoch's checkpoint, the state (next epoch, history and
rank 0's bytes of Lightning's checkpoint of the Trainer) is committed, so a lost rank costs at most
the epoch it interrupted. The error that a lost rank raises inside ``Trainer.fit`` leaves it (Lightning
tears the Trainer down and re-raises); after the reset every rank takes rank 0's committed state,
rebuilds its readers for its new rank and the new number of ranks, and fits a new Trainer from that
checkpoint, which runs the interrupted epoch again from its start.
"""
from .common.elastic_rank import ElasticResume


def train_elastic(trainer):
    hvd = trainer.hvd
    spec = trainer.spec
    state = hvd.elastic.ObjectState(epoch=trainer.start_epoch, history=trainer.history.to_dict(),
                                    output_shapes=trainer.output_shapes, checkpoint=trainer.lightning_checkpoint)
    resume = ElasticResume(trainer, state)

    def commit(epoch, checkpoint):
        state.epoch = epoch + 1
        state.history = trainer.history.to_dict()
        state.output_shapes = trainer.output_shapes
        state.checkpoint = checkpoint
        state.commit()

    @hvd.elastic.run
    def fit(state):
        resume.restore(state)
        if state.epoch < spec.epochs:
            trainer.fit(state.checkpoint, commit)
        return trainer.finish()

    trainer.reporter.train_begin(spec.epochs, spec.start_epoch, trainer.train_reader.steps_per_epoch, trainer.val_steps,
                                 spec.run_id)
    return fit(state)
