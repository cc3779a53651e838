"""Fixtures shared by the whole suite.

``spark``: one SparkSession per test module, stopped after the module (also when its tests fail).
A module picks its cluster by overriding the module-scoped fixtures ``spark_master`` (default
``local[2]``) and ``spark_conf`` (extra Spark settings, default none).
"""
import os
import sys

import pytest

# tests/ on sys.path: the shared helpers import as ``support`` here and, through the driver's
# sys.path that the launchers ship, in rank processes too.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def spark_master():
    return "local[2]"


@pytest.fixture(scope="module")
def spark_conf():
    return {}


@pytest.fixture(scope="module")
def spark(request, spark_master, spark_conf):
    pytest.importorskip("pyspark")
    from support.spark import start_spark, stop_spark
    session = start_spark(spark_master, request.module.__name__.rsplit(".", 1)[-1], spark_conf)
    yield session
    stop_spark(session, spark_conf)
