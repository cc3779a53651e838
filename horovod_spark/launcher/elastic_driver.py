"""The membership of an elastic job, served to its ranks on the job's KV service.

Workers are processes numbered for life (worker 0, 1, ...); a generation is the list of workers that
form the job, in rank order. The driver forms generation 1 from the workers it starts, and a new one
whenever a worker is lost (the survivors, in their old rank order, so rank 0 is a worker that holds
the committed state) or added (appended after the survivors). Ranks ask for their place in the
first generation newer than the one they last joined (``elastic_assign``) and, at each commit,
rank 0 asks for the newest generation (``elastic_generation``) to learn of added workers.
"""
import time
from typing import Dict, List, Optional

from horovod_spark.common import elastic_rendezvous
from horovod_spark.common.kv_server import KVStoreServer, RequestError


class ElasticDriver:
    """Generations of an elastic job; ``form(workers)`` makes a new one and wakes waiting ranks."""

    def __init__(self, server: KVStoreServer):
        self._server = server
        self.generation = 0
        self.members: List[int] = []
        self.removed: set = set()   # workers that will never be part of a generation again
        self.failure: Optional[str] = None
        self.last_seen: Dict[int, float] = {}  # worker -> time.monotonic() of its last heartbeat
        self.assigned: Dict[int, int] = {}     # worker -> the newest generation it was given a rank in
        server.add_handler(elastic_rendezvous.OP_ASSIGN, self._handle_assign)
        server.add_handler(elastic_rendezvous.OP_GENERATION, self._handle_generation)
        server.add_handler(elastic_rendezvous.OP_ALIVE, self._handle_alive)

    def form(self, workers: List[int]) -> int:
        """Make ``workers`` (in rank order) the next generation; returns its number."""
        with self._server.condition:
            self.generation += 1
            self.members = list(workers)
            self._server.condition.notify_all()
            return self.generation

    def remove(self, worker: int) -> None:
        with self._server.condition:
            self.removed.add(worker)
            self._server.condition.notify_all()

    def fail(self, message: str) -> None:
        """End the job: every rank waiting for a generation, and every later ask, gets ``message``."""
        with self._server.condition:
            self.failure = message
            self._server.condition.notify_all()

    def _handle_assign(self, worker, after, timeout):
        if not isinstance(worker, int) or not isinstance(after, int) or not isinstance(timeout, (int, float)):
            raise RequestError("elastic_assign takes (worker number, generation, timeout)")

        def ready():
            if self.failure is not None:
                return ("failed", self.failure)
            if worker in self.removed:
                return ("excluded", "the driver removed worker %d from the job" % worker)
            if self.generation > after and worker in self.members:
                self.assigned[worker] = self.generation
                return ("ok", self.generation, self.members.index(worker), len(self.members))
            return None

        with self._server.condition:
            return self._server.wait_until(
                ready, float(timeout),
                lambda: "worker %d waited %.0f s for a generation after %d (now %d: workers %s)"
                        % (worker, timeout, after, self.generation, self.members))

    def _handle_alive(self, worker):
        if not isinstance(worker, int):
            raise RequestError("elastic_alive takes a worker number")
        with self._server.condition:
            self.last_seen[worker] = time.monotonic()

    def silent_since(self, worker: int, default: float) -> float:
        """Seconds since ``worker``'s last heartbeat (since ``default``, a monotonic time, if none)."""
        with self._server.condition:
            return time.monotonic() - self.last_seen.get(worker, default)

    def _handle_generation(self):
        with self._server.condition:
            return self.generation
