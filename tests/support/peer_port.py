"""Two-rank jobs for the peer-port tests (tests/security/test_peer_port*.py): ranks started as
the local launcher starts them, around a KV store the test owns, so that a test can reach rank 0's
peer port before rank 1 does, or pose as a rank that never comes."""
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid

from horovod_spark.common import wire
from horovod_spark.common.kv_server import KVStoreServer
from horovod_spark.launcher.local_job import rank_environment

# Each rank: hvd.init(), then a 2-rank allreduce; prints "INIT <seconds> SUM <value>".
RANK_SCRIPT = """
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


@contextlib.contextmanager
def kv_service(prefix):
    """(server, key, scope): a running KV store on 127.0.0.1 and a fresh job scope."""
    key = wire.make_secret()
    server = KVStoreServer(key, host="127.0.0.1", tls=None)
    server.start()
    try:
        yield server, key, prefix + "-" + uuid.uuid4().hex[:8]
    finally:
        server.stop()


def start_rank(rank, size, server, key, scope, extra=None):
    """RANK_SCRIPT as rank ``rank`` of ``size``, TLS off, ``extra`` added to its environment."""
    env = rank_environment(rank, size, server.port, key, scope, dict(os.environ, **(extra or {})))
    env["HOROVOD_SPARK_TLS"] = "0"
    return subprocess.Popen([sys.executable, "-c", RANK_SCRIPT], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def record_of(server, scope, rank, within=60.0):
    """The address record rank ``rank`` published at the rendezvous."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = server.get_nowait(scope + ".init.0", "rank.%d" % rank)
        if value is not None:
            return json.loads(value)
        time.sleep(0.05)
    raise AssertionError("rank %d never published its address" % rank)


def pose_as_remote_rank1(server, scope):
    """Publish a record for rank 1 on another host (so rank 0 expects three TCP channels from it)
    without starting it."""
    server.put(scope + ".init.0", "rank.1",
               json.dumps({"rank": 1, "host": "127.0.0.1", "port": 9, "host_id": "elsewhere"}).encode())
