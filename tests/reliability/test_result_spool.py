"""The driver's result spool through a real driver service and client: a result streamed in chunks
comes back whole, resent chunks change nothing, and results too large for the limit or for the
driver's memory are refused naming their size (and recorded as the rank's failure)."""
import os
import stat

import cloudpickle
import pytest

from horovod_spark.common import wire
from horovod_spark.common.kv_client import KVClient
from horovod_spark.spark.driver import results
from horovod_spark.spark.driver.service import DriverService


@pytest.fixture
def served():
    key = wire.make_secret()
    service = DriverService(key, 2, "job", lambda rank, chunks: None, host="127.0.0.1")
    spool = results.ResultSpool(service, max_bytes=64 * 1024 * 1024)
    port = service.start()
    client = KVClient("127.0.0.1", port, key)
    try:
        yield service, spool, client
    finally:
        client.close()
        service.stop()
        spool.close()


def _result_file(tmp_path, value) -> str:
    path = str(tmp_path / "result.pkl")
    with open(path, "wb") as f:
        f.write(cloudpickle.dumps(value))
    return path


def test_a_result_of_several_chunks_comes_back_whole(served, tmp_path):
    service, spool, client = served
    value = {"weights": os.urandom(2 * results.CHUNK_BYTES + 123), "rank": 1}
    assert results.send(client, 1, _result_file(tmp_path, value)) is None
    spool_dir = os.path.dirname(spool._path(1))
    assert stat.S_IMODE(os.stat(spool_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(spool._path(1)).st_mode) == 0o600
    # A chunk resent after a dropped connection writes the same bytes again.
    data = cloudpickle.dumps(value)
    client.request("result_chunk", 1, 0, data[:results.CHUNK_BYTES])
    assert spool.load(1) == value
    spool.close()
    assert not os.path.exists(spool_dir)


def test_an_unfinished_result_is_not_loaded(served):
    service, spool, client = served
    assert client.request("result_begin", 0, 10) is None
    client.request("result_chunk", 0, 0, b"12345")
    with pytest.raises(RuntimeError, match="rank 0 finished but its result never fully reached the driver"):
        spool.load(0)
    with pytest.raises(Exception, match="does not fit"):
        client.request("result_chunk", 0, 8, b"12345")


def test_a_result_above_the_limit_is_refused_naming_size_and_fix(served):
    service, spool, client = served
    refusal = client.request("result_begin", 1, 100 * 1024 * 1024)
    assert "100.0 MiB (104857600 bytes), above the limit of 64.0 MiB" in refusal
    assert "HOROVOD_SPARK_MAX_RESULT_BYTES" in refusal
    with service.condition:
        assert [(f["rank"], f["exc_type"]) for f in service.failures] == [(1, "ResultTooLarge")]


def test_a_result_beyond_the_drivers_memory_is_refused(served):
    service, spool, client = served
    spool._max_bytes = 1 << 60
    huge = 1 << 50  # a petabyte: more than any driver has available
    refusal = client.request("result_begin", 0, huge)
    assert "more memory than it has available" in refusal and "%d bytes" % huge in refusal
