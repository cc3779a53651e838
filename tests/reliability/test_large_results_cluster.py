"""The large-result checks of test_large_results on local-cluster[2,1,1024]: executors in their
own 1 GiB JVMs, the driver with Spark's default 1 GiB heap."""
import sys

import cloudpickle
import pytest
from support import large_results

pytest.importorskip("pyspark")
pytestmark = pytest.mark.timeout(300)

cloudpickle.register_pickle_by_value(sys.modules["support.large_results"])


@pytest.fixture(scope="module")
def spark_master():
    return "local-cluster[2,1,1024]"


def test_two_ranks_return_200_mb_each(spark):
    large_results.check_big_results(spark)


def test_result_above_the_limit_fails_naming_its_size(spark, monkeypatch):
    large_results.check_limit_refused(spark, monkeypatch)
