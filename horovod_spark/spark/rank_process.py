"""One rank's process, started by the Spark task: spawn, stream its output, kill its whole tree.

A child process rather than fn inside the Python worker because Spark reuses Python workers
(spark.python.worker.reuse): a rank that leaves core threads, CUDA contexts or DataLoader workers
behind would poison the next task, and a hung collective could only be stopped by killing the
worker. In its own session (process group) the rank and anything it forks die with one killpg.
"""
import os
import selectors
import signal
import subprocess
import threading
import time
from typing import Callable, List, Optional, Tuple

Chunk = Tuple[str, float, bytes]

_SHIP_INTERVAL = 0.1
_SHIP_BYTES = 256 * 1024


class RankProcess:
    def __init__(self, argv: List[str], env: dict, ship: Callable[[List[Chunk]], None]):
        self._ship = ship
        self._stop = threading.Event()
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
            return None

    def poll(self) -> Optional[int]:
        return self.proc.poll()

    def kill_tree(self, grace: float = 1.0) -> int:
        """SIGTERM the rank's process group, SIGKILL what is left after ``grace`` s; returns the
        rank's exit status. Also called after a normal exit, for anything fn forked and left."""
        for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.pgid, sig)
            except ProcessLookupError:
                break
            if self.wait(wait_s) is not None and not self._group_alive():
                break
        rc = self.wait(5.0)
        return rc if rc is not None else -9

    def _group_alive(self) -> bool:
        try:
            os.killpg(self.pgid, 0)
            return True
        except ProcessLookupError:
            return False
        except PermissionError:
            return True

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
