"""horovod_spark.run where each of 2 ranks returns 200 MB, on local[2] with Spark's default 1 GiB
driver heap: the results reach the driver without passing through its JVM, the SparkContext
survives, and a result above HOROVOD_SPARK_MAX_RESULT_BYTES fails naming its size and the fix."""
import sys

import cloudpickle
import pytest
from support import large_results

pytest.importorskip("pyspark")
pytestmark = pytest.mark.timeout(300)

cloudpickle.register_pickle_by_value(sys.modules["support.large_results"])


def test_two_ranks_return_200_mb_each(spark):
    large_results.check_big_results(spark)


def test_result_above_the_limit_fails_naming_its_size(spark, monkeypatch):
    large_results.check_limit_refused(spark, monkeypatch)
