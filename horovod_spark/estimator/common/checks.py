"""Driver-side checks of an estimator's Params, run before any Spark job.

Every failure is a ValueError that names the param and says how to fix it: a bad param found
after data preparation, or inside a rank minutes later, wastes the user's time and the cluster's.
Framework-specific checks (model, optimizer, loss) live with each estimator.
"""
import multiprocessing
import numbers
import re
from dataclasses import dataclass, field
from typing import List, Optional, Union

from horovod_spark.store import Store

from .classifier_columns import check_mode
from .elastic_fit import ElasticSettings, check_elastic
from .transformation_schema import DeclaredTransformation, check_edit_fields, check_removed_fields

_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
NONFINITE_LOSS = ("raise", "warn")


@dataclass
class FitConfig:
    """The checked, resolved values a fit runs with (Params stay untouched)."""
    store: Store
    num_proc: Optional[int]
    feature_cols: List[str]
    label_cols: List[str]
    sample_weight_col: Optional[str]
    validation: Union[None, float, str]
    input_shapes: Optional[List[List[int]]]
    label_shapes: Optional[List[List[int]]]
    batch_size: int
    val_batch_size: int
    epochs: int
    train_steps_per_epoch: Optional[int]
    validation_steps_per_epoch: Optional[int]
    shuffle: bool
    shuffle_buffer_rows: Optional[int]
    random_seed: Optional[int]
    backward_passes_per_step: int
    run_id: Optional[str]
    verbose: int
    use_gpu: bool
    data_module: str
    callbacks: list
    transformation_fn: object
    inmemory_cache_all: bool = False
    nonfinite_loss: str = "raise"
    validate_finite: bool = False
    partitions_per_process: Optional[int] = None
    mp_start_method: Optional[str] = None
    train_reader_options: dict = field(default_factory=dict)   # extra options of the data module's reader
    val_reader_options: dict = field(default_factory=dict)
    elastic: Optional[ElasticSettings] = None   # None: a fixed-size fit (elastic_fit.py)
    gpu_notice: bool = True   # TrainSpec.gpu_notice


def _positive_int(name: str, value, allow_none: bool = False) -> Optional[int]:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError("%s must be a positive integer%s, got %r" % (name, " or None" if allow_none else "", value))
    return int(value)


def check_common(est) -> FitConfig:
    """Check the framework-independent Params of ``est``; the DataFrame is checked separately
    (check_columns), since fit_on_parquet has none."""
    get = est.getOrDefault
    store = get("store")
    if store is None:
        raise ValueError("store is not set: pass store=Store.create('/path/all/executors/can/reach') (or an "
                         "hdfs:// / dbfs:/ URL); prepared data, checkpoints and logs are written there")
    num_proc = get("num_proc")
    if num_proc is not None:
        num_proc = _positive_int("num_proc", num_proc)
    check_mode(get("classification"))
    feature_cols = list(get("feature_cols") or [])
    label_cols = list(get("label_cols") or [])
    if not feature_cols:
        raise ValueError("feature_cols is not set: pass the feature column names, e.g. feature_cols=['features']")
    if not label_cols:
        raise ValueError("label_cols is not set: pass the label column names (one per model output), e.g. "
                         "label_cols=['label']")
    sample_weight_col = get("sample_weight_col")
    chosen = feature_cols + label_cols + ([sample_weight_col] if sample_weight_col else [])
    duplicates = sorted({c for c in chosen if chosen.count(c) > 1})
    if duplicates:
        raise ValueError("column(s) %s are used more than once among feature_cols, label_cols and "
                         "sample_weight_col: each column can have one role" % duplicates)

    validation = get("validation")
    if isinstance(validation, float) and not 0 < validation < 1:
        raise ValueError("validation=%r: pass a fraction strictly between 0 and 1 (e.g. 0.1), the name of a "
                         "boolean/integer column, or None" % validation)
    if isinstance(validation, str) and validation in chosen:
        raise ValueError("validation column %r is also a feature/label/weight column: use a separate "
                         "boolean/integer column to mark validation rows" % validation)

    input_shapes, label_shapes = get("input_shapes"), get("label_shapes")
    for name, shapes, cols in (("input_shapes", input_shapes, feature_cols),
                               ("label_shapes", label_shapes, label_cols)):
        if shapes is not None:
            if len(shapes) != len(cols):
                raise ValueError("%s has %d shapes but there are %d columns (%s): give one per-row shape per column"
                                 % (name, len(shapes), len(cols), cols))
            for shape in shapes:
                if any(d < 1 and d != -1 for d in shape) or shape.count(-1) > 1:
                    raise ValueError("%s: %r is not a valid per-row shape (positive sizes, at most one -1)"
                                     % (name, shape))

    batch_size = _positive_int("batch_size", get("batch_size"))
    val_batch_size = _positive_int("val_batch_size", get("val_batch_size"), allow_none=True) or batch_size
    epochs = _positive_int("epochs", get("epochs"))
    train_steps = _positive_int("train_steps_per_epoch", get("train_steps_per_epoch"), allow_none=True)
    val_steps = _positive_int("validation_steps_per_epoch", get("validation_steps_per_epoch"), allow_none=True)
    if val_steps is not None and validation is None:
        raise ValueError("validation_steps_per_epoch is set but validation is not: set validation (a fraction or "
                         "a column name) or drop validation_steps_per_epoch")
    shuffle, buffer_rows = _shuffle(get("shuffle"), get("shuffle_buffer_size"))
    seed = get("random_seed")
    if seed is not None and not 0 <= seed < 2 ** 32:
        raise ValueError("random_seed must be in [0, 2**32), got %r" % seed)
    backward_passes = _positive_int("backward_passes_per_step", get("backward_passes_per_step"))

    run_id = get("run_id")
    if run_id is not None and not _RUN_ID.match(run_id):
        raise ValueError("run_id %r is not a valid run name: use letters, digits, '.', '_' and '-' (it becomes "
                         "the directory <store>/runs/<run_id>)" % run_id)
    verbose = get("verbose")
    if verbose not in (0, 1, 2):
        raise ValueError("verbose must be 0 (silent), 1 (progress) or 2 (also runner messages), got %r" % verbose)
    data_module = est.reader_data_module()
    if data_module == "petastorm":
        # Checked on the driver: where Petastorm cannot be imported (pyarrow >= 16) the message says
        # which stack it needs, before any data is prepared.
        from horovod_spark.data.petastorm_support import PetastormUnavailableError, require_petastorm
        try:
            require_petastorm()
        except PetastormUnavailableError as exc:
            raise ValueError(str(exc)) from exc
    from horovod_spark.data import data_modules
    if data_module not in data_modules():
        raise ValueError("data_module=%r is unknown; available: %s" % (data_module, data_modules()))
    inmemory_cache_all = bool(get("inmemory_cache_all"))
    if inmemory_cache_all and data_module != "arrow":
        raise ValueError("inmemory_cache_all=True needs data_module='arrow' (the reader that keeps row groups in "
                         "memory); data_module=%r reads from the files every epoch: pass one or the other"
                         % data_module)

    train_reader_options, val_reader_options = _reader_options(get, data_module)
    for param in ("continuous_cols", "categorical_cols"):
        strays = [c for c in get(param) or [] if c not in feature_cols]
        if strays:
            raise ValueError("%s: column(s) %s are not in feature_cols %s; Horovod's NVTabular data module took "
                             "them as a split of the feature columns: add them to feature_cols or drop them"
                             % (param, strays, feature_cols))
    partitions_per_process = _positive_int("partitions_per_process", get("partitions_per_process"), allow_none=True)

    callbacks = list(get("callbacks") or [])
    hooks = ("on_train_begin", "on_epoch_begin", "on_batch_end", "on_epoch_end", "on_train_end")
    for cb in callbacks:
        if not any(callable(getattr(cb, h, None)) for h in hooks):
            raise ValueError("callbacks: %r has none of the methods %s; a callback implements at least one"
                             % (cb, ", ".join(hooks)))
    nonfinite_loss = get("nonfinite_loss")
    if nonfinite_loss not in NONFINITE_LOSS:
        raise ValueError("nonfinite_loss=%r: pass 'raise' (a NaN or infinite loss stops the fit) or 'warn' (it is "
                         "reported and training goes on)" % (nonfinite_loss,))
    transformation_fn = get("transformation_fn")
    if transformation_fn is not None and not callable(transformation_fn):
        raise ValueError("transformation_fn must be a function(batch dict) -> batch dict, got %r"
                         % (transformation_fn,))
    edit_fields = check_edit_fields(get("transformation_edit_fields"))
    removed_fields = check_removed_fields(get("transformation_removed_fields"))
    if (edit_fields or removed_fields) and transformation_fn is None:
        raise ValueError("transformation_edit_fields / transformation_removed_fields declare what transformation_fn "
                         "changes, but no transformation_fn is set: pass one or drop them")
    if edit_fields or removed_fields:
        transformation_fn = DeclaredTransformation(transformation_fn, edit_fields, removed_fields)

    return FitConfig(store=store, num_proc=num_proc, feature_cols=feature_cols, label_cols=label_cols,
                     sample_weight_col=sample_weight_col, validation=validation, input_shapes=input_shapes,
                     label_shapes=label_shapes, batch_size=batch_size, val_batch_size=val_batch_size, epochs=epochs,
                     train_steps_per_epoch=train_steps, validation_steps_per_epoch=val_steps,
                     shuffle=bool(shuffle), shuffle_buffer_rows=buffer_rows, random_seed=seed,
                     backward_passes_per_step=backward_passes, run_id=run_id, verbose=verbose,
                     use_gpu=bool(est.getOrDefault("use_gpu")), data_module=data_module, callbacks=callbacks,
                     transformation_fn=transformation_fn, inmemory_cache_all=inmemory_cache_all,
                     nonfinite_loss=nonfinite_loss, validate_finite=bool(get("validate_finite")),
                     partitions_per_process=partitions_per_process, mp_start_method=get("mp_start_method"),
                     train_reader_options=train_reader_options,
                     val_reader_options=val_reader_options,
                     elastic=check_elastic(est), gpu_notice=verbose > 0 or est.isSet("use_gpu"))


def _shuffle(shuffle, shuffle_buffer_size):
    """(shuffle?, buffer rows or None) from ``shuffle`` (True/False or rows) and Horovod's
    ``shuffle_buffer_size`` (rows, used while shuffle is on)."""
    if not isinstance(shuffle, bool) and shuffle < 0:
        raise ValueError("shuffle=%r: pass True/False or a shuffle buffer size in rows (>= 0)" % shuffle)
    buffer_rows = None if isinstance(shuffle, bool) else shuffle
    if shuffle_buffer_size is None:
        return bool(shuffle), buffer_rows
    if shuffle_buffer_size < 0:
        raise ValueError("shuffle_buffer_size=%r: pass a shuffle buffer size in rows (>= 0)" % shuffle_buffer_size)
    if buffer_rows is not None and buffer_rows != shuffle_buffer_size:
        raise ValueError("shuffle=%r and shuffle_buffer_size=%r both give the shuffle buffer size: pass one"
                         % (shuffle, shuffle_buffer_size))
    if shuffle is False:
        return False, None
    return True, int(shuffle_buffer_size)


PETASTORM_POOLS = ("thread", "process", "dummy")


def _reader_options(get, data_module: str):
    """Horovod's reader knobs, checked; as options for the train and validation readers where the
    data module has a worker pool (Petastorm's). The Arrow reader reads ahead in one thread."""
    pool = get("reader_pool_type")
    if pool not in PETASTORM_POOLS:
        raise ValueError("reader_pool_type=%r: pass one of %s (Petastorm's reader pools)" % (pool, PETASTORM_POOLS))
    method = get("mp_start_method")
    if method is not None and method not in multiprocessing.get_all_start_methods():
        raise ValueError("mp_start_method=%r: pass one of %s" % (method, multiprocessing.get_all_start_methods()))
    workers = [_positive_int(name, get(name), allow_none=True)
               for name in ("train_reader_num_workers", "val_reader_num_workers")]
    if data_module != "petastorm":
        return {}, {}
    return tuple({"reader_pool_type": pool, **({"read_threads": n} if n else {})} for n in workers)


def check_columns(cfg: FitConfig, available: List[str], where: str) -> None:
    """Every selected column exists in ``available`` (the DataFrame's or the Parquet's columns)."""
    for param, cols in (("feature_cols", cfg.feature_cols), ("label_cols", cfg.label_cols),
                        ("sample_weight_col", [cfg.sample_weight_col] if cfg.sample_weight_col else []),
                        ("validation", [cfg.validation] if isinstance(cfg.validation, str) else [])):
        missing = [c for c in cols if c not in available]
        if missing:
            raise ValueError("%s: column(s) %s not in %s, whose columns are %s; fix %s"
                             % (param, missing, where, available, param))
