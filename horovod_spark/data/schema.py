"""Which Spark column types prepare_data can write for training, and as what."""
from dataclasses import dataclass
from typing import Dict, List

from pyspark.sql import types as T

# Spark scalar type -> numpy dtype name of the written values.
_SCALARS = {
    T.BooleanType: "bool", T.ByteType: "int8", T.ShortType: "int16", T.IntegerType: "int32",
    T.LongType: "int64", T.FloatType: "float32", T.DoubleType: "float64",
}
_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)


@dataclass
class ColumnSpec:
    """A selected column as found in the schema; shape/sparsity are filled in by the data scan."""
    name: str
    role: str
    kind: str        # "scalar", "array" or "vector"
    dtype: str
    spark_type: str
    element_nullable: bool = False


def column(name: str):
    """F.col for a column name as given: a dot in it is part of the name, not a struct field access."""
    from pyspark.sql import functions as F
    return F.col("`%s`" % name.replace("`", "``"))


def is_vector_type(data_type) -> bool:
    # Both ml and the older mllib VectorUDT; vector_to_array handles either.
    return isinstance(data_type, T.UserDefinedType) and type(data_type).__name__ == "VectorUDT"


def scalar_dtype(data_type):
    for spark_type, dtype in _SCALARS.items():
        if isinstance(data_type, spark_type):
            return dtype
    return None


def is_integral_or_boolean(data_type) -> bool:
    return isinstance(data_type, _INTEGRAL + (T.BooleanType,))


def inspect_columns(schema: T.StructType, roles: Dict[str, str], vector_dtype: str) -> List[ColumnSpec]:
    """Specs for the selected columns, in ``roles`` order. Raises ValueError naming every missing
    column, or the first unsupported one with the conversion that would make it usable."""
    fields = {f.name: f for f in schema.fields}
    missing = [c for c in roles if c not in fields]
    if missing:
        raise ValueError("column(s) %s not in the DataFrame; its columns are %s. Fix the column names passed "
                         "as feature_cols/label_cols/sample_weight_col." % (missing, schema.names))
    specs = []
    for name, role in roles.items():
        data_type = fields[name].dataType
        spec = _spec_for(name, role, data_type, vector_dtype)
        if role == "sample_weight" and spec.kind != "scalar":
            raise ValueError("sample_weight_col %r must be a numeric scalar column, not %s" % (name, spec.spark_type))
        specs.append(spec)
    return specs


def _spec_for(name: str, role: str, data_type, vector_dtype: str) -> ColumnSpec:
    type_name = data_type.simpleString()
    dtype = scalar_dtype(data_type)
    if dtype is not None:
        return ColumnSpec(name, role, "scalar", dtype, type_name)
    if is_vector_type(data_type):
        return ColumnSpec(name, role, "vector", vector_dtype, "vector")
    if isinstance(data_type, T.ArrayType):
        element = scalar_dtype(data_type.elementType)
        if element is not None:
            return ColumnSpec(name, role, "array", element, type_name, data_type.containsNull)
        raise ValueError("column %r has type %s: only arrays of numbers or booleans are supported (one level, "
                         "fixed length). Flatten nested arrays, or assemble the values into a vector "
                         "(pyspark.ml.feature.VectorAssembler)." % (name, type_name))
    raise ValueError("column %r has unsupported type %s. %s" % (name, type_name, _fix_for(data_type)))


def _fix_for(data_type) -> str:
    if isinstance(data_type, (T.StringType, T.VarcharType, T.CharType)):
        return ("Encode strings as numbers first, e.g. pyspark.ml.feature.StringIndexer (and OneHotEncoder), "
                "or cast to a numeric type if they hold numbers.")
    if isinstance(data_type, T.DecimalType):
        return "Cast it to double (col.cast('double')) or float."
    if isinstance(data_type, (T.DateType, T.TimestampType, T.TimestampNTZType)):
        return "Convert it to a number first, e.g. unix_timestamp(col) or datediff(col, lit('1970-01-01'))."
    if isinstance(data_type, T.StructType):
        return ("Nested structs are not supported: select the struct's numeric fields as separate columns "
                "(col('s.field')), or assemble them into a vector with VectorAssembler.")
    if isinstance(data_type, T.MapType):
        return "Maps are not supported: extract the needed keys as numeric columns (col('m')['key'])."
    if isinstance(data_type, T.BinaryType):
        return "Decode binary data (images, tensors) into a numeric array column first."
    return "Supported: numeric and boolean scalars, arrays of them, and pyspark.ml.linalg vectors."
