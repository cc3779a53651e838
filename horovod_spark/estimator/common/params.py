"""The Spark ML Params every estimator and every fitted model shares, each declared once.

``ColumnParams`` (estimators and models), ``EstimatorParams`` (every estimator) and ``ModelParams``
(every fitted model) declare them with their docs, converters and defaults; a framework's
estimator or model class declares only its own (``declare_param``) and gets its keywords,
``setParams`` and accessors from them (declared_params.py).
"""
from pyspark.ml.param import TypeConverters

from . import converters as conv
from .declared_params import KeywordParams, declare_param
from .mlflow_settings import tracking_mode


class ColumnParams(KeywordParams):
    """What both estimators and models need to map DataFrame columns to model inputs/outputs."""
    feature_cols = declare_param("feature_cols", "feature column names, in the order the model takes them as inputs",
                                 conv.to_column_list)
    label_cols = declare_param("label_cols", "label column names, one per model output", conv.to_column_list)
    input_shapes = declare_param("input_shapes", "per-row shape of each feature (batch dimension excluded); default: "
                                 "(n,) for arrays/vectors of n values and (1,) for scalars", conv.to_shapes)
    run_id = declare_param("run_id", "name of the training run under <store>/runs/; reusing one resumes it",
                           TypeConverters.toString)
    classification = declare_param("classification", "add Spark ML's classifier columns (raw_prediction_col, "
                                   "probability_col, prediction_col) beside the model's own prediction column, for "
                                   "Spark's evaluators and tuning: 'logits' when the model outputs unnormalised "
                                   "scores, 'probabilities' when it ends with a softmax or sigmoid; None: off",
                                   TypeConverters.toString)
    raw_prediction_col = declare_param("raw_prediction_col", "with classification: the column of raw scores",
                                       TypeConverters.toString, default="rawPrediction")
    probability_col = declare_param("probability_col", "with classification: the column of class probabilities",
                                    TypeConverters.toString, default="probability")
    prediction_col = declare_param("prediction_col", "with classification: the column of the predicted class index",
                                   TypeConverters.toString, default="prediction")


class EstimatorParams(ColumnParams):
    """What every estimator takes, whatever its framework."""
    num_proc = declare_param("num_proc", "number of ranks (Spark barrier tasks); default: Spark's default parallelism",
                             conv.to_optional_int)
    model = declare_param("model", "the model to train (a copy is trained; the original is left untouched)")
    optimizer = declare_param("optimizer", "optimizer constructed on the model's parameters")
    loss = declare_param("loss", "loss function(outputs, labels), or a list with one per label column")
    metrics = declare_param("metrics", "metric functions(outputs, labels) or names ('accuracy', 'mse', 'mae')",
                            conv.to_list, default=[])
    label_shapes = declare_param("label_shapes", "per-row shape of each label (batch dimension excluded)",
                                 conv.to_shapes)
    sample_weight_col = declare_param("sample_weight_col", "column of per-row loss weights: each row's loss is "
                                      "multiplied by its weight, then averaged over the batch's rows",
                                      TypeConverters.toString)
    validation = declare_param("validation", "fraction of rows held out for validation, or the name of a "
                               "boolean/integer column marking validation rows", conv.to_validation)
    batch_size = declare_param("batch_size", "rows per training batch on each rank", TypeConverters.toInt, default=32)
    val_batch_size = declare_param("val_batch_size", "rows per validation batch (default: batch_size)",
                                   conv.to_optional_int)
    epochs = declare_param("epochs", "number of passes over the training data", TypeConverters.toInt, default=1)
    train_steps_per_epoch = declare_param("train_steps_per_epoch", "batches per epoch on each rank (default: enough "
                                          "for each rank to see its whole shard)", conv.to_optional_int)
    validation_steps_per_epoch = declare_param("validation_steps_per_epoch", "validation batches per rank (default: "
                                               "all validation rows, each exactly once)", conv.to_optional_int)
    shuffle = declare_param("shuffle", "True/False, or a shuffle buffer size in rows", conv.to_shuffle, default=True)
    random_seed = declare_param("random_seed", "seed for shuffling, the validation split and the framework's RNG "
                                "(default: drawn once per run and kept for its resumption)", conv.to_optional_int)
    gradient_compression = declare_param("gradient_compression", "gradient compression for the allreduce: None, "
                                         "'fp16', or a framework Compression class")
    backward_passes_per_step = declare_param("backward_passes_per_step", "batches whose gradients are accumulated "
                                             "locally before one allreduce and optimizer step",
                                             TypeConverters.toInt, default=1)
    store = declare_param("store", "Store (or path/URL) for prepared data, checkpoints and logs; must be reachable "
                          "from the driver and every executor", conv.to_store)
    callbacks = declare_param("callbacks", "objects with optional "
                              "on_train_begin/on_epoch_begin/on_batch_end/on_epoch_end/on_train_end methods, called on "
                              "every rank", conv.to_list, default=[])
    transformation_fn = declare_param("transformation_fn", "function(batch dict of numpy arrays) -> batch dict, "
                                      "applied by the reader to every training and validation batch")
    verbose = declare_param("verbose", "0: silent; 1: progress bar and a line per epoch; 2: also runner messages",
                            TypeConverters.toInt, default=1)
    use_gpu = declare_param("use_gpu", "train on the rank's GPU when it has one",
                            TypeConverters.toBoolean, default=True)
    data_module = declare_param("data_module", "reader of the prepared data: 'arrow' (built in) or 'petastorm' (older "
                                "stack only: pyarrow < 16)", TypeConverters.toString, default="arrow")
    backend = declare_param("backend", "how the ranks run: a horovod_spark.spark.common.backend.SparkBackend (num_proc "
                            "and horovod_spark.run settings) or another object with run(fn, args, kwargs, env) and "
                            "num_processes(); default: horovod_spark.run with num_proc")
    inmemory_cache_all = declare_param("inmemory_cache_all", "keep the prepared data each rank reads in its memory "
                                       "while it fits, so that epochs after the first (and validation) read no files",
                                       TypeConverters.toBoolean, default=False)
    nonfinite_loss = declare_param("nonfinite_loss", "what a NaN or infinite training loss, or weights that hold "
                                   "such values at an epoch's end, do: 'raise' stops the fit with an error naming the "
                                   "epoch and step, 'warn' warns once per epoch and goes on",
                                   TypeConverters.toString, default="raise")
    validate_finite = declare_param("validate_finite", "before training, check with one Spark job that the feature and "
                                    "label columns hold no NaN or infinite value, and fail naming the columns if they "
                                    "do", TypeConverters.toBoolean, default=False)
    loss_weights = declare_param("loss_weights", "with several label columns, one weight per column's loss: the "
                                 "training loss is their weighted sum (default: all 1)")
    shuffle_buffer_size = declare_param("shuffle_buffer_size", "Horovod's name for a shuffle buffer size in rows "
                                        "(shuffle=<rows> here); 0 shuffles the order of the row groups only",
                                        conv.to_optional_int)
    partitions_per_process = declare_param("partitions_per_process", "Parquet files the prepared training data is "
                                           "written as, per rank (default: chosen from the data's size)",
                                           conv.to_optional_int)
    train_reader_num_workers = declare_param("train_reader_num_workers", "data_module='petastorm': threads (or "
                                             "processes) of Petastorm's training reader pool; the Arrow reader needs "
                                             "none", conv.to_optional_int)
    val_reader_num_workers = declare_param("val_reader_num_workers", "data_module='petastorm': threads (or processes) "
                                           "of Petastorm's validation reader pool", conv.to_optional_int)
    reader_pool_type = declare_param("reader_pool_type", "data_module='petastorm': Petastorm's reader pool, 'thread' "
                                     "or 'process'", TypeConverters.toString, default="thread")
    mp_start_method = declare_param("mp_start_method", "start method of Python's multiprocessing on every rank "
                                    "('spawn', 'fork', 'forkserver'), set before training", TypeConverters.toString)
    continuous_cols = declare_param("continuous_cols", "Horovod's NVTabular data module's continuous feature columns: "
                                    "accepted and checked to be among feature_cols; no data module here reads it",
                                    conv.to_column_list)
    categorical_cols = declare_param("categorical_cols", "Horovod's NVTabular data module's categorical feature "
                                     "columns: accepted and checked to be among feature_cols; no data module here "
                                     "reads it", conv.to_column_list)
    compress_sparse_cols = declare_param("compress_sparse_cols", "Horovod's choice to store sparse vector columns "
                                         "compressed in the prepared data; here they are always prepared as "
                                         "fixed-length arrays, the dense tensors training reads either way",
                                         TypeConverters.toBoolean, default=False)
    transformation_edit_fields = declare_param("transformation_edit_fields", "fields transformation_fn adds or "
                                               "changes, as Horovod's (name, numpy dtype, shape, is_nullable) tuples: "
                                               "every batch it returns is checked to have them")
    transformation_removed_fields = declare_param("transformation_removed_fields", "fields transformation_fn drops: "
                                                  "every batch it returns is checked not to have them")
    elastic = declare_param("elastic", "keep fitting when an executor is lost: the ranks run under run_elastic, commit "
                            "at each epoch's end, and after a loss the survivors redo the interrupted epoch, "
                            "re-sharded over the ranks left (see docs/elastic.md)",
                            TypeConverters.toBoolean, default=False)
    min_num_proc = declare_param("min_num_proc", "elastic fits: the fewest ranks the fit goes on with (default 1)",
                                 conv.to_optional_int)
    max_num_proc = declare_param("max_num_proc", "elastic fits: the most ranks the fit grows back to when Spark reruns "
                                 "a lost task (default num_proc)", conv.to_optional_int)

    mlflow_tracking = declare_param("mlflow_tracking", "log the fit to MLflow from the driver (Params, per-epoch "
                                    "metrics, tags, the model as a pyfunc model; docs/mlflow.md): 'auto' when an "
                                    "MLflow run is active, True/'on' always (in a run of its own when none is "
                                    "active; needs MLflow installed), False/'off' never", tracking_mode,
                                    default="auto")


class ModelParams(ColumnParams):
    """Params of a fitted model. All are JSON values, saved as Spark ML metadata; the framework
    model itself is saved beside them as bytes."""
    model = declare_param("model", "the trained framework model (saved as bytes beside the metadata, not as JSON)")
    output_cols = declare_param("output_cols", "names of the prediction columns transform() appends, one per label "
                                "(default: <label>__output)", conv.to_column_list)
    history = declare_param("history", "per-epoch metrics of the fit: {name: [value per epoch]}", default={})
    output_shapes = declare_param("output_shapes", "per-row shape of each model output, as seen in training",
                                  conv.to_shapes)
    label_types = declare_param("label_types", "per label column, its type in training ('vector', 'array' or a "
                                "scalar type such as 'int' or 'double'): the type of its prediction column follows it, "
                                "as in Horovod (docs/estimator.md)", conv.to_column_list)
    fit_params = declare_param("fit_params", "the Params of the estimator fit that made this model: {name: value}, "
                               "objects (optimizer, loss, store ...) by their repr", default={})

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

