"""A Spark standalone cluster across namespace hosts: the master on host 0, one worker per host.

Started with the pip package's ``spark-class`` entry points, each inside its host's namespace, so
executors see their own network stack and hostname. The driver (this process) stays in the root
namespace and talks to the cluster over the bridge address ``netns_hosts.ROOT_ADDR``: sessions for
this cluster set ``spark.driver.host`` / ``spark.driver.bindAddress`` to it (``driver_conf()``).

``start()`` waits (with a timeout) until the master lists every worker ALIVE and fails with the
tail of the daemons' logs otherwise.
"""
import json
import os
import sys
import tempfile
import time
import urllib.request
from typing import Dict, List, Optional

from support.netns_hosts import ROOT_ADDR, NetnsHosts

MASTER_PORT = 7077
MASTER_UI_PORT = 8080


def spark_class() -> str:
    """The ``spark-class`` script of the installed pyspark package."""
    import pyspark
    path = os.path.join(os.path.dirname(pyspark.__file__), "bin", "spark-class")
    if not os.path.exists(path):
        raise RuntimeError("pyspark at %s has no bin/spark-class; a standalone cluster needs the full pip "
                           "package" % os.path.dirname(pyspark.__file__))
    return path


class StandaloneCluster:
    """Master + one ``cores``-core worker on every host of ``hosts``; a context manager."""

    def __init__(self, hosts: NetnsHosts, cores: int = 2, worker_memory: str = "2g",
                 start_timeout: float = 120.0):
        self.hosts = hosts
        self.cores = cores
        self.worker_memory = worker_memory
        self.start_timeout = start_timeout
        self.workdir = tempfile.mkdtemp(prefix="standalone-")
        self._logs: List[str] = []
        self._procs = []

    @property
    def master_url(self) -> str:
        return "spark://%s:%d" % (self.hosts.addr(0), MASTER_PORT)

    def driver_conf(self) -> Dict[str, str]:
        """Spark settings a driver in the root namespace needs for this cluster."""
        return {
            "spark.driver.host": ROOT_ADDR,
            "spark.driver.bindAddress": ROOT_ADDR,
            "spark.executor.memory": "1g",
            "spark.executor.cores": str(self.cores),
            "spark.cores.max": str(self.cores * self.hosts.n),
            "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        }

    def _env(self) -> Dict[str, str]:
        env = dict(os.environ)
        env.update({"PYSPARK_PYTHON": sys.executable, "SPARK_NO_DAEMONIZE": "1",
                    "SPARK_WORKER_DIR": os.path.join(self.workdir, "work")})
        # The driver's address for this cluster: without it the Spark scripts would resolve the
        # root hostname, which the hosts cannot reach.
        env.pop("SPARK_LOCAL_IP", None)
        return env

    def _start_daemon(self, i: int, name: str, argv: List[str], env: Dict[str, str]) -> None:
        log = os.path.join(self.workdir, "%s-%s.log" % (name, self.hosts.name(i)))
        self._logs.append(log)
        env = dict(env, SPARK_LOCAL_IP=self.hosts.addr(i))
        with open(log, "wb") as out:
            self._procs.append(self.hosts.popen(i, [spark_class()] + argv, stdout=out, stderr=out, env=env))

    def start(self) -> "StandaloneCluster":
        env = self._env()
        self._start_daemon(0, "master", ["org.apache.spark.deploy.master.Master", "--host", self.hosts.addr(0),
                                         "--port", str(MASTER_PORT), "--webui-port", str(MASTER_UI_PORT)], env)
        for i in range(self.hosts.n):
            self._start_daemon(i, "worker", ["org.apache.spark.deploy.worker.Worker", "--host", self.hosts.addr(i),
                                             "--cores", str(self.cores), "--memory", self.worker_memory,
                                             "--work-dir", os.path.join(self.workdir, "work-%d" % i),
                                             self.master_url], env)
        self._wait_for_workers()
        return self

    def alive_workers(self) -> Optional[List[str]]:
        """Hosts of the workers the master lists ALIVE, or None while the master does not answer."""
        url = "http://%s:%d/json/" % (self.hosts.addr(0), MASTER_UI_PORT)
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                state = json.loads(r.read().decode())
        except (OSError, ValueError):
            return None
        return sorted(w.get("host", "") for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def _wait_for_workers(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        alive = None
        while time.monotonic() < deadline:
            alive = self.alive_workers()
            if alive is not None and len(alive) >= self.hosts.n:
                return
            time.sleep(0.5)
        raise RuntimeError("the standalone cluster did not come up within %.0f s: the master at %s lists %s of %d "
                           "workers alive. Daemon logs:\n%s"
                           % (self.start_timeout, self.master_url, "no answer" if alive is None else len(alive),
                              self.hosts.n, self.log_tails()))

    def log_tails(self, lines: int = 15) -> str:
        out = []
        for path in self._logs:
            try:
                with open(path, errors="replace") as f:
                    tail = f.readlines()[-lines:]
            except OSError:
                tail = ["(no log)\n"]
            out.append("--- %s\n%s" % (path, "".join(tail)))
        return "\n".join(out)

    def stop(self) -> None:
        """Stop the daemons (their executors go with the worker's process group) and remove the files."""
        import shutil
        import signal
        for p in self._procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "StandaloneCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
