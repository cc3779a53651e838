"""Start N real rank processes of a Python snippet, without the launcher's kill-on-first-failure,
so a test can watch how the survivors behave when one rank dies."""
import os
import secrets
import subprocess
import sys
import uuid
from contextlib import contextmanager

from horovod_spark.common.kv_server import KVStoreServer
from horovod_spark.launcher.local_job import rank_environment


@contextmanager
def rank_processes(code: str, num_proc: int, extra_env=None, argv=()):
    key = secrets.token_bytes(32)
    server = KVStoreServer(key, host="127.0.0.1")
    port = server.start()
    procs = []
    try:
        base = dict(os.environ)
        base.update(extra_env or {})
        scope = "t-" + uuid.uuid4().hex[:8]
        for r in range(num_proc):
            env = rank_environment(r, num_proc, port, key, scope, base)
            procs.append(subprocess.Popen([sys.executable, "-c", code] + list(argv), env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)
        server.stop()
