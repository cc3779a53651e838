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


class MlflowServer:
    """``mlflow server`` started at once (``start``), waited for when needed (``wait``): its start-up
    of several seconds can overlap the caller's own set-up (a SparkSession)."""

    def __init__(self, directory: str):
        self.directory = directory
        self.uri = None
        self._process = None
        self._log_path = os.path.join(directory, "server.log")

    def start(self) -> "MlflowServer":
        port = free_port()
        self.uri = "http://127.0.0.1:%d" % port
        mlflow_cli = os.path.join(os.path.dirname(sys.executable), "mlflow")
        command = [mlflow_cli, "server", "--backend-store-uri",
                   "sqlite:///%s" % os.path.join(self.directory, "mlflow.db"),
                   "--artifacts-destination", os.path.join(self.directory, "artifacts"), "--host", "127.0.0.1",
                   "--port", str(port), "--workers", "1"]
        with open(self._log_path, "wb") as log:
            self._process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def wait(self) -> str:
        """The tracking URI, once the server answers its health check."""
        deadline = time.monotonic() + STARTUP_SECONDS
        while not _healthy(self.uri):
            if self._process.poll() is not None or time.monotonic() > deadline:
                with open(self._log_path, errors="replace") as f:
                    raise RuntimeError("mlflow server did not come up on %s (exit code %r):\n%s"
                                       % (self.uri, self._process.poll(), f.read()[-3000:]))
            time.sleep(0.5)
        return self.uri

    def stop(self) -> None:
        """Stop the server and every process of its group (also when it never came up)."""
        if self._process is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self._process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self._process.wait(15)
                return
            except subprocess.TimeoutExpired:
                continue


@contextlib.contextmanager
def mlflow_server(directory: str):
    """Yields the tracking URI of a server whose database and artifacts live under ``directory``."""
    server = MlflowServer(directory)
    try:
        server.start()
        yield server.wait()
    finally:
        server.stop()
