"""One rank's process, started by the Spark task: spawn, stream its output, kill its whole tree.

A child process rather than fn inside the Python worker because Spark reuses Python workers
(spark.python.worker.reuse): a rank that leaves core threads, CUDA contexts or DataLoader workers
behind would poison the next task, and a hung collective could only be stopped by killing the
worker. The rank gets its own session (process group), and stopping it kills its whole process
tree, found through /proc. The task's process is a child subreaper (``launcher/rank_reaper.py``),
so what the rank started and detached (setsid, a daemon's double fork) comes back to it as an
orphan instead of to init, and is killed with the rest.
"""
import os
import selectors
import signal
import subprocess
import threading
import time
from typing import Callable, List, Optional, Tuple

from horovod_spark.launcher import rank_reaper

Chunk = Tuple[str, float, bytes]

_SHIP_INTERVAL = 0.1
_SHIP_BYTES = 256 * 1024


class RankProcess:
    def __init__(self, argv: List[str], env: dict, ship: Callable[[List[Chunk]], None]):
        self._ship = ship
        self._stop = threading.Event()
        rank_reaper.become_subreaper()
        # Children this process has already (another rank's process in MPI mode): not our orphans.
        self._not_adopted = _children(os.getpid())
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
        self.pgid = self.proc.pid  # start_new_session: the child leads its own group
        self.ship_error: Optional[BaseException] = None
        self._pump = threading.Thread(target=self._pump_loop, name="hs-rank-output", daemon=True)
        self._pump.start()

    def _pump_loop(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ, "stdout")
        sel.register(self.proc.stderr, selectors.EVENT_READ, "stderr")
        pending: List[Chunk] = []
        pending_bytes = 0
        last_ship = time.monotonic()
        try:
            while sel.get_map() and not self._stop.is_set():
                for key, _ in sel.select(_SHIP_INTERVAL):
                    data = os.read(key.fileobj.fileno(), 65536)
                    if not data:
                        sel.unregister(key.fileobj)
                        continue
                    pending.append((key.data, time.time(), data))
                    pending_bytes += len(data)
                now = time.monotonic()
                if pending and (pending_bytes >= _SHIP_BYTES or now - last_ship >= _SHIP_INTERVAL):
                    self._send(pending)
                    pending, pending_bytes, last_ship = [], 0, now
            if pending:
                self._send(pending)
        finally:
            sel.close()

    def _send(self, chunks: List[Chunk]) -> None:
        if self.ship_error is not None:
            return  # the driver is gone; keep draining so the rank never blocks on a full pipe
        try:
            self._ship(chunks)
        except BaseException as exc:
            self.ship_error = exc

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            rank_reaper.reap(self._adopted())  # detached processes of the rank that ended: no zombies
            return None

    def poll(self) -> Optional[int]:
        return self.proc.poll()

    def kill_tree(self, grace: float = 1.0) -> int:
        """SIGTERM the rank and everything it started, SIGKILL what is left after ``grace`` s, and
        wait until all of it is gone; returns the rank's exit status. Also called after a normal
        exit, for anything fn forked and left.

        The process group alone is not enough: mpirun's daemon gives each rank its own group, and
        fn may start daemons that call setsid. So the descendants are found through /proc, before
        any dies (an orphan is re-parented away from us and could not be found afterwards).
        """
        victims = self._tree()
        for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.pgid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            rank_reaper.signal_all(victims, sig)
            deadline = time.monotonic() + wait_s
            while True:
                victims = {p for p in victims | self._tree() if rank_reaper.running(p)}
                if not victims or time.monotonic() >= deadline:
                    break
                time.sleep(0.02)
            if not victims:
                break
        rank_reaper.reap(self._adopted())
        rc = self.wait(5.0)
        return rc if rc is not None else -9

    def _tree(self) -> set:
        """The rank's process group, the orphans of the rank that came back to this process (its
        children other than the rank) and their descendants, plus, while the rank is unreaped (so
        its pid cannot have been reused), the rank and all its descendants."""
        table = rank_reaper.process_table()
        members = {pid for pid, (_, pgrp) in table.items() if pgrp == self.pgid}
        for orphan in self._adopted(table):
            members |= {orphan} | rank_reaper.descendants(orphan, table)
        if self.proc.poll() is not None:  # reaps it: it must not linger as a zombie either
            return members
        return members | {self.proc.pid} | rank_reaper.descendants(self.proc.pid, table)

    def _adopted(self, table: Optional[dict] = None) -> set:
        """This process's children that it did not start: the rank's orphans, re-parented here."""
        children = _children(os.getpid(), table)
        return children - self._not_adopted - {self.proc.pid}

    def finish(self, drain_timeout: float = 2.0) -> None:
        """Wait for the output pump to send the last lines; a grandchild still holding the pipes
        open cannot hold us longer than ``drain_timeout``."""
        self._pump.join(drain_timeout)
        self._stop.set()
        self._pump.join(drain_timeout)
        for f in (self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass


def _children(pid: int, table: Optional[dict] = None) -> set:
    """The children of ``pid`` (from ``table`` if given, else a fresh look at /proc)."""
    if table is None:
        try:  # each thread's children, as the kernel lists them: no walk over every process
            found = set()
            for tid in os.listdir("/proc/%d/task" % pid):
                with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                    found.update(int(child) for child in f.read().split())
            return found
        except (OSError, ValueError):
            table = rank_reaper.process_table()
    return {child for child, (ppid, _) in table.items() if ppid == pid}
