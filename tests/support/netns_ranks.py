"""Ranks started on namespace hosts without Spark: the launcher's rendezvous, ranks placed by hand.

``NetnsRanks(hosts, per_host=[1, 2, 3], argv)`` serves the launcher's authenticated KV service on
the bridge address (``netns_hosts.ROOT_ADDR``) and starts ``per_host[i]`` ranks of ``argv`` on host
``i`` (ranks numbered host by host), each with the launcher's rank environment
(``local_job.rank_environment``) and HOROVOD_HOSTNAME set to its host. Each stdout line that
starts with ``marker`` (default ``RESULT ``) is collected as JSON, by rank, as it arrives (``lines``), with the time it
was read (``arrived``).
"""
import json
import os
import subprocess
import threading
import time
import uuid
from typing import Dict, List, Mapping, Optional, Sequence

from horovod_spark.common import config, wire
from horovod_spark.common.kv_server import KVStoreServer
from horovod_spark.launcher.local_job import rank_environment
from support.netns_hosts import ROOT_ADDR, NetnsHosts

MARKER = "RESULT "
TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class NetnsRanks:
    """A context manager; ``wait()`` returns every rank's exit code."""

    def __init__(self, hosts: NetnsHosts, per_host: Sequence[int], argv: Sequence[str],
                 env: Optional[Mapping[str, str]] = None, marker: str = MARKER):
        self.hosts = hosts
        self.host_of = [i for i, k in enumerate(per_host) for _ in range(k)]
        self.size = len(self.host_of)
        self.argv = list(argv)
        self.secret = wire.make_secret()
        self.server = KVStoreServer(self.secret, host=ROOT_ADDR)
        self.extra_env = dict(env or {})
        self.marker = marker
        self.procs: List[subprocess.Popen] = []
        self.lines: Dict[int, List[dict]] = {r: [] for r in range(self.size)}
        self.arrived: Dict[int, List[float]] = {r: [] for r in range(self.size)}
        self.stderr: Dict[int, List[str]] = {r: [] for r in range(self.size)}
        self._threads: List[threading.Thread] = []

    def start(self) -> "NetnsRanks":
        port = self.server.start()
        scope = "netns-" + uuid.uuid4().hex
        base = dict(os.environ)
        base["PYTHONPATH"] = os.pathsep.join(p for p in (TESTS_DIR, base.get("PYTHONPATH", "")) if p)
        base.update(self.extra_env)
        for rank, host in enumerate(self.host_of):
            env = rank_environment(rank, self.size, port, self.secret, scope, base, hostname=self.hosts.name(host))
            local = [r for r, h in enumerate(self.host_of) if h == host]
            cross = [h for h in dict.fromkeys(self.host_of) if self.host_of.count(h) > local.index(rank)]
            env.update({config.RENDEZVOUS_ADDR.name: ROOT_ADDR,
                        config.LOCAL_RANK.name: str(local.index(rank)), config.LOCAL_SIZE.name: str(len(local)),
                        config.CROSS_RANK.name: str(cross.index(host)), config.CROSS_SIZE.name: str(len(cross))})
            p = self.hosts.popen(host, self.argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.procs.append(p)
            for stream, sink in ((p.stdout, self._on_stdout), (p.stderr, self._on_stderr)):
                t = threading.Thread(target=self._pump, args=(stream, rank, sink), daemon=True)
                t.start()
                self._threads.append(t)
        return self

    def _pump(self, stream, rank, sink):
        for line in stream:
            sink(rank, line)

    def _on_stdout(self, rank, line):
        if line.startswith(self.marker):
            self.arrived[rank].append(time.time())
            self.lines[rank].append(json.loads(line[len(self.marker):]))

    def _on_stderr(self, rank, line):
        self.stderr[rank].append(line)

    def wait_for(self, predicate, timeout: float, what: str) -> None:
        """Wait until ``predicate(self)`` holds, or fail naming ``what`` and the ranks' stderr."""
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if time.monotonic() > deadline:
                raise AssertionError("waited %.0f s for %s; stderr tails:\n%s" % (timeout, what, self.stderr_tails()))
            time.sleep(0.05)

    def wait(self, timeout: float) -> List[int]:
        deadline = time.monotonic() + timeout
        codes = []
        for rank, p in enumerate(self.procs):
            try:
                codes.append(p.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                raise AssertionError("rank %d did not exit within %.0f s; stderr tails:\n%s"
                                     % (rank, timeout, self.stderr_tails())) from None
        for t in self._threads:
            t.join(timeout=5)
        return codes

    def stderr_tails(self, lines: int = 8) -> str:
        return "\n".join("rank %d: %s" % (r, "".join(v[-lines:])) for r, v in self.stderr.items())

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, 9)
                except ProcessLookupError:
                    pass
                p.wait(timeout=10)
        self.server.stop()

    def __enter__(self) -> "NetnsRanks":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
