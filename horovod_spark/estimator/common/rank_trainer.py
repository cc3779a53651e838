"""The part of every framework's rank trainer that depends on no framework: where the rank stands
in the job (its shard of the data, its progress reporter, its TensorBoard scalars, its loss guard)
and the gradient compression the payload named."""
from .nonfinite import LossGuard
from .progress_rank import rank_reporter
from .rank_data import train_reader, val_reader
from .tensorboard_scalars import EpochScalars


class RankTrainer:
    """Base of the framework trainers. A subclass sets ``spec`` (the TrainSpec), ``hvd`` (the
    framework's horovod_spark module, initialised) and ``transformation_fn`` before ``place()``."""

    reporter = None
    scalars = None
    # Lightning's own logger writes its TensorBoard files (lightning_remote.py).
    writes_epoch_scalars = True

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
        if self.writes_epoch_scalars:
            self.close_scalars()
            self.scalars = EpochScalars(spec.store, spec.run_id, self.rank, spec.verbose)
        self.loss_guard = LossGuard(spec.nonfinite_loss, self.rank)

    def close_scalars(self):
        """Finish the event file and its copy in the store (at the fit's end and before a re-formed
        elastic fit chooses its rank 0 anew)."""
        if self.scalars is not None:
            self.scalars.close()
            self.scalars = None

    def compression(self, name: str):
        """The framework's compressor for the payload's compression name ('none' or 'fp16')."""
        return self.hvd.Compression.fp16 if name == "fp16" else self.hvd.Compression.none
