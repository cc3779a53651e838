"""What both estimators' elastic rank loops do at each (re)start under ``hvd.elastic.run``."""
from .history import History
from .rank_device import report_devices


class ElasticResume:
    """Counts the state's resets; ``restore`` re-places the trainer once after each (its rank, its
    data shard, its reporter), tells the driver training resumed, and takes the committed history
    and output shapes.

    Every collective of a (re)start happens here, after the state's sync, so that a rank that joins
    later and the survivors of a reset run the same collectives in the same order."""

    def __init__(self, trainer, state):
        self.trainer = trainer
        self._resets = self._handled = 0
        self._said_no_gpu = False  # the line is said once per fit, not after every reset
        state.register_reset_callbacks([self._on_reset])

    def _on_reset(self):
        self._resets += 1

    def restore(self, state):
        trainer = self.trainer
        if self._resets > self._handled:
            self._handled = self._resets
            trainer.place()
            trainer.reporter.resumed(state.epoch, trainer.spec.epochs, trainer.size)
        missing = report_devices(trainer.hvd, trainer.cpu_fallback, quiet=self._said_no_gpu)
        self._said_no_gpu = self._said_no_gpu or (missing > 0 and trainer.rank == 0)
        trainer.history = History(state.history)
        trainer.output_shapes = state.output_shapes
