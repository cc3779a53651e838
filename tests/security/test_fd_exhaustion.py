"""A job of real ranks completes while 200 idle connections sit on its KV service and the
launcher's open-file limit is too low to hold them all: the accept loop backs off instead of dying,
and the idle connections are dropped at the handshake deadline."""
import os
import socket
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.timeout(300)

# The ranks wait for the go file, so the flood is open before they dial the service.
_RANK = """
import os, resource, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the low limit is the launcher's only
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
import torch
import horovod_spark.torch as hvd
hvd.init()
print("SUM", hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum).item(), flush=True)
hvd.shutdown()
"""

# The launcher's side: a LocalJob (KV service plus supervised ranks) under a low open-file limit.
_LAUNCHER = """
import resource, sys
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), hard))
from horovod_spark.launcher.local_job import LocalJob
job = LocalJob([sys.executable, "-c", sys.argv[2], sys.argv[3]], 2)
job.start()
print("PORT", job.port, flush=True)
try:
    failure = job.supervisor.wait(240)
finally:
    job.close()
print("FAILURE", failure, flush=True)
sys.exit(0 if failure is None else 1)
"""

FD_LIMIT = 64
IDLE_CONNECTIONS = 200


def test_job_completes_with_200_idle_connections_and_a_low_fd_limit(tmp_path):
    go = str(tmp_path / "go")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), HOROVOD_SPARK_TLS="0")
    launcher = subprocess.Popen([sys.executable, "-c", _LAUNCHER, str(FD_LIMIT), _RANK, go], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    idle = []
    try:
        line = launcher.stdout.readline()
        assert line.startswith("PORT"), line + launcher.stderr.read()
        port = int(line.split()[1])
        for _ in range(IDLE_CONNECTIONS):
            s = socket.socket()
            s.settimeout(5)
            s.connect_ex(("127.0.0.1", port))  # queued in the backlog even while accept backs off
            idle.append(s)
        t0 = time.monotonic()
        open(go, "w").close()
        out, err = launcher.communicate(timeout=240)
        took = time.monotonic() - t0
    finally:
        if launcher.poll() is None:
            launcher.kill()
        for s in idle:
            s.close()
    print("job with %d idle connections and RLIMIT_NOFILE=%d finished in %.1f s" % (IDLE_CONNECTIONS, FD_LIMIT, took))
    assert launcher.returncode == 0, out + err
    assert out.count("SUM 3.0") == 2, out + err
    assert "accept loop failed" not in err
    # The service said why it could not accept, in a line, and went on serving.
    assert "cannot accept a connection" in err and "open-file limit" in err, err
