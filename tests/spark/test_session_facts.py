"""``horovod_spark.session``: the facts about the active session and its cluster, for a classic
session (this module's local[2]); the Spark Connect side is checked in test_spark_connect.py."""
import os

import pytest

from horovod_spark import session as facts

pytest.importorskip("pyspark")


def test_master_strings_tell_the_slots_of_local_clusters():
    assert facts.static_slots("local", 1) == 1
    assert facts.static_slots("local[4]", 2) == 2
    assert facts.static_slots("local[*]", 1) == (os.cpu_count() or 1)
    assert facts.static_slots("local-cluster[2,3,1024]", 1) == 6
    assert facts.static_slots("yarn", 1) is None
    assert facts.expected_executors("local-cluster[2,3,1024]") == 2 and facts.expected_executors("local[2]") is None
    assert facts.bigger_master("local[2]", 5) == "local[5]"
    assert facts.bigger_master("local-cluster[2,2,1024]", 5) == "local-cluster[3,2,...]"


def test_the_active_classic_session_and_its_facts(spark):
    assert facts.active_session() is spark
    assert not facts.is_connect_session(spark)
    assert not facts.is_connect_dataframe(spark.range(1))
    assert facts.connect_session_in_use() is None
    assert facts.active_spark_context("test") is spark.sparkContext
    assert facts.default_parallelism(spark) == spark.sparkContext.defaultParallelism == 2
    assert facts.master(spark) == "local[2]" and facts.task_cpus(spark) == 1
    assert facts.known_slots(spark) == 2
    assert facts.available_slots(spark.sparkContext, 2, 0.0) == 2
    assert facts.busy_slots(spark.sparkContext) == 0
    assert not facts.dynamic_allocation(spark)
    assert facts.conf(spark, "spark.horovod_spark.no.such.key", "dflt") == "dflt"
    assert facts.int_conf(spark, "spark.master") is None

