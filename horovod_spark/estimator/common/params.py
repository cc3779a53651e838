"""Spark ML Params shared by every estimator (Torch now, Keras later) and by the fitted models.

Param names are the constructor's keyword names (``num_proc``, not ``numProc``) so that
``TorchEstimator(num_proc=2)``, ``est.getOrDefault("num_proc")`` and saved metadata agree.
``with_accessors`` adds pyspark-style ``getNumProc()`` / ``setNumProc(v)`` for every Param,
so adding a Param is one line instead of three.
"""
from pyspark.ml.param import Param, Params, TypeConverters

from . import converters as conv

# Accessor spellings that Horovod's estimators use and the rule below would not produce.
_CAMEL_AS_IN_HOROVOD = {"inmemory_cache_all": "InMemoryCacheAll", "shuffle_buffer_size": "ShufflingBufferSize",
                        "train_reader_num_workers": "TrainReaderNumWorker",
                        "val_reader_num_workers": "ValReaderNumWorker"}


def _camel(name: str) -> str:
    if name in _CAMEL_AS_IN_HOROVOD:
        return _CAMEL_AS_IN_HOROVOD[name]
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _getter(name):
    def get(self):
        return self.getOrDefault(name)
    get.__name__ = "get" + _camel(name)
    get.__doc__ = "Value of the ``%s`` param (or its default)." % name
    return get


def _setter(name):
    def set_(self, value):
        return self._set(**{name: value})
    set_.__name__ = "set" + _camel(name)
    set_.__doc__ = "Set the ``%s`` param; returns self." % name
    return set_


def with_accessors(cls):
    """Class decorator: ``getX``/``setX`` for each Param declared on ``cls`` (not inherited ones,
    which their own class already decorated), unless the class defines them itself."""
    for name, value in list(vars(cls).items()):
        if isinstance(value, Param):
            for accessor in (_getter(name), _setter(name)):
                if accessor.__name__ not in vars(cls):
                    setattr(cls, accessor.__name__, accessor)
    return cls


def _param(name, doc, converter=TypeConverters.identity):
    return Param(Params._dummy(), name, doc, typeConverter=converter)


@with_accessors
class ColumnParams(Params):
    """What both estimators and models need to map DataFrame columns to model inputs/outputs."""
    feature_cols = _param("feature_cols", "feature column names, in the order the model takes them as inputs",
                          conv.to_column_list)
    label_cols = _param("label_cols", "label column names, one per model output", conv.to_column_list)
    input_shapes = _param("input_shapes", "per-row shape of each feature (batch dimension excluded); default: "
                          "(n,) for arrays/vectors of n values and (1,) for scalars", conv.to_shapes)
    run_id = _param("run_id", "name of the training run under <store>/runs/; reusing one resumes it",
                    TypeConverters.toString)

    def __init__(self):
        super().__init__()
        self._setDefault(feature_cols=None, label_cols=None, input_shapes=None, run_id=None)


@with_accessors
class EstimatorParams(ColumnParams):
    num_proc = _param("num_proc", "number of ranks (Spark barrier tasks); default: Spark's default parallelism",
                      conv.to_optional_int)
    model = _param("model", "the model to train (a copy is trained; the original is left untouched)")
    optimizer = _param("optimizer", "optimizer constructed on the model's parameters")
    loss = _param("loss", "loss function(outputs, labels), or a list with one per label column")
    metrics = _param("metrics", "metric functions(outputs, labels) or names ('accuracy', 'mse', 'mae')",
                     conv.to_list)
    label_shapes = _param("label_shapes", "per-row shape of each label (batch dimension excluded)", conv.to_shapes)
    sample_weight_col = _param("sample_weight_col", "column of per-row loss weights (the loss must then return "
                               "one value per row)", TypeConverters.toString)
    validation = _param("validation", "fraction of rows held out for validation, or the name of a boolean/"
                        "integer column marking validation rows", conv.to_validation)
    batch_size = _param("batch_size", "rows per training batch on each rank", TypeConverters.toInt)
    val_batch_size = _param("val_batch_size", "rows per validation batch (default: batch_size)",
                            conv.to_optional_int)
    epochs = _param("epochs", "number of passes over the training data", TypeConverters.toInt)
    train_steps_per_epoch = _param("train_steps_per_epoch", "batches per epoch on each rank (default: enough "
                                   "for each rank to see its whole shard)", conv.to_optional_int)
    validation_steps_per_epoch = _param("validation_steps_per_epoch", "validation batches per rank (default: "
                                        "all validation rows, each exactly once)", conv.to_optional_int)
    shuffle = _param("shuffle", "True/False, or a shuffle buffer size in rows", conv.to_shuffle)
    random_seed = _param("random_seed", "seed for shuffling, the validation split and the framework's RNG "
                         "(default: drawn once per run and kept for its resumption)", conv.to_optional_int)
    gradient_compression = _param("gradient_compression", "gradient compression for the allreduce: None, "
                                  "'fp16', or a framework Compression class")
    backward_passes_per_step = _param("backward_passes_per_step", "batches whose gradients are accumulated "
                                      "locally before one allreduce and optimizer step", TypeConverters.toInt)
    store = _param("store", "Store (or path/URL) for prepared data, checkpoints and logs; must be reachable "
                   "from the driver and every executor", conv.to_store)
    callbacks = _param("callbacks", "objects with optional on_train_begin/on_epoch_begin/on_batch_end/"
                       "on_epoch_end/on_train_end methods, called on every rank", conv.to_list)
    transformation_fn = _param("transformation_fn", "function(batch dict of numpy arrays) -> batch dict, "
                               "applied by the reader to every training and validation batch")
    verbose = _param("verbose", "0: silent; 1: progress bar and a line per epoch; 2: also runner messages",
                     TypeConverters.toInt)
    use_gpu = _param("use_gpu", "train on the rank's GPU when it has one", TypeConverters.toBoolean)
    data_module = _param("data_module", "reader of the prepared data: 'arrow' (built in) or 'petastorm' (older "
                        "stack only: pyarrow < 16)",
                         TypeConverters.toString)
    backend = _param("backend", "how the ranks run: a horovod_spark.spark.common.backend.SparkBackend (num_proc and "
                     "horovod_spark.run settings) or another object with run(fn, args, kwargs, env) and "
                     "num_processes(); default: horovod_spark.run with num_proc")
    inmemory_cache_all = _param("inmemory_cache_all", "keep the prepared data each rank reads in its memory while it "
                                "fits, so that epochs after the first (and validation) read no files",
                                TypeConverters.toBoolean)
    nonfinite_loss = _param("nonfinite_loss", "what a NaN or infinite training loss does: 'raise' stops the fit "
                            "with an error naming the epoch and step, 'warn' warns once per epoch and goes on",
                            TypeConverters.toString)
    validate_finite = _param("validate_finite", "before training, check with one Spark job that the feature and "
                             "label columns hold no NaN or infinite value, and fail naming the columns if they do",
                             TypeConverters.toBoolean)
    loss_weights = _param("loss_weights", "with several label columns, one weight per column's loss: the training "
                          "loss is their weighted sum (default: all 1)")
    shuffle_buffer_size = _param("shuffle_buffer_size", "Horovod's name for a shuffle buffer size in rows "
                                 "(shuffle=<rows> here); 0 shuffles the order of the row groups only",
                                 conv.to_optional_int)
    partitions_per_process = _param("partitions_per_process", "Parquet files the prepared training data is written "
                                    "as, per rank (default: chosen from the data's size)", conv.to_optional_int)
    train_reader_num_workers = _param("train_reader_num_workers", "data_module='petastorm': threads (or processes) "
                                      "of Petastorm's training reader pool; the Arrow reader needs none",
                                      conv.to_optional_int)
    val_reader_num_workers = _param("val_reader_num_workers", "data_module='petastorm': threads (or processes) of "
                                    "Petastorm's validation reader pool", conv.to_optional_int)
    reader_pool_type = _param("reader_pool_type", "data_module='petastorm': Petastorm's reader pool, 'thread' or "
                              "'process'", TypeConverters.toString)
    mp_start_method = _param("mp_start_method", "start method of Python's multiprocessing on every rank ('spawn', "
                             "'fork', 'forkserver'), set before training", TypeConverters.toString)
    continuous_cols = _param("continuous_cols", "Horovod's NVTabular data module's continuous feature columns: "
                             "accepted and checked to be among feature_cols; no data module here reads it",
                             conv.to_column_list)
    categorical_cols = _param("categorical_cols", "Horovod's NVTabular data module's categorical feature columns: "
                              "accepted and checked to be among feature_cols; no data module here reads it",
                              conv.to_column_list)
    compress_sparse_cols = _param("compress_sparse_cols", "Horovod's choice to store sparse vector columns "
                                  "compressed in the prepared data; here they are always prepared as fixed-length "
                                  "arrays, the dense tensors training reads either way", TypeConverters.toBoolean)
    transformation_edit_fields = _param("transformation_edit_fields", "fields transformation_fn adds or changes, as "
                                        "Horovod's (name, numpy dtype, shape, is_nullable) tuples: every batch it "
                                        "returns is checked to have them")
    transformation_removed_fields = _param("transformation_removed_fields", "fields transformation_fn drops: every "
                                           "batch it returns is checked not to have them")
    elastic = _param("elastic", "keep fitting when an executor is lost: the ranks run under run_elastic, commit "
                     "at each epoch's end, and after a loss the survivors redo the interrupted epoch, re-sharded "
                     "over the ranks left (see docs/elastic.md)", TypeConverters.toBoolean)
    min_num_proc = _param("min_num_proc", "elastic fits: the fewest ranks the fit goes on with (default 1)",
                          conv.to_optional_int)
    max_num_proc = _param("max_num_proc", "elastic fits: the most ranks the fit grows back to when Spark reruns "
                          "a lost task (default num_proc)", conv.to_optional_int)

    def __init__(self):
        super().__init__()
        self._setDefault(num_proc=None, model=None, optimizer=None, loss=None, metrics=[], label_shapes=None,
                         sample_weight_col=None, validation=None, batch_size=32, val_batch_size=None, epochs=1,
                         train_steps_per_epoch=None, validation_steps_per_epoch=None, shuffle=True,
                         random_seed=None, gradient_compression=None, backward_passes_per_step=1, store=None,
                         callbacks=[], transformation_fn=None, verbose=1, use_gpu=True, data_module="arrow",
                         backend=None, inmemory_cache_all=False, nonfinite_loss="raise", validate_finite=False,
                         loss_weights=None, shuffle_buffer_size=None, partitions_per_process=None,
                         train_reader_num_workers=None, val_reader_num_workers=None, reader_pool_type="thread",
                         mp_start_method=None, continuous_cols=None, categorical_cols=None,
                         elastic=False, min_num_proc=None, max_num_proc=None, compress_sparse_cols=False,
                         transformation_edit_fields=None, transformation_removed_fields=None)


@with_accessors
class ModelParams(ColumnParams):
    """Params of a fitted model. All are JSON values, saved as Spark ML metadata; the framework
    model itself is saved beside them as bytes."""
    model = _param("model", "the trained framework model (saved as bytes beside the metadata, not as JSON)")
    output_cols = _param("output_cols", "names of the prediction columns transform() appends, one per label "
                         "(default: <label>__output)", conv.to_column_list)
    history = _param("history", "per-epoch metrics of the fit: {name: [value per epoch]}")
    output_shapes = _param("output_shapes", "per-row shape of each model output, as seen in training",
                           conv.to_shapes)

    def __init__(self):
        super().__init__()
        self._setDefault(model=None, output_cols=None, history={}, output_shapes=None)

    def resolved_output_cols(self):
        given = self.getOrDefault("output_cols")
        labels = self.getOrDefault("label_cols") or []
        return list(given) if given else ["%s__output" % c for c in labels]


# Parameters of horovod.spark's estimators that this project does not have, and what to do
# instead, so a ported script learns it from the error rather than from Python's bare
# "unexpected keyword argument".
PARAMS_ONLY_IN_HOROVOD = {
    "feature_columns": "it is feature_cols here",
    "label_columns": "it is label_cols here",
}


def refuse_unknown_params(owner: str, unknown: dict) -> None:
    """ValueError naming each keyword ``owner`` does not take, with the advice for Horovod's."""
    if not unknown:
        return
    lines = ["%s=: %s" % (k, PARAMS_ONLY_IN_HOROVOD.get(k, "not a parameter of %s" % owner)) for k in sorted(unknown)]
    raise ValueError("%s does not take %s" % (owner, "; ".join(lines)))

