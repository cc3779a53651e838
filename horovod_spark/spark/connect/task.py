"""The barrier task of a run() from a Spark Connect client, run by ``mapInPandas(..., barrier=True)``.

Over Spark Connect the client may not reach the executors nor they the client, so the service
the classic driver hosts (rendezvous KV store, registration, failure reports, the control long
poll: ``DriverService``) runs inside rank 0's task instead. Rank 0 publishes its address through
``BarrierTaskContext.allGather``; then every task runs the classic task body (``task.run_task``)
against it. What the classic driver receives over sockets comes back to the client as each task's
one output row instead (a pickled report of plain values): the rank's status and cloudpickled
result, and from rank 0 also every rank's failure reports and output, which therefore reach the
client when the stage ends. Rank 0 also writes that output, prefixed, to its executor's stderr
as it arrives, so the executor log shows it live.
"""
import json
import pickle
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import cloudpickle

from horovod_spark.common import wire_tls
from horovod_spark.common.line_sink import LineAssembler, marked
from horovod_spark.spark.driver.results import ResultSpool
from horovod_spark.spark.driver.service import DriverService
from horovod_spark.spark.task.body import TaskSpec, run_task

SCHEMA = "partition long, report binary"
# Rank output kept in rank 0's task for the client; beyond it lines are dropped and counted.
OUTPUT_LIMIT_BYTES = 64 << 20
# After a first failure, how long rank 0 waits for the root cause's own report before stopping
# the other ranks (a rank whose peer died reports first, see supervise._ROOT_CAUSE_WAIT_S).
_ROOT_CAUSE_WAIT_S = 5.0
_CONSEQUENTIAL = ("HorovodInternalError",)
# After an abort, how long rank 0 waits for the other tasks to confirm their ranks exited.
_EXIT_CONFIRM_S = 10.0


@dataclass
class ConnectSpec:
    """What every task gets in the stage's closure (the secret travels as the plan does)."""
    job_id: str
    key: bytes
    num_proc: int
    call: bytes
    start_timeout: float
    host_key_mode: str
    env: Dict[str, str] = field(default_factory=dict)
    executable: Optional[str] = None
    tls: bool = False  # HOROVOD_SPARK_TLS on the client: rank 0's service speaks TLS
    max_result_bytes: Optional[int] = None  # HOROVOD_SPARK_MAX_RESULT_BYTES on the client
    data_plane_auth: bool = False  # HOROVOD_SPARK_DATA_PLANE_AUTH as the client resolved it

    def task_spec(self, addrs: List[str], port: int, tls: bool) -> TaskSpec:
        return TaskSpec(job_id=self.job_id, driver_addrs=addrs, port=port, key=self.key, num_proc=self.num_proc,
                        call=self.call, start_timeout=self.start_timeout, host_key_mode=self.host_key_mode,
                        env=dict(self.env), use_mpi=False, executable=self.executable, tls=tls,
                        data_plane_auth=self.data_plane_auth)


class _OutputLog:
    """Rank output collected in rank 0's task for the client, within OUTPUT_LIMIT_BYTES, and
    written to the task's stderr (its executor's log) as it arrives."""

    def __init__(self):
        self.chunks: List[tuple] = []
        self.dropped = 0
        self._bytes = 0
        self._lines: Dict[tuple, LineAssembler] = {}
        self._lock = threading.Lock()

    def __call__(self, rank: int, chunks) -> None:
        with self._lock:
            for stream, t, data in chunks:
                if self._bytes + len(data) > OUTPUT_LIMIT_BYTES:
                    self.dropped += len(data)
                    continue
                self._bytes += len(data)
                self.chunks.append((rank, stream, t, data))
                for line, complete in self._lines.setdefault((rank, stream), LineAssembler()).feed(data):
                    text = marked(line.decode("utf-8", "replace").rstrip("\r"), complete)
                    sys.stderr.write("[%d]<%s>:%s\n" % (rank, stream, text))
            sys.stderr.flush()

    def close(self) -> None:
        """Write the ranks' last lines that never got their newline."""
        with self._lock:
            for (rank, stream), lines in sorted(self._lines.items()):
                rest = lines.rest()
                if rest:
                    sys.stderr.write("[%d]<%s>:%s\n" % (rank, stream, rest.decode("utf-8", "replace")))
            self._lines.clear()
            sys.stderr.flush()


class RankZeroHub:
    """The service in rank 0's task, plus what the classic driver's wait_for_outcome() does with it:
    stop every rank once one failed, and wait until all confirmed their processes are gone."""

    def __init__(self, spec: ConnectSpec):
        self.spec = spec
        self.output = _OutputLog()
        self.service = DriverService(spec.key, spec.num_proc, spec.job_id, self.output, host="0.0.0.0")
        if spec.tls and self.service.tls is None:
            self.service.tls = wire_tls.ServerTLS()  # a certificate made for this job
        # The ranks send their results to this service (results.send), as to a classic driver's.
        self.spool = ResultSpool(self.service, spec.max_result_bytes)
        self._started = time.monotonic()
        self._watcher = threading.Thread(target=self._watch, name="hs-connect-watch", daemon=True)

    def start(self, executor_address: str) -> dict:
        self.service.start()
        self._watcher.start()
        addrs = [executor_address.rsplit(":", 1)[0]] if executor_address else []
        try:
            addrs.append(socket.gethostbyname(socket.gethostname()))
        except OSError:
            pass
        addrs = [a for i, a in enumerate(addrs) if a and a not in addrs[:i]] or ["127.0.0.1"]
        return {"addrs": addrs, "port": self.service.port, "tls": self.service.tls is not None}

    def _all_exited(self) -> bool:
        return len(self.service.exited) >= self.spec.num_proc

    def _watch(self) -> None:
        service = self.service
        with service.condition:
            service.condition.wait_for(lambda: service.failures or self._all_exited() or service.abort_reason)
            if not service.failures or self._all_exited():
                return
            # A rank that lost its peer may report before the peer's own traceback arrives.
            service.condition.wait_for(
                lambda: any(f["exc_type"] not in _CONSEQUENTIAL for f in service.failures)
                or len({f["rank"] for f in service.failures}) >= self.spec.num_proc,
                timeout=_ROOT_CAUSE_WAIT_S)
        service.abort("another rank failed")

    def close(self) -> None:
        """Stop without a run (the run never started): wake the watcher and stop the service."""
        self.service.abort("the run did not start")
        if self._watcher.ident is not None:
            self._watcher.join(1.0)
        self.service.stop()
        self.spool.close()

    def finish(self) -> dict:
        """Wait for every rank's exit (or, when some never registered, for start_timeout), stop the
        service and return what the client needs from it."""
        service = self.service
        give_up = self._started + self.spec.start_timeout + 35.0
        with service.condition:
            while not self._all_exited():
                if service.table is None and time.monotonic() >= give_up:
                    break
                service.condition.wait(1.0)
        if not self._all_exited():
            service.abort("ranks %s never registered with rank 0's task" % service.missing_partitions())
            service.wait_exited(range(self.spec.num_proc), _EXIT_CONFIRM_S)
        with service.condition:
            failures = list(service.failures)
            missing = service.missing_partitions_locked()
            service.abort_reason = service.abort_reason or "the run is over"
            service.condition.notify_all()
        self._watcher.join(1.0)
        service.stop()
        self.output.close()
        results = {}
        try:
            if not failures:
                for rank in range(self.spec.num_proc):
                    results[rank] = cloudpickle.dumps(self.spool.load(rank))
        except Exception as exc:
            failures.append({"rank": rank, "exc_type": type(exc).__name__, "message": str(exc),
                             "traceback": traceback.format_exc(), "host": socket.gethostname()})
        finally:
            self.spool.close()
        return {"failures": failures, "output": self.output.chunks, "output_dropped": self.output.dropped,
                "missing": missing, "results": results}


def _error(exc: BaseException, what: str) -> tuple:
    return (type(exc).__name__, "%s: %s" % (what, exc), traceback.format_exc())


def stage(spec: ConnectSpec, batches):
    """mapInPandas body: one output row per task, ``(partition, pickled report)``."""
    import pandas as pd
    from pyspark import BarrierTaskContext

    for _ in batches:
        pass  # the input rows only set the number of tasks
    ctx = BarrierTaskContext.get()
    partition = ctx.partitionId()
    report = {"rank": partition, "status": "failed", "result": None, "error": None, "host": socket.gethostname()}
    hub = None
    announce = {"attempt": ctx.attemptNumber()}
    if partition == 0:
        # Every task must reach allGather exactly once, or the others wait there for good.
        try:
            hub = RankZeroHub(spec)
            infos = ctx.getTaskInfos()
            announce.update(hub.start(infos[0].address if infos else ""))
        except BaseException as exc:
            if hub is not None:
                hub.close()
                hub = None
            announce["error"] = "%s: %s" % (type(exc).__name__, exc)
    try:
        messages = [json.loads(m) for m in ctx.allGather(json.dumps(announce))]
        retried = max(m["attempt"] for m in messages)
        if retried:
            # A task attempt after the first means one failed outside fn (a lost executor, a crashed
            # Python worker); running fn again on half-finished state is never what the user wants.
            # All tasks see it here, after the gather, so all of them stop. (Python sees no stage
            # attempt number, so a resubmission of the whole stage is not caught.)
            if hub is not None:
                hub.close()
                hub = None
            report["error"] = ("SparkTaskRetry", "Spark retried a task of the barrier stage (attempt %d) after it "
                               "failed outside fn (e.g. a lost executor or a crashed Python worker; see the executor "
                               "logs); horovod_spark does not run fn again" % retried, "")
        elif "error" in messages[0]:
            raise RuntimeError("rank 0's task could not start the rendezvous service: %s" % messages[0]["error"])
        else:
            where = messages[0]
            rows = run_task(spec.task_spec(where["addrs"], int(where["port"]), bool(where["tls"])), iter(()))
            _, report["status"], _ = rows[0]  # an "ok" rank's result went to rank 0's service
    except BaseException as exc:  # reported in the row: a failed task would make Spark retry the stage
        report["error"] = _error(exc, "horovod_spark task of rank %d failed" % partition)
        if hub is not None:
            # The other tasks may still wait for rank 0 to register: release them now.
            hub.service.abort("rank 0's task failed: %s" % exc)
    finally:
        if hub is not None:
            report["hub"] = hub.finish()
    yield pd.DataFrame({"partition": [partition], "report": [pickle.dumps(report)]})
