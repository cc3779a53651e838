"""The body of each task of ``run_elastic``, run inside Spark's Python worker on an executor.

register with the driver as a new worker -> start the rank process (``run_local_rank`` with the
elastic environment) under a supervisor that SIGKILLs it if this worker dies -> wait for it, sending
heartbeats and the rank's output to the driver -> report its exit code. Unlike ``run``'s barrier
tasks these are ordinary tasks: Spark reschedules one whose executor was lost, and runs again one
that failed, which a task does when its rank failed (fn raised, or the process died) while the job
goes on; either way the new attempt registers as a new worker and takes the lost rank's place.
"""
import os
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from horovod_spark.common import config, elastic_rendezvous
from horovod_spark.spark.task.body import DROP_ENV, connect_to_driver

from .output import RELAYED_LINE_LIMIT, TaskOutput

OP_REGISTER = "elastic_register"
OP_EXIT = "elastic_exit"


@dataclass
class ElasticTaskSpec:
    job_id: str
    driver_addrs: List[str]
    port: int
    key: bytes
    elastic_timeout: float
    env: Dict[str, str] = field(default_factory=dict)
    executable: Optional[str] = None


def _connect(spec: ElasticTaskSpec):
    return connect_to_driver(spec.driver_addrs, spec.port, spec.key, "run_elastic driver")


def _rank_env(spec: ElasticTaskSpec, addr: str, worker: int) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in DROP_ENV}
    env.update(spec.env)
    for variable in (config.RANK, config.SIZE, config.LOCAL_RANK, config.LOCAL_SIZE, config.CROSS_RANK,
                     config.CROSS_SIZE):
        env.pop(variable.name, None)  # the driver assigns these, generation by generation
    env.update({
        config.RENDEZVOUS_ADDR.name: addr,
        config.RENDEZVOUS_PORT.name: str(spec.port),
        config.SECRET_KEY.name: spec.key.hex(),
        config.RUN_SCOPE.name: spec.job_id,
        config.ELASTIC.name: "1",
        config.ELASTIC_WORKER.name: str(worker),
        config.ELASTIC_TIMEOUT.name: repr(float(spec.elastic_timeout)),
        "PYTHONUNBUFFERED": "1",
    })
    env.setdefault(config.HOSTNAME.name, socket.gethostname())
    return env


def run_elastic_task(spec: ElasticTaskSpec, _iterator):
    """mapPartitions body: yields (worker, exit code), or nothing when the driver did not need it."""
    from pyspark import TaskContext

    from horovod_spark.launcher.supervisor import RankSupervisor

    ctx = TaskContext.get()
    client, addr = _connect(spec)
    with client:
        worker = client.request(OP_REGISTER, ctx.partitionId(), ctx.attemptNumber(), socket.gethostname())
        if worker < 0:
            return []  # the job is full or finishing
        python = spec.executable or sys.executable
        argv = [python, "-m", "horovod_spark.launcher.run_local_rank"]
        output = TaskOutput()
        supervisor = RankSupervisor([argv], [_rank_env(spec, addr, worker)], first_label=worker,
                                    stdout=output.stdout, stderr=output.stderr, prefix_output=False,
                                    line_limit=RELAYED_LINE_LIMIT)
        failure = None
        try:
            supervisor.start()
            next_beat = 0.0
            while True:
                failure = supervisor.poll() or failure
                if not supervisor.running_ranks():
                    break
                if time.monotonic() >= next_beat:
                    # The driver cannot see this executor's processes: it counts on this heartbeat,
                    # sent from here rather than from the rank, whose threads may be busy for seconds.
                    next_beat = time.monotonic() + elastic_rendezvous.HEARTBEAT_S
                    try:
                        client.request(elastic_rendezvous.OP_ALIVE, worker)
                    except (OSError, TimeoutError):
                        pass  # the next beat tries again; the driver decides when silence means lost
                output.ship(client, worker)
                time.sleep(0.05)
        finally:
            supervisor.stop()
        output.ship(client, worker, None)  # the last lines, drained by stop(), before the driver hears of the exit
        returncode = failure.returncode if failure is not None else 0
        replace = client.request(OP_EXIT, worker, returncode)
    if returncode != 0 and replace:
        # Failing the task is how Spark learns to run it again (spark.task.maxFailures); the
        # driver has the rank's traceback, and names it in the job's error if the job cannot go on.
        raise RuntimeError("worker %d of elastic job %s exited with code %d; this task fails so that Spark runs "
                           "it again to replace the rank" % (worker, spec.job_id, returncode))
    return [(worker, returncode)]
