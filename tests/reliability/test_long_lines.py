"""A rank that prints 50 MB as one line: the launchers relay it in time linear in its size, with
bounded memory on the driver, in pieces of at most MAX_LINE_BYTES, each but the last marked as
continuing (run() on local[2], run_local, and run_elastic's relay from a task's supervisor to the
driver, which must not cut the supervisor's pieces again)."""
import sys

import cloudpickle
import pytest
from support import long_lines

from horovod_spark.common import wire
from horovod_spark.common.kv_client import KVClient
from horovod_spark.common.kv_server import KVStoreServer
from horovod_spark.common.line_sink import LINE_CONTINUES, MAX_LINE_BYTES
from horovod_spark.launcher.local_job import run_local
from horovod_spark.launcher.supervisor import RankSupervisor
from horovod_spark.spark.driver.output import OutputSink
from horovod_spark.spark.elastic.output import RELAYED_LINE_LIMIT, DriverOutput, TaskOutput

pytestmark = pytest.mark.timeout(300)
cloudpickle.register_pickle_by_value(sys.modules["support.long_lines"])

SMALL, LARGE = 5 * long_lines.MB, 50 * long_lines.MB


def _pieces(n: int) -> int:
    return -(-n // MAX_LINE_BYTES)


def _check(launch):
    sink = long_lines.TimedSink(LINE_CONTINUES)
    with long_lines.PeakRss() as rss:
        launch(sink)
    assert sink.x_bytes == SMALL + LARGE
    small, large = sink.relay_seconds(SMALL), sink.relay_seconds(LARGE)
    # Linear: about 10 times as long for 10 times the bytes (quadratic: about 100 times).
    assert large < 30 * max(small, 0.1), (small, large)
    assert rss.growth < 48 * long_lines.MB, rss.growth
    assert sink.marked_lines == _pieces(SMALL) - 1 + _pieces(LARGE) - 1


def test_run_relays_a_50_mb_line_in_linear_time_and_bounded_memory(spark):
    import horovod_spark
    _check(lambda sink: horovod_spark.run(long_lines.print_long_lines, args=((SMALL, LARGE),), num_proc=1,
                                          stdout=sink, verbose=0))


def test_run_local_relays_a_50_mb_line_in_pieces_marked_as_such():
    _check(lambda sink: run_local(long_lines.print_long_lines, args=((SMALL, LARGE),), num_proc=1, stdout=sink))


def test_run_elastic_relays_a_long_line_in_the_supervisors_pieces_only():
    key = wire.make_secret()
    server = KVStoreServer(key, host="127.0.0.1")
    client = KVClient("127.0.0.1", server.start(), key)
    sink = long_lines.TimedSink(LINE_CONTINUES)
    DriverOutput(server, OutputSink(sink, sink))
    try:
        output = TaskOutput()  # as spark/elastic/task.py runs a worker's rank
        script = "import sys\nsys.stdout.write('x' * %d + '\\n')\n" % (3 * long_lines.MB)
        supervisor = RankSupervisor([[sys.executable, "-c", script]], [{}], stdout=output.stdout,
                                    stderr=output.stderr, prefix_output=False, line_limit=RELAYED_LINE_LIMIT)
        supervisor.start()
        assert supervisor.wait(30) is None
        supervisor.stop()
        assert output.ship(client, 0, None)
    finally:
        client.close()
        server.stop()
    assert sink.x_bytes == 3 * long_lines.MB
    assert sink.marked_lines == -(-3 * long_lines.MB // RELAYED_LINE_LIMIT) - 1
