"""One fit, framework-independent: check -> prepare data -> resolve the run (resume?) -> run the
ranks with progress -> hand rank 0's result to the framework to build the Model.

The framework estimator supplies (see estimator.HorovodEstimator): ``_check_framework(cfg)`` ->
FrameworkPlan, ``_remote_trainer()`` (an importable function(TrainSpec) run on every rank) and
``_build_model(result, cfg, run_id)``.
"""
import datetime
import random
import sys
import uuid
from dataclasses import dataclass

from horovod_spark import session as spark_session
from horovod_spark.exceptions import HorovodSparkError
from horovod_spark.launcher.options import check_num_proc
from horovod_spark.spark.driver import preflight

from . import fitted_model, run_ranks
from .checkpoint import CheckpointStore
from .checks import check_common
from .elastic_fit import resolve_sizes, run_elastic_fit
from .mlflow_tracking import FitTracking
from .progress_driver import ProgressPrinter
from .spec import TrainSpec

# The validation split is drawn with this seed unless random_seed is set, so that fitting the
# same DataFrame again (a new run, a tuning trial) finds its prepared data in the store's cache.
DEFAULT_SPLIT_SEED = 0


@dataclass
class FrameworkPlan:
    payload: bytes       # cloudpickled model/optimizer/loss/... for the ranks
    signature: dict      # what a resumed run must share with the run it resumes (JSON values)


def new_run_id() -> str:
    return "run-%s-%s" % (datetime.datetime.now().strftime("%Y%m%d-%H%M%S"), uuid.uuid4().hex[:6])


def run_fit(est, source):
    """The fitted Model of ``est`` on ``source``, the fit tracked in MLflow as ``mlflow_tracking`` says
    (mlflow_tracking.py)."""
    # Before any Spark job: mlflow_tracking=True without MLflow installed is refused here.
    tracking = FitTracking(est)
    try:
        model = _fit(est, source, tracking)
    except BaseException:
        tracking.failed()
        raise
    tracking.finished(model)
    return model


def _fit(est, source, tracking):
    cfg = check_common(est)
    # Before any Spark job: an unusable store would otherwise fail only once data preparation ran.
    cfg.store.check_access()
    runner = run_ranks.choose(est.getOrDefault("backend"), cfg.num_proc)
    rank_env = runner.rank_env(est._rank_env(cfg), est._user_rank_env())
    plan = est._check_framework(cfg)
    source.check(cfg)
    session = source.spark_session()
    num_proc = check_num_proc(
        runner.num_proc if runner.num_proc is not None else spark_session.default_parallelism(session),
        run_ranks.FIT)
    out = runner.out or sys.stdout

    def log(level, text):
        if cfg.verbose >= level:
            out.write("[horovod_spark] %s\n" % text)
            out.flush()

    # Free task slots are checked now, before data preparation spends minutes of the cluster. An
    # elastic fit needs no such check: it starts on min_num_proc slots and grows as Spark starts
    # the other tasks, on any cluster, autoscaling ones (dynamic allocation) included.
    try:
        if runner.on_spark and cfg.elastic is None:
            preflight.check_session_cluster(session, num_proc, log)
    except HorovodSparkError as exc:
        raise ValueError("num_proc=%d cannot run on this cluster: %s" % (num_proc, exc)) from exc

    run_id = cfg.run_id or new_run_id()
    checkpoints = CheckpointStore(cfg.store, run_id)
    record = checkpoints.read_run_record() if cfg.run_id else None
    if record is not None and checkpoints.latest() is None:
        # Started before but no epoch finished (e.g. the model failed on its first batch): there
        # is nothing to resume, so this run_id may start over with another model or dataset.
        log(1, "run %s has no completed epoch to resume: starting it afresh" % run_id)
        record = None
    signature = dict(plan.signature, feature_cols=cfg.feature_cols, label_cols=cfg.label_cols)
    if record is not None:
        # Model and columns are compared now, before preparing data; the dataset once it is known.
        _check_same_run(run_id, cfg, record, signature)
        if cfg.random_seed is not None and record["seed"] != cfg.random_seed:
            raise ValueError("run_id %r was started with random_seed=%r, not %r: pass the same seed to resume it, "
                             "or use a new run_id" % (run_id, record["seed"], cfg.random_seed))
    seed = record["seed"] if record else cfg.random_seed if cfg.random_seed is not None else random.randrange(2 ** 31)
    split_seed = cfg.random_seed if cfg.random_seed is not None else DEFAULT_SPLIT_SEED

    tracking.begin(run_id, cfg, num_proc)
    log(1, "preparing data in %s" % cfg.store.prefix_path)
    data = source.prepare(cfg, num_proc, split_seed)
    log(1, "%s data %s: %d training rows, %d validation rows"
        % ("reusing prepared" if data.reused else "prepared", data.key, data.train_rows, data.val_rows))

    signature["dataset"] = data.key
    if record is None:
        checkpoints.write_run_record({"signature": signature, "seed": seed, "framework": est.framework,
                                      "created": datetime.datetime.now(datetime.timezone.utc).isoformat()})
    else:
        _check_same_run(run_id, cfg, record, signature)
    latest = checkpoints.latest()
    start_epoch, resume_path = (min(latest[0], cfg.epochs), latest[1]) if latest else (0, None)

    spec = TrainSpec(
        store=cfg.store, run_id=run_id, train_path=data.train_path, val_path=data.val_path,
        train_rows=data.train_rows, val_rows=data.val_rows, feature_cols=cfg.feature_cols,
        label_cols=cfg.label_cols, sample_weight_col=cfg.sample_weight_col, input_shapes=cfg.input_shapes,
        label_shapes=cfg.label_shapes, batch_size=cfg.batch_size, val_batch_size=cfg.val_batch_size,
        epochs=cfg.epochs, start_epoch=start_epoch, resume_path=resume_path,
        train_steps_per_epoch=cfg.train_steps_per_epoch, validation_steps_per_epoch=cfg.validation_steps_per_epoch,
        shuffle=cfg.shuffle, shuffle_buffer_rows=cfg.shuffle_buffer_rows, seed=seed,
        backward_passes_per_step=cfg.backward_passes_per_step, data_module=cfg.data_module, use_gpu=cfg.use_gpu,
        verbose=cfg.verbose, payload=plan.payload, inmemory_cache_all=cfg.inmemory_cache_all,
        nonfinite_loss=cfg.nonfinite_loss, train_reader_options=cfg.train_reader_options,
        val_reader_options=cfg.val_reader_options, mp_start_method=cfg.mp_start_method, gpu_notice=cfg.gpu_notice,
        elastic=cfg.elastic is not None, progress_events=tracking.active and runner.on_spark)

    log(1, "run %s: training %d epoch(s) on %d rank(s)%s%s" % (
        run_id, cfg.epochs, num_proc, ", resuming after epoch %d" % start_epoch if start_epoch else "",
        " (elastic: min_num_proc=%d, max_num_proc=%d)" % resolve_sizes(cfg.elastic, num_proc) if cfg.elastic else ""))
    printer = ProgressPrinter(cfg.verbose, out=out)
    tracking.listen(printer)
    try:
        if cfg.elastic is not None:
            results = run_elastic_fit(est._remote_trainer(), spec, cfg.elastic, num_proc, rank_env, printer,
                                      cfg.verbose, run_id)
        else:
            results = runner.run(est._remote_trainer(), (spec,), num_proc, rank_env, printer, cfg.verbose)
    finally:
        printer.close()
    result = results[0]
    if not isinstance(result, dict) or "history" not in result:
        raise RuntimeError("rank 0 returned no training result (got %r)" % type(result).__name__)
    return fitted_model.finish(est, est._build_model(result, cfg, run_id), cfg.store, data.train_path, cfg.label_cols)


def _check_same_run(run_id, cfg, record, signature):
    recorded = record["signature"]
    changed = sorted(k for k in signature if signature[k] != recorded.get(k))
    if changed:
        raise ValueError("run_id %r holds a run of a different model or dataset (differs in: %s), so it cannot be "
                         "resumed: use a new run_id, or delete %s" % (run_id, ", ".join(changed),
                                                                      cfg.store.get_run_path(run_id)))
