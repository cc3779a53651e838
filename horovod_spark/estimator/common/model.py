"""The fitted-model base class: a Spark ML Model whose transform() runs the framework model on
Arrow batches in the executors, and which saves/loads like any Spark ML stage.

A framework subclass supplies ``framework``, ``serialize(model) -> bytes``,
``deserialize(bytes) -> model`` and two importable worker functions, ``_loader`` and
``_predictor`` (see inference.make_predict_udf).
"""
import hashlib
import math

from pyspark.ml import Model
from pyspark.ml.util import MLReadable, MLWritable
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from . import classifier_columns, inference, output_columns, spark_compat
from .params import ModelParams
from .persistence import HorovodModelReader, HorovodModelWriter

_NON_JSON_PARAMS = ("model",)


class HorovodModel(Model, ModelParams, MLReadable, MLWritable):
    """A framework's model declares its own Params (``declare_param``) and supplies the hooks below;
    its keywords, setParams and accessors come from the declarations."""
    framework = None
    # Horovod's models name their column Params feature_columns / label_columns.
    keyword_aliases = {"feature_columns": "feature_cols", "label_columns": "label_cols"}

    # -- framework hooks -----------------------------------------------------------------------------
    @staticmethod
    def serialize(model) -> bytes:
        raise NotImplementedError

    @staticmethod
    def deserialize(data: bytes):
        raise NotImplementedError

    _loader = None      # importable function(bytes) -> model, run in Spark's Python workers
    _predictor = None   # importable function(model, [numpy inputs]) -> [numpy outputs]

    # -- the model object --------------------------------------------------------------------------
    def getModel(self):
        """The trained framework model (e.g. a torch.nn.Module, on CPU, in eval mode)."""
        return self.getOrDefault("model")

    def setModel(self, model):
        return self._set(model=model)

    def getFeatureColumns(self):
        """``feature_cols`` under the name Horovod's models give it."""
        return self.getOrDefault("feature_cols")

    def setFeatureColumns(self, value):
        return self._set(feature_cols=value)

    def getLabelColumns(self):
        """``label_cols`` under the name Horovod's models give it."""
        return self.getOrDefault("label_cols")

    def setLabelColumns(self, value):
        return self._set(label_cols=value)

    def getHistory(self):
        """{metric: [value per epoch]}: loss and metrics, and val_* when there was validation data."""
        return self.getOrDefault("history")

    def model_bytes(self) -> bytes:
        model = self.getOrDefault("model")
        if model is None:
            raise ValueError("this %s has no model: set one with setModel()" % type(self).__name__)
        return self.serialize(model)

    def set_model_bytes(self, data: bytes) -> None:
        self._set(model=self.deserialize(data))

    def predict_columns(self, columns):
        """The model's outputs (numpy arrays, rows first, one per output) for feature arrays (one per
        feature column, rows first), computed in this process as transform() computes them in Spark's
        workers: same input shapes, same framework predictor."""
        from .shapes import model_inputs
        return type(self)._predictor(self.getModel(), model_inputs(columns, self._input_shapes()))

    def json_params(self):
        return {p.name: v for p, v in self._paramMap.items() if p.name not in _NON_JSON_PARAMS}

    # -- transform ---------------------------------------------------------------------------------
    def _transform(self, dataset: DataFrame) -> DataFrame:
        features = list(self.getOrDefault("feature_cols") or [])
        if not features:
            raise ValueError("feature_cols is not set on this model: set the feature column names")
        fields = {f.name: f.dataType for f in dataset.schema.fields}
        missing = [c for c in features if c not in fields]
        if missing:
            raise ValueError("feature_cols %s are not in the DataFrame (columns: %s)" % (missing, dataset.columns))
        outputs = self.resolved_output_cols()
        if not outputs:
            raise ValueError("neither output_cols nor label_cols is set: set output_cols to name the predictions")
        classification = classifier_columns.check_mode(self.getOrDefault("classification"))
        extra = classifier_columns.column_names(self) if classification else []
        clash = [c for c in outputs + extra if c in fields]
        if clash:
            raise ValueError("output column(s) %s already exist in the DataFrame: drop them or set %s to other names"
                             % (clash, "output_cols / " + " / ".join(classifier_columns.COLUMN_PARAMS)
                                if extra else "output_cols"))

        # Fields named as the feature columns: the UDF's errors name them.
        inputs = F.struct(*[_model_input(c, fields[c]).alias(c) for c in features])
        data = self.model_bytes()
        key = "%s-%s" % (self.uid, hashlib.sha256(data).hexdigest()[:20])
        shapes = self.getOrDefault("output_shapes") or self._probe_output_shapes(dataset, inputs, key, data)
        if len(shapes) != len(outputs):
            raise ValueError("the model has %d output(s) but %d output column(s) are named (%s): name one per output"
                             % (len(shapes), len(outputs), outputs))
        if classification and len(outputs) != 1:
            raise ValueError("classification=%r adds Spark ML's classifier columns for a model with one output, but "
                             "this one has %d (%s): unset classification" % (classification, len(outputs), outputs))
        kinds = [output_columns.prediction_type(t, math.prod(s) == 1)
                 for t, s in zip(self._label_types(fields, len(outputs)), shapes)]
        udf_kinds = [inference.FLOATS if k == output_columns.VECTOR else inference.DOUBLE for k in kinds]
        udf_kinds += [inference.DOUBLES, inference.DOUBLES, inference.DOUBLE] if extra else []
        names = outputs + extra
        udf_types = [T.DoubleType() if k == inference.DOUBLE else
                     T.ArrayType(T.DoubleType() if k == inference.DOUBLES else T.FloatType(), False) for k in udf_kinds]
        return_type = udf_types[0] if len(names) == 1 else spark_compat.udf_struct_type(names, udf_types)
        udf = inference.make_predict_udf(key, data, type(self)._loader, type(self)._predictor,
                                         self._input_shapes(), udf_kinds, names, return_type, classification)
        # The classifier columns: two vectors and the class index, as Spark ML's classifiers give them.
        kinds += [output_columns.VECTOR, output_columns.VECTOR, "double"] if extra else []
        if len(names) == 1:
            return dataset.withColumn(outputs[0], output_columns.typed_column(udf(inputs), kinds[0]))
        holder = "__horovod_spark_outputs_%s" % key[-8:]
        with_struct = dataset.withColumn(holder, udf(inputs))
        return with_struct.withColumns({name: output_columns.typed_column(F.col(holder)[name], kind)
                                        for name, kind in zip(names, kinds)}).drop(holder)

    def _label_types(self, fields, count):
        """Per output, the type its label column had in training (recorded by the fit), else in the
        DataFrame being transformed; None where neither tells."""
        recorded = self.getOrDefault("label_types")
        if recorded and len(recorded) == count:
            return list(recorded)
        labels = list(self.getOrDefault("label_cols") or [])
        return [output_columns.label_type_of_spark(fields[labels[i]]) if i < len(labels) and labels[i] in fields
                else None for i in range(count)]

    def _probe_output_shapes(self, dataset, inputs, key, data):
        """Output shapes of a model that was not fitted here (so none were recorded): run it on one row."""
        from .shapes import model_inputs, per_row_shape
        from .spark_compat import collect_arrow
        # collect_arrow: DataFrame.toArrow() is pyspark 4 only; the older stack (3.5) collects otherwise.
        table = collect_arrow(dataset.select(inputs.alias("x")).limit(1))
        if table.num_rows == 0:
            raise ValueError("cannot tell the model's output shapes from an empty DataFrame; set output_shapes")
        struct = table.column("x").combine_chunks()
        columns = [inference.column_to_numpy(a, f.name) for a, f in zip(struct.flatten(), struct.type)]
        model = inference.cached_model(key, data, type(self)._loader)
        results = type(self)._predictor(model, model_inputs(columns, self._input_shapes()))
        shapes = [per_row_shape(r) for r in results]
        self._set(output_shapes=shapes)
        return shapes

    def _input_shapes(self):
        """Per-row shapes the features take for the model (None: as stored). A framework may infer
        them from the model where input_shapes is not set."""
        return self.getOrDefault("input_shapes")

    # -- persistence ---------------------------------------------------------------------------------
    def write(self):
        return HorovodModelWriter(self)

    @classmethod
    def read(cls):
        return HorovodModelReader(cls)


def _model_input(name: str, data_type):
    from pyspark.ml.functions import vector_to_array

    from horovod_spark.data.schema import column, is_vector_type, scalar_dtype
    if is_vector_type(data_type):
        # float32, as prepare_data writes vectors for training: the model sees the same values. A
        # null vector stays null (vector_to_array would fail the task with a JVM error) and the
        # UDF names the column.
        return F.when(column(name).isNotNull(), vector_to_array(column(name), "float32"))
    if scalar_dtype(data_type) is not None:
        return column(name)
    if isinstance(data_type, T.ArrayType) and scalar_dtype(data_type.elementType) is not None:
        return column(name)
    raise ValueError("feature column %r has type %s, which transform() cannot feed to the model: use numeric "
                     "scalars, arrays of numbers or pyspark.ml vectors" % (name, data_type.simpleString()))
