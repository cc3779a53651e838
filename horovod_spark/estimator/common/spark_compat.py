"""The two pyspark calls the fitted models need that only pyspark 4 offers, with a fallback for the
older stack (pyspark 3.5 + pyarrow 14, where Petastorm runs; see requirements-legacy.in).

pyspark >= 4.1 hands Arrow arrays to a UDF (``arrow_udf``) and returns a DataFrame as an Arrow
table (``DataFrame.toArrow``). pyspark 3.5 has neither, so there the same Arrow-in/Arrow-out
function is wrapped in a pandas UDF: pandas batches are turned back into Arrow on the way in and
out. That costs a conversion per batch, not per row, and keeps one code path for the model.
"""
from typing import Callable, Iterator

import pyarrow as pa


def has_arrow_udf() -> bool:
    import pyspark.sql.functions as F
    return hasattr(F, "arrow_udf") and hasattr(F, "ArrowUDFType")


def scalar_iter_arrow_udf(fn: Callable[[Iterator[pa.Array]], Iterator[pa.Array]], return_type):
    """A SCALAR_ITER UDF of one (struct) column running ``fn`` on Arrow arrays on either stack.

    pyspark reads the UDF's kind from its type hints (giving the kind as an ArrowUDFType or
    PandasUDFType argument instead makes it warn), so ``fn`` runs inside an annotated function."""
    if has_arrow_udf():
        from pyspark.sql.functions import arrow_udf

        def arrays(batches: Iterator[pa.Array]) -> Iterator[pa.Array]:
            return fn(batches)

        return arrow_udf(arrays, return_type)
    import pandas as pd
    from pyspark.sql.functions import pandas_udf
    from pyspark.sql.types import StructType

    struct_out = isinstance(return_type, StructType)

    # The return hint only tells pyspark the kind: the batches are a DataFrame for a struct
    # return type, a Series otherwise.
    def through_pandas(frames: Iterator[pd.DataFrame]) -> Iterator[pd.Series]:
        # pyspark 3.5 gives a struct column to a pandas UDF as a DataFrame, one column per field.
        arrays = (_frame_to_struct(frame) for frame in frames)
        for result in fn(arrays):
            yield _arrow_to_pandas(result, struct_out)

    return pandas_udf(through_pandas, return_type)


def udf_struct_type(names, types):
    """The StructType a multi-column UDF returns, as each stack checks it: the fields are not
    nullable (a prediction is never null), except on pyspark 3.5, whose pandas UDF results always
    come back nullable and whose schema check compares nullability too."""
    from pyspark.sql.types import StructField, StructType
    nullable = not has_arrow_udf()
    return StructType([StructField(name, kind, nullable) for name, kind in zip(names, types)])


def collect_arrow(df) -> pa.Table:
    """``df`` collected to the driver as an Arrow table."""
    if hasattr(df, "toArrow"):
        return df.toArrow()
    # pyspark 3.5: the Arrow collect that toPandas() uses internally, without the pandas step.
    from pyspark.sql.pandas.types import to_arrow_schema
    batches = df._collect_as_arrow()
    if not batches:
        return to_arrow_schema(df.schema).empty_table()
    return pa.Table.from_batches(batches)


def _frame_to_struct(frame) -> pa.StructArray:
    if not len(frame.columns):
        return pa.StructArray.from_arrays([], names=[])
    # Array cells arrive as numpy arrays in object columns; pa.array makes them list arrays again.
    fields = [pa.array(frame[name], from_pandas=True) for name in frame.columns]
    return pa.StructArray.from_arrays(fields, names=[str(name) for name in frame.columns])


def _arrow_to_pandas(result, struct_out: bool):
    if isinstance(result, pa.ChunkedArray):
        result = result.combine_chunks()
    if struct_out:
        names = [result.type.field(i).name for i in range(result.type.num_fields)]
        return pa.Table.from_arrays(result.flatten(), names=names).to_pandas()
    return result.to_pandas()
