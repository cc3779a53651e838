"""One attacker hammering the KV service (the driver service's base) with connections that fail
the handshake cannot flood the log: a bounded number of warning lines per interval, then one
summary line counting the refusals per source and reason."""
import logging
import time

import pytest

from horovod_spark.common import wire
from horovod_spark.common.kv_client import KVClient
from horovod_spark.common.kv_server import KVStoreServer

pytestmark = pytest.mark.timeout(60)

ATTEMPTS = 300


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_an_attackers_refused_connections_are_logged_in_bounded_lines_with_counts():
    lines = _Collect()
    logger = logging.getLogger("horovod_spark.common.kv_server")
    logger.addHandler(lines)
    server = KVStoreServer(wire.make_secret(), host="127.0.0.1", tls=None)
    port = server.start()
    try:
        wrong = wire.make_secret()
        t0, refused = time.monotonic(), 0
        while refused < ATTEMPTS and time.monotonic() - t0 < 20:
            try:
                with KVClient("127.0.0.1", port, wrong, tls=False, io_timeout=5.0) as client:
                    client.request("ping")
            except Exception:
                refused += 1
        seconds = time.monotonic() - t0
    finally:
        server.stop()
        logger.removeHandler(lines)
    assert refused == ATTEMPTS
    # Within the default 10 s interval: the first few refusals in full, then the summary at stop().
    intervals = int(seconds // 10) + 1
    assert len(lines.lines) <= intervals * 6, (len(lines.lines), lines.lines[:8])
    assert any("from 127.0.0.1:" in line for line in lines.lines), lines.lines
    summaries = [line for line in lines.lines if "not logged one by one" in line]
    assert summaries, lines.lines
    counted = sum(int(s.split("127.0.0.1: ")[1].split()[0]) for s in summaries)
    # Every refusal is a line or counted in one (a connection still in the handshake when the
    # service stopped is not a refusal).
    assert ATTEMPTS - 5 <= counted + len(lines.lines) - len(summaries) <= ATTEMPTS, lines.lines


def test_the_summary_comes_at_the_intervals_end_with_counts_per_source_and_reason():
    from horovod_spark.common.security_log import RateLimitedLog
    lines = _Collect()
    logger = logging.getLogger("test_log_flood.summary")
    logger.addHandler(lines)
    limited = RateLimitedLog(logger, "service", interval=0.3, burst=2)
    try:
        for i in range(50):
            limited.warning("10.0.0.%d" % (i % 2), "rejected" if i % 5 else "no handshake", "line %d", i)
        deadline = time.monotonic() + 5
        while len(lines.lines) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lines.lines[:2] == ["line 0", "line 1"]
        assert len(lines.lines) == 3, lines.lines  # the summary came without close()
        summary = lines.lines[2]
        assert "48 more refused connection(s)" in summary, summary
        assert "10.0.0.0: 20 rejected, 4 no handshake" in summary and "10.0.0.1: 19 rejected, 5 no handshake" in summary
    finally:
        limited.close()
        logger.removeHandler(lines)
