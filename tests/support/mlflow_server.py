"""A real MLflow tracking server for the tests: ``mlflow server`` with a SQLite backend and a local
artifact store, on a free port of 127.0.0.1, in its own process group so that stopping it also stops
the workers it forks (also when the test using it fails)."""
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

STARTUP_SECONDS = 90


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _healthy(uri: str) -> bool:
    try:
        with urllib.request.urlopen(uri + "/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def mlflow_server(directory: str):
    """Yields the tracking URI of a server whose database and artifacts live under ``directory``."""
    port = free_port()
    uri = "http://127.0.0.1:%d" % port
    mlflow_cli = os.path.join(os.path.dirname(sys.executable), "mlflow")
    command = [mlflow_cli, "server", "--backend-store-uri", "sqlite:///%s" % os.path.join(directory, "mlflow.db"),
               "--artifacts-destination", os.path.join(directory, "artifacts"), "--host", "127.0.0.1",
               "--port", str(port), "--workers", "1"]
    log_path = os.path.join(directory, "server.log")
    with open(log_path, "wb") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not _healthy(uri):
            if server.poll() is not None or time.monotonic() > deadline:
                with open(log_path, errors="replace") as f:
                    raise RuntimeError("mlflow server did not come up on %s (exit code %r):\n%s"
                                       % (uri, server.poll(), f.read()[-3000:]))
            time.sleep(0.5)
        yield uri
    finally:
        _stop(server)


def _stop(server) -> None:
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 15)):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            return
        try:
            server.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue
