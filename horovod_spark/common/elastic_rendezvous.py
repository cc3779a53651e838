"""A rank of an elastic job asks the job's driver (``horovod_spark.launcher.elastic_driver``) who it
is: the driver numbers the job's generations (the sets of workers that form the job, by rank) and
answers each worker with its rank and size in the newest generation that includes it.
"""
from typing import Optional, Tuple

from horovod_spark.common import config
from horovod_spark.common.kv_client import KVClient
from horovod_spark.exceptions import ElasticJobError

# The driver's ops (served by ElasticDriver on the job's KV service).
OP_ASSIGN = "elastic_assign"
OP_GENERATION = "elastic_generation"
OP_ALIVE = "elastic_alive"

# Where the driver cannot watch a rank's process (a Spark executor), the process that supervises
# it says this often that the rank is alive; a rank silent for a few of these is lost.
HEARTBEAT_S = 1.0


def worker() -> int:
    return config.ELASTIC_WORKER.require(hint="the elastic launchers set it for every rank")


def assignment(after_generation: int, timeout: float, environ=None) -> Tuple[int, int, int]:
    """(generation, rank, size) of this worker in the first generation newer than
    ``after_generation``, waiting up to ``timeout`` s for the driver to form it."""
    with KVClient.from_env(environ) as client:
        try:
            reply = client.request(OP_ASSIGN, worker(), int(after_generation), float(timeout), wait=float(timeout))
        except TimeoutError:
            raise ElasticJobError("worker %d waited %.0f s for the elastic driver to form the job again "
                                  "(HOROVOD_ELASTIC_TIMEOUT)" % (worker(), timeout)) from None
    if reply[0] == "failed":
        raise ElasticJobError(reply[1])
    if reply[0] == "excluded":
        raise ElasticJobError("worker %d is no longer part of the elastic job: %s" % (worker(), reply[1]))
    _, generation, rank, size = reply
    return generation, rank, size


def newest_generation(environ=None) -> int:
    """The generation the driver has formed most recently."""
    with KVClient.from_env(environ) as client:
        return client.request(OP_GENERATION)


def superseded_check(generation: int, environ=None):
    """For hvd.init()'s wait for its peers: a function returning why the wait is pointless (the
    driver has formed a newer generation, e.g. because a peer was lost meanwhile), else None."""
    def check() -> Optional[str]:
        newest = newest_generation(environ)
        if newest > generation:
            return ("the elastic job's membership changed while hvd.init() waited for generation %d "
                    "(now %d)" % (generation, newest))
        return None
    return check
