"""The task's line from the driver: a long poll of the service's ``control`` op on its own connection.

An abort (another rank failed, run() was interrupted or timed out) reaches the task within
milliseconds and the rank's process tree is killed; losing this connection means the driver is
gone, which is handled the same way, so no rank outlives its run(). In MPI mode the same poll
delivers mpirun's daemon command.
"""
import socket
import threading
from typing import Optional

from horovod_spark.common.kv_client import KVClient

from .rank_process import RankProcess

_CONTROL_POLL_S = 10.0


class _InterruptibleClient(KVClient):
    """KVClient.close() waits for the request in flight (it takes the client's lock); a long poll
    the driver no longer answers needs its socket shut down from another thread instead."""

    def interrupt(self) -> None:
        session = self._session
        if session is not None:
            try:
                session.sock.shutdown(socket.SHUT_RDWR)
            except (OSError, ValueError):
                pass


class TaskControl(threading.Thread):
    """Long-polls the driver for commands; on abort or a lost driver, kills the rank."""

    def __init__(self, spec, addr: str, rank: int, on_exec=None):
        super().__init__(name="hs-task-control", daemon=True)
        self._client = _InterruptibleClient(addr, spec.port, spec.key, tls=spec.tls)
        self._rank = rank
        self._on_exec = on_exec
        self._lock = threading.Lock()
        self._target: Optional[RankProcess] = None
        self.abort_reason: Optional[str] = None
        self.lost_driver: Optional[str] = None
        self._done = threading.Event()

    def watch(self, proc: Optional[RankProcess]) -> None:
        with self._lock:
            self._target = proc
            if proc is not None and (self.abort_reason or self.lost_driver):
                proc.kill_tree()

    def run(self) -> None:
        try:
            while not self._done.is_set():
                try:
                    commands = self._client.request("control", self._rank, _CONTROL_POLL_S,
                                                    wait=_CONTROL_POLL_S)
                except Exception as exc:
                    if not self._done.is_set():
                        self._stop_rank(lost="lost the driver service: %s" % exc)
                    return
                for command in commands:
                    if command[0] == "abort":
                        self._stop_rank(abort=command[1])
                        return
                    if command[0] == "stop":
                        return
                    if command[0] == "exec" and self._on_exec is not None:
                        self._on_exec(*command[1:])
        finally:
            self._client.close()

    def _stop_rank(self, abort: Optional[str] = None, lost: Optional[str] = None) -> None:
        with self._lock:
            self.abort_reason = abort
            self.lost_driver = lost
            target = self._target
        if target is not None:
            target.kill_tree()

    def close(self, timeout: float) -> None:
        self._done.set()
        self.join(timeout)
        if self.is_alive():
            # Still inside a long poll the driver has not answered: cut the socket under it.
            self._client.interrupt()
            self.join(timeout)
