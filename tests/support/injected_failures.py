"""Failures injected into a fit at a chosen point of training: a TorchEstimator callback whose rank
raises at a given epoch and step, once per fit (claimed through a file, so the rank that takes the
failed rank's place trains on)."""
from support.executor_kill import claim


class RaiseAtStep:
    """Rank ``rank`` raises ``ValueError`` at ``step`` of ``epoch``, the first time it gets there."""

    def __init__(self, marker: str, rank: int, epoch: int, step: int):
        self.marker, self.rank, self.epoch, self.step = marker, rank, epoch, step
        self.current_rank = None

    def on_train_begin(self, rank, size):
        self.current_rank = rank

    def on_batch_end(self, epoch, step, logs):
        if (self.current_rank == self.rank and epoch == self.epoch and step == self.step
                and claim(self.marker)):
            raise ValueError("an injected failure on rank %d at epoch %d, step %d" % (self.rank, epoch, step))
