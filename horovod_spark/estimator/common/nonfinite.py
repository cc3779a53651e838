"""What a fit does about numbers that are not finite: a NaN or infinite training loss on a rank
(``nonfinite_loss``), and NaN or infinite values in the training columns (``validate_finite``).

A NaN loss otherwise trains on silently: every later step is NaN and the fit returns a model of
NaN weights. The loss check costs nothing extra: the per-step logs already bring the loss to the
host as a Python float. The loss alone can stay finite while the weights are NaN (an activation
that maps NaN to 0, such as TensorFlow's relu, or a loss that clips its input), so the weights are
checked too, once per epoch: one pass over them, small beside an epoch of training.
"""
import math
import warnings

from horovod_spark.exceptions import NonFiniteLossError


class LossGuard:
    """Checks each training step's loss, and the weights after each epoch, on a rank; ``mode`` is
    the fit's ``nonfinite_loss``."""

    def __init__(self, mode: str, rank: int):
        self.mode = mode
        self.rank = rank
        self._warned_epochs = set()

    def check(self, loss: float, epoch: int, step: int) -> None:
        """``epoch`` and ``step`` count from 0, as the callbacks see them; the message counts from 1."""
        if math.isfinite(loss):
            return
        text = ("the training loss is %s in epoch %d, step %d (counting from 1) on rank %d. Usual causes: NaN or "
                "infinite values in the data (fit with validate_finite=True to check the columns first), a "
                "learning rate too high, or a loss that divides by zero or takes the log of 0"
                % (loss, epoch + 1, step + 1, self.rank))
        self._report(text, epoch)

    def check_weights(self, nonfinite_names, epoch: int, steps: int) -> None:
        """``nonfinite_names``: the model's weights holding a NaN or infinite value after epoch
        ``epoch`` (from 0) ran ``steps`` steps."""
        names = list(nonfinite_names)
        if not names:
            return
        listed = ", ".join(repr(n) for n in names[:5]) + (" and %d more" % (len(names) - 5) if len(names) > 5 else "")
        text = ("the model's weights hold NaN or infinite values after epoch %d, step %d (counting from 1; its last) "
                "on rank %d, although every step's training loss was finite: %s. A layer or loss that maps NaN to a "
                "finite value (relu in TensorFlow, a clipping loss) hides it from the loss. Usual causes: NaN or "
                "infinite values in the data (fit with validate_finite=True to find the columns), or a learning "
                "rate too high" % (epoch + 1, steps, self.rank, listed))
        self._report(text, epoch)

    def _report(self, text: str, epoch: int) -> None:
        if self.mode == "raise":
            raise NonFiniteLossError(text + ". nonfinite_loss='warn' lets training go on.")
        if epoch not in self._warned_epochs:
            self._warned_epochs.add(epoch)
            warnings.warn(text + " (nonfinite_loss='warn': training goes on; warned once per epoch).",
                          RuntimeWarning, stacklevel=2)


def nonfinite_counts(df, columns):
    """{column: rows holding a NaN or infinite value} over ``columns`` of a Spark DataFrame, for the
    float columns, float arrays and ML vectors among them (other types cannot hold such values);
    one Spark job for all of them."""
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    def bad(x):
        return F.isnan(x) | (F.abs(x) == F.lit(float("inf")))

    floats = (T.FloatType, T.DoubleType)
    checks = {}
    for field in df.schema.fields:
        if field.name not in columns:
            continue
        col, kind = F.col(field.name), field.dataType
        if isinstance(kind, floats):
            checks[field.name] = F.coalesce(bad(col), F.lit(False))
        elif isinstance(kind, T.ArrayType) and isinstance(kind.elementType, floats):
            checks[field.name] = F.coalesce(F.exists(col, bad), F.lit(False))
        elif isinstance(kind, VectorUDT):
            from pyspark.ml.functions import vector_to_array
            checks[field.name] = F.coalesce(F.exists(vector_to_array(col), bad), F.lit(False))
    if not checks:
        return {}
    row = df.agg(*[F.sum(F.when(cond, 1).otherwise(0)).alias(name) for name, cond in checks.items()]).first()
    return {name: int(row[name] or 0) for name in checks}


def check_finite(df, columns, where: str) -> None:
    """ValueError naming every column of ``columns`` in ``df`` that holds NaN or infinite values."""
    counts = {name: n for name, n in nonfinite_counts(df, columns).items() if n}
    if counts:
        listed = ", ".join("%r (%d rows)" % (name, n) for name, n in sorted(counts.items()))
        raise ValueError("validate_finite: %s holds NaN or infinite values in %s. Drop or replace them before "
                         "fit (e.g. df.na.drop(), or filter with pyspark.sql.functions.isnan), or fit without "
                         "validate_finite to train on them as they are" % (where, listed))
