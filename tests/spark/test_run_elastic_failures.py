"""horovod_spark.run_elastic when fn raises, on local[2,3] (two task slots, three attempts per task):
as in Horovod, a rank whose function raised is a lost rank. Its task fails, the survivor rolls back
to its last commit, Spark runs the task again and the new attempt takes the rank's place, so a
transient failure leaves the result unchanged; a failure that comes back on every attempt ends the
job once Spark gives up on the task, with an error naming each failure."""
import sys

import cloudpickle
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("torch")

from support import elastic_training  # noqa: E402

import horovod_spark  # noqa: E402
from horovod_spark.exceptions import ElasticJobError  # noqa: E402

pytestmark = [pytest.mark.timeout(400), pytest.mark.legacy_stack]

cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def spark_master():
    return "local[2,3]"


def test_a_rank_that_raises_once_is_replaced_and_the_result_is_unchanged(spark):
    reference = elastic_training.reference_weights()
    results = horovod_spark.run_elastic(elastic_training.train, args=(1, "raise"), num_proc=2, start_timeout=120,
                                        elastic_timeout=120)
    assert [r["worker"] for r in results] == [0, 2], results  # worker 2: the task's second attempt
    for rank, result in enumerate(results):
        assert (result["rank"], result["size"], result["steps"]) == (rank, 2, elastic_training.STEPS), result
        elastic_training.check_weights(result, reference)
    assert results[0]["resets"] == 1, results[0]


def test_a_rank_that_raises_on_every_attempt_ends_the_job_naming_each_failure(spark):
    with pytest.raises(ElasticJobError) as info:
        horovod_spark.run_elastic(elastic_training.train, args=(1, "raise always"), num_proc=2, start_timeout=120,
                                  elastic_timeout=120)
    text = str(info.value)
    # Rank 1's task ran three times (local[2,3]), each attempt a new worker that raised at step 8.
    for worker in (1, 2, 3):
        assert ("worker %d (rank 1) raised ValueError: a failure on every rank 1, here worker %d" % (worker, worker)
                in text), text
    assert "the Spark job failed" in text and "Traceback" in text, text
