"""A flood on a rank's peer port cannot keep the real peer out of hvd.init(): connections that
send the start of a greeting and stall, plus a stream of new silent ones, all from 127.0.0.1 like
the real peer. When the real peer never comes, the error names the flood and the missing rank."""
import collections
import os
import socket
import struct
import threading
import time

import pytest
from support.peer_port import kv_service, pose_as_remote_rank1, record_of, start_rank

pytestmark = pytest.mark.timeout(300)


# What once broke hvd.init(): a well-formed greeting claiming rank 1 (the header of the peer
# handshake before greetings carried a MAC), then silence.
_STALLED_GREETING = struct.pack(">III", 0x48535032, 1, 0)


class _Flood:
    """From 127.0.0.1: `stalled` connections that greet and stall, renewed as the port closes them,
    and a stream of new silent connections (the newest `keep_open` held open)."""

    def __init__(self, port, stalled=64, keep_open=400):
        self.port, self.stalled, self.keep_open = port, stalled, keep_open
        self.opened = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)

    def _connect(self):
        try:
            s = socket.create_connection(("127.0.0.1", self.port), timeout=2)
        except OSError:
            return None
        self.opened += 1
        return s

    def _run(self):
        held = collections.deque()
        n = 0
        while not self._stop.is_set():
            stall = n < self.stalled or n % 8 == 0
            s = self._connect()
            n += 1
            if s is None:
                continue
            if stall:
                try:
                    s.sendall(_STALLED_GREETING + os.urandom(16))
                except OSError:
                    pass
            held.append(s)
            while len(held) > self.keep_open:
                held.popleft().close()
        for s in held:
            s.close()


@pytest.fixture
def service():
    with kv_service("flood") as job:
        yield job


def test_init_succeeds_while_the_peer_port_is_flooded(service):
    server, key, scope = service
    # No shared memory: rank 1 must get all three of its TCP channels through the flood.
    extra = {"HOROVOD_SHM_DISABLE": "1", "HOROVOD_START_TIMEOUT": "120"}
    rank0 = start_rank(0, 2, server, key, scope, extra)
    rank1 = None
    try:
        port = record_of(server, scope, 0)["port"]
        with _Flood(port) as flood:
            while flood.opened < 300:  # the stalled greetings and a stream of silent ones are in
                time.sleep(0.05)
            t0 = time.monotonic()
            rank1 = start_rank(1, 2, server, key, scope, extra)
            out1, err1 = rank1.communicate(timeout=240)
            out0, err0 = rank0.communicate(timeout=60)
            elapsed = time.monotonic() - t0
    finally:
        for p in (rank0, rank1):
            if p is not None and p.poll() is None:
                p.kill()
    assert rank0.returncode == 0 and rank1.returncode == 0, err0 + err1
    assert "SUM 3" in out0 and "SUM 3" in out1, out0 + out1
    print("rank 1's hvd.init() took %s s while %d hostile connections hit rank 0's peer port (job %.1f s)"
          % (out1.split()[1], flood.opened, elapsed))


def test_a_flood_and_a_missing_peer_are_named_in_the_error(service):
    server, key, scope = service
    rank0 = start_rank(0, 2, server, key, scope, {"HOROVOD_START_TIMEOUT": "8"})
    try:
        port = record_of(server, scope, 0)["port"]
        # Rank 1 says it is on another host (so three TCP channels) and never connects.
        pose_as_remote_rank1(server, scope)
        with _Flood(port) as flood:
            _, err = rank0.communicate(timeout=120)
    finally:
        if rank0.poll() is None:
            rank0.kill()
    assert rank0.returncode != 0
    assert flood.opened > 64
    assert "waiting for rank 1 (host elsewhere, 127.0.0.1) to connect to rank 0" in err, err
    assert "no connection to this rank's peer port proved to come from it" in err, err
    assert "connection(s) never proved the job's secret" in err, err
    assert "from 127.0.0.1 (" in err and "pushed out by newer connections" in err, err
    assert "another job" not in err and "wrong secret" not in err, err
