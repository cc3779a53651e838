"""MPI mode on the driver: mpirun whose ranks each start inside their own registered Spark task.

Every task is one mpirun "host" (``hs-rank-<partition>``) with one slot, so mpirun's by-slot
mapping puts MPI rank i in partition i's task, Spark's accounting of cores and GPUs stays true,
and placement is the same as without MPI. mpirun reaches a task through ``mpi_agent`` (its
rsh/ssh agent), which asks the driver service to start mpirun's daemon inside that task. Tree
spawn is off so only this machine ever runs the agent. Needs Open MPI (4 or 5) installed at the
same path on the driver and the executors, and mpi4py on the executors.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from typing import List, Optional, Sequence

from horovod_spark.common import config
from horovod_spark.exceptions import ConfigError, HorovodSparkError

from .agent import host_name

_TAG = re.compile(rb"^\[\d+,(\d+)\]<(stdout|stderr)>:(.*)$", re.S)
_TAIL_LINES = 40


def _is_executable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _mpirun() -> str:
    chosen = config.SPARK_MPIRUN.get()
    if chosen is not None:
        if not _is_executable(chosen):
            raise ConfigError("%s=%r is not an executable file; set it to %s, or unset it to use mpirun on PATH"
                              % (config.SPARK_MPIRUN.name, chosen, config.SPARK_MPIRUN.kind.accepts))
        return chosen
    for path in (shutil.which("mpirun"), os.path.join(os.path.dirname(sys.executable), "mpirun")):
        if path and _is_executable(path):
            return path
    raise HorovodSparkError("use_mpi=True needs Open MPI's mpirun on the driver (PATH or %s)"
                            % config.SPARK_MPIRUN.name)


def _major_version(mpirun: str) -> int:
    out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, timeout=30).stdout
    match = re.search(r"Open MPI\)?\s+(\d+)\.", out)
    if not match:
        raise HorovodSparkError("use_mpi=True supports Open MPI's mpirun; %s --version says: %s"
                                % (mpirun, out.strip()[:200]))
    return int(match.group(1))


class MpiLauncher:
    def __init__(self, service, driver_addr: str, key: bytes, num_proc: int, sink, log,
                 extra_args: Sequence[str] = (), nics: Sequence[str] = ()):
        self._service = service
        self._extra_args = list(extra_args)
        self._nics = list(nics)
        self._num_proc = num_proc
        self._sink = sink
        self._log = log
        self._mpirun = _mpirun()
        self._version = _major_version(self._mpirun)
        self._env = dict(os.environ)
        agent = "%s -m horovod_spark.spark.mpi.agent" % sys.executable
        self._env.update({
            config.SPARK_AGENT_ADDR.name: driver_addr, config.SPARK_AGENT_PORT.name: str(service.port),
            config.SPARK_AGENT_KEY.name: key.hex(),
            # Open MPI 4 (orte) and 5 (prte) spell the launcher settings differently; each
            # ignores the other's.
            "OMPI_MCA_plm_rsh_agent": agent, "OMPI_MCA_plm_rsh_no_tree_spawn": "1",
            "PRTE_MCA_plm_ssh_agent": agent, "PRTE_MCA_plm_ssh_no_tree_spawn": "1",
        })
        # Open MPI's hierarchical collectives (coll/han) group ranks by node; several tasks on one
        # machine are separate mpirun "hosts" but one real node, and han then deadlocks (seen with
        # Open MPI 5.0: the second rank never leaves a 2-rank allreduce). Users may override.
        self._env.setdefault("OMPI_MCA_coll", "^han")
        self._proc: Optional[subprocess.Popen] = None
        self._threads: List[threading.Thread] = []
        self.tail = deque(maxlen=_TAIL_LINES)
        self.exited_at: Optional[float] = None

    def command(self, python: str) -> List[str]:
        cmd = [self._mpirun]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        cmd += ["-np", str(self._num_proc),
                "-H", ",".join("%s:1" % host_name(r) for r in range(self._num_proc)),
                # Without tree spawn, mpirun would otherwise daemonize its daemons (setsid), and
                # they would escape the task's process group that an abort kills.
                "--leave-session-attached", "--tag-output"]
        if self._nics:
            cmd += ["--mca", "btl_tcp_if_include", ",".join(self._nics)]
        cmd += self._extra_args  # (last before the program, so they may override the above)
        cmd += [python, "-m", "horovod_spark.spark.task.rank_main"]
        return cmd

    def poll(self) -> None:
        """Start mpirun once every task registered; note when it exits."""
        if self._proc is None:
            with self._service.condition:
                table = self._service.table
            cmd = self.command(table[0]["python"])
            self._log(2, "starting %s" % " ".join(cmd))
            self._proc = subprocess.Popen(cmd, env=self._env, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          start_new_session=True)
            for stream in ("stdout", "stderr"):
                t = threading.Thread(target=self._pump, args=(stream,), name="hs-mpirun-" + stream,
                                     daemon=True)
                t.start()
                self._threads.append(t)
        elif self.exited_at is None and self._proc.poll() is not None:
            self.exited_at = time.monotonic()

    @property
    def returncode(self) -> Optional[int]:
        return None if self._proc is None else self._proc.poll()

    def _pump(self, stream: str) -> None:
        pipe = getattr(self._proc, stream)
        # Open MPI 5 puts a space after the tag's colon; 4 does not.
        strip = b" " if self._version >= 5 else b""
        for line in iter(pipe.readline, b""):
            match = _TAG.match(line)
            if match and int(match.group(1)) < self._num_proc:
                text = match.group(3)
                if strip and text.startswith(strip):
                    text = text[len(strip):]
                self._sink(int(match.group(1)), [(match.group(2).decode(), time.time(), text)])
            else:
                self.tail.append(line.decode("utf-8", "replace").rstrip("\n"))
                self._log(2, "mpirun: %s" % self.tail[-1])

    def failure_message(self) -> str:
        return ("mpirun exited with code %s and no rank reported a Python exception; its last "
                "output:\n%s" % (self.returncode, "\n".join(self.tail)))

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            for sig, wait_s in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(self._proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self._proc.wait(wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        for t in self._threads:
            t.join(3.0)
