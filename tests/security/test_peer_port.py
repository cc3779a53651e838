"""A rank's peer port: silent or hostile connections do not delay hvd.init(), and when the real
peer never proves itself the error says so (not "timed out waiting for shared memory")."""
import hashlib
import hmac
import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
import uuid

import pytest

from horovod_spark.common import wire
from horovod_spark.common.kv_server import KVStoreServer
from horovod_spark.launcher.local_job import rank_environment

pytestmark = pytest.mark.timeout(240)

_GREETING_HEADER = struct.pack(">I", 0x48535033)  # native/transport/peer_wire.h: kMagic

_RANK = """
import time
import torch
import horovod_spark.torch as hvd
t0 = time.monotonic()
hvd.init()
took = time.monotonic() - t0
total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
print("INIT %.3f SUM %g" % (took, total.item()), flush=True)
hvd.shutdown()
"""


def _start_rank(rank, size, server, key, scope, extra=None):
    env = rank_environment(rank, size, server.port, key, scope, dict(os.environ, **(extra or {})))
    env["HOROVOD_SPARK_TLS"] = "0"
    return subprocess.Popen([sys.executable, "-c", _RANK], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _record_of(server, scope, rank, within=60.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = server.get_nowait(scope + ".init.0", "rank.%d" % rank)
        if value is not None:
            return json.loads(value)
        time.sleep(0.05)
    raise AssertionError("rank %d never published its address" % rank)


@pytest.fixture
def service():
    key = wire.make_secret()
    server = KVStoreServer(key, host="127.0.0.1", tls=None)
    server.start()
    yield server, key, "peer-" + uuid.uuid4().hex[:8]
    server.stop()


def test_silent_and_hostile_peer_connections_do_not_delay_init(service):
    server, key, scope = service
    rank0 = _start_rank(0, 2, server, key, scope)
    try:
        port = _record_of(server, scope, 0)["port"]
        # Queued on rank 0's peer port before the real peer: silent ones, one that greets and
        # never proves, one with a wrong proof, one announcing a huge frame.
        hostile = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
        greeting = struct.pack(">III", 0x48535032, 1, 0) + os.urandom(16)
        hostile[0].sendall(greeting)
        hostile[1].sendall(greeting)
        hostile[2].sendall(struct.pack(">I", 64 << 20) + os.urandom(60))
        t0 = time.monotonic()
        rank1 = _start_rank(1, 2, server, key, scope)
        try:  # rank 0 answers greetings once both ranks met at the rendezvous
            hostile[1].settimeout(60)
            if len(hostile[1].recv(48)) == 48:
                hostile[1].sendall(os.urandom(32))
        except OSError:
            pass
        out1, err1 = rank1.communicate(timeout=180)
        out0, err0 = rank0.communicate(timeout=60)
        elapsed = time.monotonic() - t0
    finally:
        for p in (rank0,):
            if p.poll() is None:
                p.kill()
    assert rank0.returncode == 0 and rank1.returncode == 0, err0 + err1
    init1 = float(out1.split()[1])
    print("rank 1's hvd.init() took %.2f s with 8 hostile connections queued on rank 0's port (job %.1f s)"
          % (init1, elapsed))
    assert "SUM 3" in out0 and "SUM 3" in out1
    assert init1 < 4.0  # a blocking read of each silent connection cost 5 s apiece
    for s in hostile:
        s.close()


def test_a_peer_that_does_not_prove_itself_is_named_in_the_error(service):
    server, key, scope = service
    rank0 = _start_rank(0, 2, server, key, scope, {"HOROVOD_START_TIMEOUT": "5"})
    try:
        port = _record_of(server, scope, 0)["port"]
        # We pose as rank 1 on another host (so TCP, three channels) without the job's secret.
        server.put(scope + ".init.0", "rank.1",
                   json.dumps({"rank": 1, "host": "127.0.0.1", "port": 9, "host_id": "elsewhere"}).encode())
        impostor = socket.create_connection(("127.0.0.1", port))
        impostor.sendall(_GREETING_HEADER + struct.pack(">II", 1, 0) + os.urandom(16 + 32))
        assert impostor.recv(48) == b"S"  # refused at once: the greeting's MAC proves no secret
        _, err = rank0.communicate(timeout=120)
    finally:
        if rank0.poll() is None:
            rank0.kill()
    assert rank0.returncode != 0
    assert re.search(r"waiting for rank 1 \([^)]*127\.0\.0\.1\) to connect to rank 0", err), err
    assert "claimed to be rank 1 but did not prove it belongs to this job" in err, err
    assert "shared memory" not in err
    impostor.close()


def test_a_copied_greeting_proves_nothing(service):
    server, key, scope = service
    rank0 = _start_rank(0, 2, server, key, scope, {"HOROVOD_START_TIMEOUT": "6"})
    try:
        port = _record_of(server, scope, 0)["port"]
        server.put(scope + ".init.0", "rank.1",
                   json.dumps({"rank": 1, "host": "127.0.0.1", "port": 9, "host_id": "elsewhere"}).encode())
        # Rank 1's greeting as an eavesdropper would have copied it off the wire (made here with
        # the job's token, which the eavesdropper does not have).
        token = hashlib.sha256(key + (scope + ".init.0").encode()).hexdigest().encode()
        nonce, ids = os.urandom(16), struct.pack(">II", 1, 0)
        greeting = _GREETING_HEADER + ids + nonce + hmac.new(token, b"hello" + nonce + ids, hashlib.sha256).digest()
        first = socket.create_connection(("127.0.0.1", port))
        first.sendall(greeting)
        assert len(first.recv(48)) == 48  # challenged: the greeting proves the secret once
        second = socket.create_connection(("127.0.0.1", port))
        second.sendall(greeting)
        assert second.recv(48) == b"D"  # the same nonce again: a replay
        first.sendall(os.urandom(32))  # the copier cannot answer the challenge
        _, err = rank0.communicate(timeout=120)
    finally:
        if rank0.poll() is None:
            rank0.kill()
    assert rank0.returncode != 0
    assert "a greeting as rank 1 proved the job's secret, but its handshake did not complete" in err, err
    assert "1 repeated a greeting already used (a replay)" in err, err
    assert "1 repeated rank 1's greeting but did not answer the challenge" in err, err
    first.close()
    second.close()
