"""The type of each prediction column transform() appends, by Horovod's rules for TorchModel and
KerasModel: it follows the type its label column had in training.

| label column              | model output per row | prediction column                  |
| ------------------------- | -------------------- | ---------------------------------- |
| vector (VectorUDT)        | any                  | vector (DenseVector)               |
| array of numbers          | any                  | vector (DenseVector)               |
| integer (int, bigint ...) | one value            | that integer type, value rounded   |
| float / double            | one value            | that type                          |
| boolean                   | one value            | boolean (value != 0)               |
| scalar                    | several values       | vector (DenseVector)               |

A model whose label types were not recorded (one built directly around a trained network) takes
them from the label columns of the DataFrame it transforms, or else reads them as double.
"""
from typing import List, Optional, Sequence

VECTOR = "vector"
ARRAY = "array"
DEFAULT_LABEL_TYPE = "double"
_INTEGRAL = ("tinyint", "smallint", "int", "bigint")
_FRACTIONAL = ("float", "double")
_BOOLEAN = "boolean"
_ARROW_SCALARS = {"bool": _BOOLEAN, "int8": "tinyint", "int16": "smallint", "int32": "int", "int64": "bigint",
                  "float": "float", "float32": "float", "double": "double", "float64": "double"}


def label_type_of_spark(data_type) -> str:
    """'vector', 'array' or the scalar's Spark name for a label column's Spark type."""
    from pyspark.sql import types as T

    from horovod_spark.data.schema import is_vector_type
    if is_vector_type(data_type):
        return VECTOR
    if isinstance(data_type, T.ArrayType):
        return ARRAY
    name = data_type.simpleString()
    return name if name in _INTEGRAL + _FRACTIONAL + (_BOOLEAN,) else DEFAULT_LABEL_TYPE


def label_type_of_arrow(arrow_type) -> str:
    """The same for a column of prepared Parquet (vectors are written there as lists)."""
    import pyarrow as pa
    if pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type) or pa.types.is_fixed_size_list(arrow_type):
        return ARRAY
    return _ARROW_SCALARS.get(str(arrow_type), DEFAULT_LABEL_TYPE)


def label_types_of_parquet(store, path: str, label_cols: Sequence[str]) -> List[str]:
    """The label types of a fit's training data, read from its Parquet schema."""
    import pyarrow.dataset as ds
    schema = ds.dataset(store.fs_path(path), filesystem=store.filesystem(), format="parquet").schema
    return [label_type_of_arrow(schema.field(c).type) for c in label_cols]


def prediction_type(label_type: Optional[str], one_value: bool) -> str:
    """'vector', or the Spark scalar type of a prediction column (see the module's table)."""
    label_type = label_type or DEFAULT_LABEL_TYPE
    if label_type in (VECTOR, ARRAY) or not one_value:
        return VECTOR
    return label_type


def typed_column(column, kind: str):
    """The UDF's column (double for one value per row, else an array of floats) as ``kind``."""
    from pyspark.ml.functions import array_to_vector
    from pyspark.sql import functions as F
    if kind == VECTOR:
        return array_to_vector(column)
    if kind in _INTEGRAL:
        # Horovod rounds with Python's round(): half to even, which bround is.
        return F.bround(column).cast(kind)
    if kind == _BOOLEAN:
        return column != 0
    return column.cast(kind)

