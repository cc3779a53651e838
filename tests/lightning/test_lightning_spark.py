"""HorovodStrategy in the ranks of horovod_spark.run on Spark local[2]."""
import cloudpickle
import pytest

pytest.importorskip("lightning.pytorch", reason="Lightning is not installed (pip install 'horovod_spark[lightning]')")
pytest.importorskip("pyspark")

from support import lightning_training as lt  # noqa: E402

import horovod_spark  # noqa: E402

pytestmark = pytest.mark.timeout(240)

# The training code travels by value, like a notebook's: the executors need not import tests/.
cloudpickle.register_pickle_by_value(lt)


def test_strategy_under_spark_run_trains_like_one_process(spark):
    results = horovod_spark.run(lt.train, num_proc=2, verbose=0)
    lt.check_trained_like_one_process(results)
    for result in results:
        assert result["metrics"]["plus_one_mean"] == pytest.approx(1.5)
