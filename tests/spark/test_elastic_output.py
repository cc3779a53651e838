"""run_elastic's output path without Spark: a worker's lines, written by the rank supervisor into a
TaskOutput, travel over a real KV connection to the driver's DriverOutput and print as run()'s do,
once each and in order, also when a batch is sent again after its reply was lost."""
import io

from horovod_spark.common import wire
from horovod_spark.common.kv_client import KVClient
from horovod_spark.common.kv_server import KVStoreServer
from horovod_spark.launcher.supervisor import RankSupervisor
from horovod_spark.spark.driver.output import OutputSink
from horovod_spark.spark.elastic.output import OP_OUTPUT, DriverOutput, TaskOutput


def _service():
    key = wire.make_secret()
    server = KVStoreServer(key, host="127.0.0.1")
    port = server.start()
    out, err = io.StringIO(), io.StringIO()
    DriverOutput(server, OutputSink(out, err))
    return server, KVClient("127.0.0.1", port, key), out, err


def test_a_rank_process_output_reaches_the_driver_prefixed_by_worker():
    server, client, out, err = _service()
    try:
        output = TaskOutput()
        script = "import sys\nfor i in range(3):\n    print('line', i)\nprint('oops', file=sys.stderr)\n"
        supervisor = RankSupervisor([["python3", "-c", script]], [{"PATH": "/usr/bin:/bin"}], first_label=5,
                                    stdout=output.stdout, stderr=output.stderr, prefix_output=False)
        supervisor.start()
        assert supervisor.wait(30) is None
        supervisor.stop()
        assert output.ship(client, 5)
        assert out.getvalue() == "[5]<stdout>:line 0\n[5]<stdout>:line 1\n[5]<stdout>:line 2\n"
        assert err.getvalue() == "[5]<stderr>:oops\n"
    finally:
        client.close()
        server.stop()


def test_a_batch_sent_again_is_printed_once():
    server, client, out, _ = _service()
    try:
        chunks = [("stdout", 1.0, b"once\n")]
        client.request(OP_OUTPUT, 0, 0, chunks)
        client.request(OP_OUTPUT, 0, 0, chunks)  # as after a lost reply
        client.request(OP_OUTPUT, 1, 0, [("stdout", 1.0, b"other worker\n")])
        assert out.getvalue() == "[0]<stdout>:once\n[1]<stdout>:other worker\n"
    finally:
        client.close()
        server.stop()


def test_output_kept_while_the_driver_is_unreachable_is_sent_later_in_order():
    server, client, out, _ = _service()
    unreachable = KVClient("127.0.0.1", 1, wire.make_secret(), io_timeout=1.0)
    try:
        output = TaskOutput()
        output.stdout.write("first\n")
        assert not output.ship(unreachable, 2)
        output.stdout.write("second\n")
        assert output.ship(client, 2)
        assert out.getvalue() == "[2]<stdout>:first\n[2]<stdout>:second\n"
    finally:
        unreachable.close()
        client.close()
        server.stop()


def test_a_rank_that_writes_without_pause_leaves_room_for_the_heartbeat():
    server, client, out, _ = _service()
    try:
        output = TaskOutput()
        for i in range(40):
            output.stdout.write("%d %s\n" % (i, "x" * 100_000))  # 40 batches of ~100 kB each at most
        assert output.ship(client, 0, max_batches=3)
        assert len(out.getvalue().splitlines()) < 40
        assert output.ship(client, 0, None)
        assert [line.split()[0] for line in out.getvalue().splitlines()] == ["[0]<stdout>:%d" % i for i in range(40)]
    finally:
        client.close()
        server.stop()
