"""Progress lines of an elastic fit, from its rank 0 to the driver's ProgressPrinter.

``run_elastic`` leaves the ranks' output in the executors' logs, so an elastic fit sends what the
driver prints (progress events, and the line saying training resumed) over a small authenticated
service of its own: ``ProgressService`` on the driver, ``RemoteLines`` (a file-like the rank's
ProgressReporter writes to) on the ranks. Progress is best effort: a line that cannot be sent
within a few seconds is dropped, and never holds training up for longer.
"""
from dataclasses import dataclass, field
from typing import List, Optional

OP_LINE = "estimator_progress_line"
_SEND_TIMEOUT_S = 5.0


@dataclass
class ProgressChannel:
    """Where a rank sends its lines (travels inside the TrainSpec)."""
    addrs: List[str]
    port: int
    key: bytes = field(repr=False)


def line_handler(printer):
    """The service's handler of OP_LINE: a rank's line to ``printer`` as the runners write rank output."""
    def handle(rank, line):
        if isinstance(rank, int) and isinstance(line, str):
            printer.write("[%d]<stdout>:%s\n" % (rank, line.rstrip("\n")))
    return handle


class ProgressService:
    """Listens for rank lines and writes them, as ``[rank]<stdout>:line``, to ``printer``."""

    def __init__(self, printer):
        from horovod_spark import session
        from horovod_spark.common import wire
        from horovod_spark.common.kv_server import KVStoreServer
        from horovod_spark.spark.driver.service import driver_addresses, start_listening

        sc = session.active_spark_context("horovod_spark.run_elastic")
        key = wire.make_secret()
        addrs = driver_addresses(sc)

        def make(host):
            server = KVStoreServer(key, host=host)
            server.add_handler(OP_LINE, line_handler(printer))
            return server
        self._server = start_listening(make, sc.getConf().get("spark.driver.bindAddress"), addrs)
        self.channel = ProgressChannel(addrs, self._server.port, key)

    def close(self):
        self._server.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class RemoteLines:
    """A write-only text stream whose whole lines go to the driver's ProgressService."""

    def __init__(self, channel: Optional[ProgressChannel], rank: int):
        self._channel = channel
        self.rank = rank
        self._client = None
        self._pending = ""
        self._broken = channel is None

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            self._send(line)
        return len(text)

    def flush(self) -> None:
        pass

    def _send(self, line: str) -> None:
        if self._broken:
            return
        try:
            if self._client is None:
                from horovod_spark.spark.task.body import connect_to_driver
                self._client, _ = connect_to_driver(self._channel.addrs, self._channel.port, self._channel.key,
                                                    "fit's progress service", io_timeout=_SEND_TIMEOUT_S)
            self._client.request(OP_LINE, self.rank, line)
        except (OSError, TimeoutError, ConnectionError):
            # The driver is gone or unreachable: the fit goes on without progress lines.
            self.close()
            self._broken = True

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except OSError:
                pass
            self._client = None
