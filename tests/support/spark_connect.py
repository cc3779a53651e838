"""A real Spark Connect server for the tests, started from the pip package's jars.

``ConnectServer(master)`` runs ``spark-submit --class ...SparkConnectServer`` in the foreground (its
own process group, so stopping it also stops the JVM that spark-submit execs), bound to 127.0.0.1 on
a free port, with this interpreter as the executors' Python and this checkout on their PYTHONPATH.
``start()`` waits until the server listens, with a timeout whose message carries the
server's log tail; ``stop()`` always ends the process group.
"""
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

_START_TIMEOUT_S = 180.0
# Set by pyspark in this process when it builds a remote session.
_CLIENT_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ConnectServer:
    def __init__(self, master: str, conf=None):
        import pyspark

        import horovod_spark
        self.master = master
        self.port = free_port()
        self._spark_home = os.path.dirname(os.path.abspath(pyspark.__file__))
        self._repo_root = os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__)))
        self._conf = dict(conf or {})
        self._log = tempfile.NamedTemporaryFile(prefix="spark-connect-server-", suffix=".log", delete=False)
        self._proc = None

    @property
    def url(self) -> str:
        return "sc://127.0.0.1:%d" % self.port

    def _command(self):
        jars = os.path.join(self._spark_home, "jars")
        connect_jar = next((os.path.join(jars, name) for name in sorted(os.listdir(jars))
                            if name.startswith("spark-connect_") and name.endswith(".jar")), None)
        if connect_jar is None:
            raise RuntimeError("pyspark at %s ships no jars/spark-connect_*.jar; install pyspark[connect] "
                               "from the lock file" % self._spark_home)
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.executorEnv.PYTHONPATH": self._repo_root,
            "spark.executorEnv.TF_CPP_MIN_LOG_LEVEL": "2",
            "spark.pyspark.python": sys.executable,
        }
        conf.update(self._conf)
        argv = [os.path.join(self._spark_home, "bin", "spark-submit"), "--master", self.master,
                "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
                "--name", "horovod_spark tests (Spark Connect)"]
        for key, value in conf.items():
            argv += ["--conf", "%s=%s" % (key, value)]
        return argv + [connect_jar]

    def start(self, timeout: float = _START_TIMEOUT_S) -> "ConnectServer":
        env = dict(os.environ)
        env.update({"PYSPARK_PYTHON": sys.executable, "SPARK_HOME": self._spark_home,
                    "SPARK_LOCAL_IP": "127.0.0.1",
                    "PYTHONPATH": os.pathsep.join(p for p in (self._repo_root, env.get("PYTHONPATH")) if p)})
        env.pop("PYSPARK_DRIVER_PYTHON", None)
        self._proc = subprocess.Popen(self._command(), stdout=self._log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError("the Spark Connect server (%s) exited with code %d before it served; "
                                   "its log ends:\n%s" % (self.master, self._proc.returncode, self.log_tail()))
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.settimeout(1.0)
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.5)
        raise TimeoutError("the Spark Connect server (%s) did not listen on 127.0.0.1:%d within %.0f s; "
                           "its log ends:\n%s" % (self.master, self.port, timeout, self.log_tail()))

    def session(self):
        """A client session; its first query waits until the server's SparkContext is up."""
        from pyspark.sql import SparkSession
        return SparkSession.builder.remote(self.url).getOrCreate()

    def log_tail(self, lines: int = 40) -> str:
        try:
            with open(self._log.name, "r", errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, grace: float = 20.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._log.close()
        try:
            os.unlink(self._log.name)
        except OSError:
            pass


@contextlib.contextmanager
def remote_session(master: str, conf=None):
    """A started server and a client session on it; both stopped on exit, also after a failure.
    The environment variables pyspark sets when it builds a remote session are restored, so a
    later test module's classic SparkSession is classic again."""
    saved = {name: os.environ.get(name) for name in _CLIENT_ENV}
    server = ConnectServer(master, conf).start()
    session = None
    try:
        session = server.session()
        yield session
    finally:
        try:
            if session is not None:
                session.stop()
        finally:
            server.stop()
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
