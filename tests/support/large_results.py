"""What the large-result tests of tests/reliability run on the ranks and check on the driver (shared
by the local[2] and local-cluster modules)."""
import os

MIB = 1024 * 1024
RESULT_BYTES = 200 * MIB


def rank_bytes(size: int) -> bytes:
    """``size`` bytes all equal to this rank's number, so each rank's result is recognisable."""
    return bytes([int(os.environ["HOROVOD_RANK"])]) * size


def check_big_results(spark, num_proc: int = 2) -> None:
    import horovod_spark
    results = horovod_spark.run(rank_bytes, args=(RESULT_BYTES,), num_proc=num_proc, verbose=0)
    assert [len(r) for r in results] == [RESULT_BYTES] * num_proc
    assert [(r[0], r[-1]) for r in results] == [(rank, rank) for rank in range(num_proc)]
    del results
    # The user's SparkContext is still alive and usable.
    assert spark.sparkContext.parallelize(range(10), 2).sum() == 45


def check_limit_refused(spark, monkeypatch) -> None:
    import pytest

    import horovod_spark
    from horovod_spark.spark import HorovodSparkError
    monkeypatch.setenv("HOROVOD_SPARK_MAX_RESULT_BYTES", str(MIB))
    with pytest.raises(HorovodSparkError) as info:
        horovod_spark.run(rank_bytes, args=(2 * MIB,), num_proc=2, verbose=0)
    text = str(info.value)
    assert "MiB" in text and "HOROVOD_SPARK_MAX_RESULT_BYTES" in text, text
    assert "above the limit of 1.0 MiB" in text, text
    assert spark.sparkContext.parallelize(range(10), 2).sum() == 45
