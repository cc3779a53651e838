"""The driver's side of progress reporting: a stdout sink for ``horovod_spark.run``.

It receives every rank's output lines as the runner prints them (``[rank]<stdout>:text``), turns
rank 0's progress events (progress_rank.MARKER) into a tqdm bar (tqdm.auto: a widget in Jupyter)
and one summary line per epoch, and passes every other line through unchanged. It runs on the
runner's service thread, so it never raises and never blocks on anything but the terminal.
"""
import json
import logging
import sys
from typing import Dict, List

from horovod_spark.common.console import line_start
from horovod_spark.common.line_sink import LineSink, flush_quietly

from .history import format_epoch
from .progress_rank import MARKER

_TAG = "]<stdout>:" + MARKER

log = logging.getLogger(__name__)


class ProgressPrinter(LineSink):
    def __init__(self, verbose: int, out=None, err=None, bar_factory=None):
        super().__init__()
        self.verbose = verbose
        self._out = out if out is not None else sys.stdout
        self._err = err if err is not None else sys.stderr
        self._bar_factory = bar_factory
        self._bar = None
        self.epochs = 0
        self.steps = 0
        self.epoch_logs: List[Dict] = []   # every epoch_end event seen, for callers and tests
        self.steps_seen = 0
        # functions(epoch, logs) called with each epoch's metrics (MLflow tracking); they must not block
        self.epoch_listeners: List = []

    # -- the file-like face the runner writes to (LineSink's write and close) ---------------------
    def flush(self) -> None:
        flush_quietly(self._out)

    def _closed(self) -> None:
        self._close_bar()

    # -- events ------------------------------------------------------------------------------------
    def _line(self, line: str) -> None:
        at = line.find(_TAG)
        if at < 0:
            self._print(line)
            return
        try:
            event = json.loads(line[at + len(_TAG):])
            getattr(self, "_on_" + event.pop("event"))(**event)
        except Exception as exc:  # a malformed event must not kill the runner's service thread
            log.warning("unreadable progress event (%s): %r", exc, line)

    def _on_train_begin(self, epochs, start_epoch, steps, val_steps, run_id):
        self.epochs, self.steps = epochs, steps

    def _on_step(self, epoch, step, logs):
        self.steps_seen += 1
        if not self.verbose:
            return
        bar = self._open_bar(epoch)
        if bar is not None:
            bar.update(max(0, step - bar.n))
            bar.set_postfix({k: "%.4f" % v for k, v in logs.items()}, refresh=False)

    def _on_epoch_end(self, epoch, logs, seconds):
        self.epoch_logs.append({"epoch": epoch, "logs": logs, "seconds": seconds})
        for listener in self.epoch_listeners:
            listener(epoch, logs)
        self._close_bar()
        if self.verbose:
            self._print(format_epoch(epoch, self.epochs, logs, seconds))

    def _on_train_end(self):
        self._close_bar()

    def _on_resumed(self, epoch, epochs, size):
        self._close_bar()
        if self.verbose:
            self._print("[horovod_spark] training resumed at epoch %d/%d on %d rank(s)" % (epoch + 1, epochs, size))

    # -- output ------------------------------------------------------------------------------------
    def _open_bar(self, epoch):
        if self._bar is not None and self._bar.epoch != epoch:
            self._close_bar()
        if self._bar is None:
            try:
                factory = self._bar_factory
                if factory is None:
                    from tqdm.auto import tqdm as factory
                # A terminal bar in a log file is noise: tqdm's disable=None turns it off when the
                # stream is not a TTY. Jupyter's streams are not TTYs either, but there the bar is a widget.
                widget = any(c.__module__ == "tqdm.notebook" for c in getattr(factory, "__mro__", ()))
                self._bar = factory(total=self.steps, desc="epoch %d/%d" % (epoch + 1, self.epochs), unit="step",
                                    leave=False, file=self._err, dynamic_ncols=True,
                                    disable=False if widget else None)
                self._bar.epoch = epoch
            except Exception:
                self._bar_factory = _no_bar
                return None
        return self._bar

    def _close_bar(self):
        if self._bar is not None:
            bar, self._bar = self._bar, None
            try:
                bar.close()
            except Exception:
                pass

    def _print(self, line: str) -> None:
        try:
            self._out.write(line_start(self._out) + line + "\n")
            self.flush()
        except (OSError, ValueError):
            pass


def _no_bar(**_):
    raise RuntimeError("no progress bar available")
