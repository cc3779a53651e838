"""The part of every framework's rank trainer that depends on no framework: where the rank stands
in the job (its shard of the data, its progress reporter, its loss guard) and the gradient
compression the payload named."""
from .nonfinite import LossGuard
from .progress_rank import rank_reporter
from .rank_data import train_reader, val_reader


class RankTrainer:
    """Base of the framework trainers. A subclass sets ``spec`` (the TrainSpec), ``hvd`` (the
    framework's horovod_spark module, initialised) and ``transformation_fn`` before ``place()``."""

    reporter = None

    def place(self):
        """(Re)build what depends on this rank's place in the job: its shard of the data, whether it
        reports progress. An elastic fit calls it again after every reset."""
        spec = self.spec
        self.rank, self.size = self.hvd.rank(), self.hvd.size()
        self.train_reader = train_reader(spec, self.rank, self.size, self.transformation_fn)
        self.val_reader = val_reader(spec, self.rank, self.size, self.transformation_fn)
        self.val_steps = 0 if self.val_reader is None else self.val_reader.steps_per_epoch
        if self.reporter is not None:
            self.reporter.close()
        self.reporter = rank_reporter(spec, self.rank)
        self.loss_guard = LossGuard(spec.nonfinite_loss, self.rank)

    def compression(self, name: str):
        """The framework's compressor for the payload's compression name ('none' or 'fp16')."""
        return self.hvd.Compression.fp16 if name == "fp16" else self.hvd.Compression.none
