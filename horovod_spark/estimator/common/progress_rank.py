"""Rank 0's side of progress reporting: one marked JSON line per event on stdout.

The Spark runner already streams every rank's stdout to the driver, line by line, over its
authenticated service, so progress needs no socket of its own: the driver's ProgressPrinter
(progress_driver.py) picks the marked lines out of that stream. Per-step events are throttled
to one per ``interval`` seconds; epoch events are always sent.
"""
import json
import sys
import time

MARKER = "##horovod_spark.progress## "


class ProgressReporter:
    def __init__(self, enabled: bool, interval: float = 0.5, out=None):
        self.enabled = enabled
        self.interval = interval
        self._out = out if out is not None else sys.stdout
        self._owns_out = out is not None and hasattr(out, "close")
        # None, not 0.0: time.monotonic() counts from an unspecified origin (boot, on Linux), so
        # a fresh machine's clock can read less than one interval and drop the first step.
        self._last_step = None

    def emit(self, event: str, **fields) -> None:
        if not self.enabled:
            return
        fields["event"] = event
        self._out.write(MARKER + json.dumps(fields, allow_nan=True) + "\n")
        self._out.flush()

    def train_begin(self, epochs: int, start_epoch: int, steps_per_epoch: int, val_steps: int, run_id: str) -> None:
        self.emit("train_begin", epochs=epochs, start_epoch=start_epoch, steps=steps_per_epoch,
                  val_steps=val_steps, run_id=run_id)

    def step(self, epoch: int, step: int, logs: dict) -> None:
        now = time.monotonic()
        if self._last_step is None or now - self._last_step >= self.interval:
            self._last_step = now
            self.emit("step", epoch=epoch, step=step, logs=logs)

    def epoch_end(self, epoch: int, logs: dict, seconds: float) -> None:
        self.emit("epoch_end", epoch=epoch, logs=logs, seconds=seconds)

    def train_end(self) -> None:
        self.emit("train_end")

    def close(self) -> None:
        """Close the stream the reporter was given (never stdout)."""
        if self._owns_out:
            self._out.close()

    def resumed(self, epoch: int, epochs: int, size: int) -> None:
        """An elastic fit re-formed after losing or gaining ranks and goes on at ``epoch`` (0-based)."""
        self.emit("resumed", epoch=epoch, epochs=epochs, size=size)


def rank_reporter(spec, rank: int) -> ProgressReporter:
    """Rank 0's reporter of a fit (a silent one on other ranks): to stdout, which ``run`` streams to
    the driver, or, in an elastic fit, to the driver's progress service (elastic_progress.py)."""
    enabled = rank == 0 and (spec.verbose > 0 or spec.progress_events)
    out = None
    if enabled and spec.elastic:
        from .elastic_progress import RemoteLines
        out = RemoteLines(spec.progress, rank)
    return ProgressReporter(enabled, spec.progress_interval, out=out)
