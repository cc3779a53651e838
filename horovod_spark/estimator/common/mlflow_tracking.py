"""MLflow tracking of a fit, from the driver only: the estimator's Params, rank 0's per-epoch metrics
as they reach the driver, tags that identify the fit, and the fitted model as an MLflow pyfunc model
(mlflow_pyfunc.py). Ranks never contact the tracking server.

The ``mlflow_tracking`` Param decides (see ``tracking_mode``): 'auto' (default) tracks when an
MLflow run is active on the driver, as Spark ML autologging users expect, and never imports MLflow
itself (no run can be active where it was not imported); 'on' also starts a run of its own when none
is active; 'off' never tracks.

Every call to the tracking server runs on one background thread per fit, so that a slow or
unreachable server never slows the fit: the fit waits for that thread only at its end, for at most
``FINISH_SECONDS``. An HTTP server that cannot be reached is found by one short probe when the fit
starts: one warning, and the fit's tracking stops there.
"""
import logging
import queue
import sys
import threading
import time
from typing import Callable, Optional, Set

from .mlflow_settings import FINISH_SECONDS, INSTALL_HINT, PROBE_SECONDS, logged_value, package_versions, tracking_mode

LOG = logging.getLogger("horovod_spark.estimator.mlflow")

# MLflow runs of this driver that already hold a fit's Params: a further fit inside one of them
# (a tuning loop, several fits in one notebook run) logs into a nested run of its own, since MLflow
# refuses to change a Param a run already has.
_runs_with_a_fit: Set[str] = set()
_runs_lock = threading.Lock()


class FitTracking:
    """One fit's tracking; every method is a no-op when the fit is not tracked (``active`` False)."""

    def __init__(self, est):
        self.est = est
        self.active = False
        self._worker = None
        self._own_run = False
        self._parent_run_id = None
        self._into_run_id = None
        self._tracking_uri = None
        mode = tracking_mode(est.getOrDefault("mlflow_tracking"))
        if mode == "off":
            return
        mlflow = sys.modules.get("mlflow") if mode == "auto" else _import_mlflow()
        active = mlflow.active_run() if mlflow is not None else None
        if active is None and mode == "auto":
            return
        self.active = True
        self._tracking_uri = mlflow.get_tracking_uri()
        self._active_run_id = active.info.run_id if active is not None else None

    # -- the fit's calls ----------------------------------------------------------------------------
    def begin(self, run_id: str, cfg, num_proc: int) -> None:
        """The fit's run_id, checked config and number of ranks are known: open the MLflow run (in the
        background) and log the Params and tags."""
        if not self.active:
            return
        if self._active_run_id is None:
            self._own_run = True
        else:
            with _runs_lock:
                nested = self._active_run_id in _runs_with_a_fit
                _runs_with_a_fit.add(self._active_run_id)
            if nested:
                self._own_run, self._parent_run_id = True, self._active_run_id
            else:
                self._into_run_id = self._active_run_id
        self._worker = TrackingWorker(self._tracking_uri)
        params = {param.name: logged_value(value) for param, value in self.est.extractParamMap().items()}
        tags = {"horovod_spark.run_id": run_id, "horovod_spark.store": str(cfg.store.prefix_path),
                "horovod_spark.num_proc": str(num_proc),
                "horovod_spark.estimator": type(self.est).__name__}
        tags.update(("horovod_spark.version.%s" % name, version)
                    for name, version in package_versions(self.est.framework).items())
        worker = self._worker
        worker.submit("open the run", lambda: worker.open_run(self._into_run_id, self._own_run, run_id,
                                                              self._parent_run_id))
        worker.submit("log the Params", lambda: worker.log_params(params))
        worker.submit("log the tags", lambda: worker.log_tags(tags))

    def listen(self, printer) -> None:
        """Log each epoch's metrics as rank 0's epoch_end event reaches the driver's ``printer``."""
        if self.active and self._worker is not None:
            printer.epoch_listeners.append(self._worker.epoch_metrics)

    def finished(self, model) -> None:
        """The fit returned ``model``: log the epochs not seen yet (from its history), the model, end
        a run of our own, and wait for all of it at most FINISH_SECONDS."""
        if not self.active or self._worker is None:
            return
        worker = self._worker
        history = model.getHistory() or {}
        worker.submit("log the metrics", lambda: worker.history_metrics(history))
        if not worker.stopped:
            self._submit_model(worker, model)
        if self._own_run:
            worker.submit("end the run", lambda: worker.end_run("FINISHED"))
        worker.close(FINISH_SECONDS)

    def _submit_model(self, worker, model) -> None:
        from .mlflow_pyfunc import save_for_pyfunc
        try:
            files = save_for_pyfunc(model)
        except Exception as exc:  # the model is the user's; a failure to save it must not fail the fit
            LOG.warning("MLflow tracking: the fitted model could not be saved for MLflow (%s); the run has "
                        "its Params and metrics but no model", exc)
            return
        worker.submit("log the model", lambda: worker.log_model(files, self.est.framework), skipped=files.cleanup)

    def failed(self) -> None:
        """The fit raised: end a run of our own as FAILED (within FINISH_SECONDS)."""
        if not self.active or self._worker is None:
            return
        worker = self._worker
        if self._own_run:
            worker.submit("end the run", lambda: worker.end_run("FAILED"))
        worker.close(FINISH_SECONDS)


def _import_mlflow():
    try:
        import mlflow
    except ImportError as exc:
        raise ValueError("mlflow_tracking=True needs MLflow, which cannot be imported here (%s): install it with "
                         "`%s`, or set mlflow_tracking='auto' (tracks when an MLflow run is active) or False"
                         % (exc, INSTALL_HINT)) from None
    return mlflow


class TrackingWorker:
    """The background thread that makes every call to the tracking server for one fit, in order."""

    def __init__(self, tracking_uri: str):
        import mlflow
        self.mlflow = mlflow
        self.tracking_uri = tracking_uri
        self.client = mlflow.MlflowClient(tracking_uri)
        self.run_id: Optional[str] = None
        self.into_existing_run = False
        self._queue: "queue.Queue" = queue.Queue()
        self.stopped = False     # the server is unreachable or the run could not be opened
        self._epochs_logged: Set[int] = set()   # touched on the worker's thread only
        self._thread = threading.Thread(target=self._work, name="horovod_spark-mlflow", daemon=True)
        self._thread.start()

    def submit(self, what: str, call: Callable[[], None], skipped: Optional[Callable[[], None]] = None) -> None:
        """Queue ``call``; ``skipped`` runs instead when the worker has stopped by then."""
        self._queue.put((what, call, skipped))

    def close(self, timeout: float) -> None:
        """No more calls; wait at most ``timeout`` seconds for those queued."""
        self._queue.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            LOG.warning("MLflow tracking: the tracking server at %s has not taken everything after %.0f s; the fit "
                        "returns now and the rest is logged in the background while this process runs",
                        self.tracking_uri, timeout)

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            what, call, skipped = item
            try:
                if not self.stopped:
                    call()
                elif skipped is not None:
                    skipped()
            except Exception as exc:
                if self.run_id is None:
                    self.stopped = True
                LOG.warning("MLflow tracking: could not %s at %s: %s%s", what, self.tracking_uri, exc,
                            "; nothing more of this fit is logged" if self.stopped else "")

    # -- the calls, on the worker's thread ----------------------------------------------------------
    def open_run(self, into_run_id, own_run: bool, run_name: str, parent_run_id) -> None:
        unreachable = probe(self.tracking_uri)
        if unreachable:
            self.stopped = True
            LOG.warning("MLflow tracking: the tracking server at %s cannot be reached (%s); this fit goes on "
                        "without tracking", self.tracking_uri, unreachable)
            return
        if not own_run:
            self.run_id, self.into_existing_run = into_run_id, True
            return
        # Started through MLflow's fluent API, which resolves the experiment as the user set it
        # (set_experiment, MLFLOW_EXPERIMENT_NAME, a Databricks notebook's own); the run stack it
        # pushes onto belongs to this thread only.
        run = self.mlflow.start_run(run_name=run_name, parent_run_id=parent_run_id, nested=parent_run_id is not None)
        self.run_id = run.info.run_id

    def log_params(self, params: dict) -> None:
        from mlflow.entities import Param
        # MLflow refuses to change a param a run has: in the user's run (or the one pyspark.ml
        # autologging opened around this fit, with its own rendering of the same Params) those
        # already there stay as they are.
        existing = self.client.get_run(self.run_id).data.params if self.into_existing_run else {}
        items = [Param(k, v) for k, v in sorted(params.items()) if k not in existing]
        for start in range(0, len(items), 100):   # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=items[start:start + 100])

    def log_tags(self, tags: dict) -> None:
        from mlflow.entities import RunTag
        self.client.log_batch(self.run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def epoch_metrics(self, epoch: int, logs: dict) -> None:
        """Called on the runner's service thread for each epoch_end event: only queues."""
        self.submit("log the metrics of epoch %d" % epoch, lambda: self._log_epochs({epoch: logs}))

    def history_metrics(self, history: dict) -> None:
        epochs = max((len(v) for v in history.values()), default=0)
        self._log_epochs({e: {k: v[e] for k, v in history.items() if e < len(v)} for e in range(epochs)})

    def _log_epochs(self, by_epoch: dict) -> None:
        from mlflow.entities import Metric
        now = int(time.time() * 1000)
        metrics = []
        for epoch, logs in sorted(by_epoch.items()):
            if epoch in self._epochs_logged:
                continue
            self._epochs_logged.add(epoch)
            metrics += [Metric(name, float(value), now, epoch) for name, value in logs.items()
                        if isinstance(value, (int, float))]
        for start in range(0, len(metrics), 1000):   # MLflow takes at most 1000 metrics per batch
            self.client.log_batch(self.run_id, metrics=metrics[start:start + 1000])

    def log_model(self, files, framework: str) -> None:
        from .mlflow_pyfunc import log_pyfunc
        try:
            log_pyfunc(self.run_id, files, framework)
        finally:
            files.cleanup()

    def end_run(self, status: str) -> None:
        self.mlflow.end_run(status)


def probe(tracking_uri: str) -> Optional[str]:
    """Why an HTTP tracking server cannot be reached (None: it answered, or the URI is not HTTP).
    One request with a short timeout, where MLflow's own client retries for minutes."""
    if not tracking_uri.startswith(("http://", "https://")):
        return None
    import requests
    try:
        requests.get(tracking_uri.rstrip("/") + "/health", timeout=PROBE_SECONDS)
    except requests.RequestException as exc:
        return "%s: %s" % (type(exc).__name__, exc)
    return None
