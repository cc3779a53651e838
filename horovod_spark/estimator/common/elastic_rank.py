"""What both estimators' elastic rank loops do at each (re)start under ``hvd.elastic.run``."""
from .history import History


class ElasticResume:
    """Counts the state's resets; ``restore`` re-places the trainer once after each (its rank, its
    data shard, its reporter), tells the driver training resumed, and takes the committed history
    and output shapes."""

    def __init__(self, trainer, state):
        self.trainer = trainer
        self._resets = self._handled = 0
        state.register_reset_callbacks([self._on_reset])

    def _on_reset(self):
        self._resets += 1

    def restore(self, state):
        trainer = self.trainer
        if self._resets > self._handled:
            self._handled = self._resets
            trainer.place()
            trainer.reporter.resumed(state.epoch, trainer.spec.epochs, trainer.size)
        trainer.history = History(state.history)
        trainer.output_shapes = state.output_shapes
