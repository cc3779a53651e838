"""Hostile connections that never prove they hold the secret cost the driver service next to no
memory, cannot lock real clients out, and are dropped within the handshake deadline."""
import os
import socket
import struct
import subprocess
import sys
import time

import pytest

from horovod_spark.common.kv_client import KVClient

pytestmark = pytest.mark.timeout(120)

# The real driver service of horovod_spark.run, in a process of its own whose memory we measure.
_DRIVER = """
import sys
from horovod_spark.common import wire
from horovod_spark.spark.driver.service import DriverService
key = wire.make_secret()
service = DriverService(key, 2, "job", lambda rank, chunks: None, host="127.0.0.1")
print(service.start(), key.hex(), flush=True)
sys.stdin.read()
service.stop()
"""

FRAME_ANNOUNCED = 64 * 1024 * 1024 - 1


def _rss_bytes(pid: int) -> int:
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS for pid %d" % pid)


@pytest.fixture
def driver():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    proc = subprocess.Popen([sys.executable, "-c", _DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=env, text=True)
    port, key = proc.stdout.readline().split()
    yield proc, int(port), bytes.fromhex(key)
    proc.stdin.close()
    proc.wait(30)


def _hostile(port: int, how: str) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    if how == "old-frame":  # a frame header announcing ~64 MiB, where the handshake belongs
        s.sendall(struct.pack(">I", FRAME_ANNOUNCED) + b"\0" * 32 + os.urandom(1000))
    elif how == "hello-then-frame":  # a well-formed hello, then a 64 MiB frame instead of the proof
        s.sendall(b"HSW2" + os.urandom(16) + struct.pack(">IQ", FRAME_ANNOUNCED, 0) + os.urandom(1000))
    elif how == "silent-hello":  # a hello, then nothing
        s.sendall(b"HSW2" + os.urandom(16))
    return s


@pytest.mark.parametrize("how", ["old-frame", "hello-then-frame", "silent-hello", "silent"])
def test_driver_memory_under_a_preauth_flood(driver, how):
    proc, port, key = driver
    with KVClient("127.0.0.1", port, key, tls=False) as warm:
        assert warm.request("ping") == "pong"
    time.sleep(0.3)
    before = _rss_bytes(proc.pid)
    peak = before
    conns = []
    for _ in range(100):
        try:
            conns.append(_hostile(port, how))
        except OSError:
            pass  # the service already hung up on it: as good
        peak = max(peak, _rss_bytes(proc.pid))
    # A real client is served at once while the flood is open.
    t0 = time.monotonic()
    with KVClient("127.0.0.1", port, key, tls=False) as real:
        real.put("s", "k", b"v")
        assert real.get("s", "k", timeout=1) == b"v"
    served_in = time.monotonic() - t0
    for _ in range(20):
        peak = max(peak, _rss_bytes(proc.pid))
        time.sleep(0.05)
    growth = peak - before
    print("driver RSS %.1f MiB before, peak growth %.2f MiB under 100 '%s' connections; a real client served in "
          "%.3f s" % (before / 2 ** 20, growth / 2 ** 20, how, served_in))
    assert growth < 16 * 2 ** 20
    assert served_in < 2.0
    # Every hostile connection is closed by the service within the handshake deadline (5 s).
    deadline = time.monotonic() + 15
    for s in conns:
        s.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            while s.recv(65536):
                pass
        except ConnectionResetError:
            pass
        s.close()
    assert time.monotonic() < deadline
    assert proc.poll() is None
