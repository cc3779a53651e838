"""Per-epoch scalars of a Torch or Keras fit as TensorBoard event files, written by rank 0 into the
run's logs (run_logs.py), so ``tensorboard --logdir <store prefix>/runs/<run_id>/logs`` shows the fit.

One scalar per name of the fit's history (``loss``, ``val_loss``, metrics ...), with the epoch
(0-based) as its step, so the event files and the fitted model's history hold the same values. The
records are written with TensorBoard's own protocol buffers and record writer, which need neither
TensorFlow nor torch. The ``tensorboard`` package is optional: without it the fit writes no event
files and says so once.
"""
import itertools
import logging
import os
import socket
import time

from .run_logs import RunLogs

log = logging.getLogger(__name__)
_FILES = itertools.count()  # of this process: an elastic fit's rank 0 may open a second file within a second

NO_TENSORBOARD = ("horovod_spark: no TensorBoard event files were written for this fit, as the package tensorboard "
                  "is not installed where the ranks run; install horovod_spark[tensorboard] (or tensorboard) there "
                  "to get them in the store's runs/<run_id>/logs")


class EpochScalars:
    """Writes on rank 0 only; every method is a no-op elsewhere, so ranks call it alike."""

    def __init__(self, store, run_id: str, rank: int, verbose: int = 1):
        self._records = None
        self._run_logs = None
        if rank != 0 or store.get_logs_path(run_id) is None:
            return
        try:
            from tensorboard.compat.proto import event_pb2, summary_pb2
            from tensorboard.summary.writer.record_writer import RecordWriter
        except ImportError:
            if verbose:
                log.warning(NO_TENSORBOARD)
            return
        self._event, self._summary = event_pb2.Event, summary_pb2.Summary
        self._run_logs = RunLogs(store, run_id)
        # The name TensorBoard's readers look for (``events.out.tfevents.*``); time, host, process
        # and count keep the files of a resumed or re-formed fit apart.
        name = "events.out.tfevents.%010d.%s.%d.%d.horovod_spark" % (time.time(), socket.gethostname(), os.getpid(),
                                                                     next(_FILES))
        self._records = RecordWriter(open(os.path.join(self._run_logs.directory, name), "wb"))
        self._write(self._event(wall_time=time.time(), file_version="brain.Event:2"))

    def epoch_end(self, epoch: int, logs: dict) -> None:
        """Record one epoch's values and copy the event file into the store."""
        if self._records is None:
            return
        values = [self._summary.Value(tag=name, simple_value=float(value)) for name, value in logs.items()]
        self._write(self._event(wall_time=time.time(), step=epoch, summary=self._summary(value=values)))
        self._run_logs.sync()

    def close(self) -> None:
        if self._records is None:
            return
        records, self._records = self._records, None
        records.close()
        self._run_logs.close()

    def _write(self, event) -> None:
        self._records.write(event.SerializeToString())
        self._records.flush()
