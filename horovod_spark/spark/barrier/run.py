"""``horovod_spark.run`` on a classic SparkSession: ``num_proc`` ranks in one barrier job of the SparkContext."""
import functools
import os
import uuid
from typing import Any, Callable, List, Optional

from horovod_spark import session as spark_session
from horovod_spark.common import config, data_plane_auth, wire
from horovod_spark.spark.driver import preflight
from horovod_spark.spark.driver.output import OutputSink
from horovod_spark.spark.driver.results import ResultSpool
from horovod_spark.spark.driver.service import driver_addresses, start_driver_service
from horovod_spark.spark.run_options import SparkRunOptions
from horovod_spark.spark.task.body import TaskSpec, run_task

from .job import BarrierJob
from .outcome import wait_for_outcome

# After an abort, how long the ranks get to confirm their processes are gone, and how long the
# cancelled Spark job gets to wind down, before run() raises anyway (with a warning).
_EXIT_CONFIRM_S = 5.0
_JOB_JOIN_S = 8.0


def run_barrier(fn: Callable, args, kwargs: Optional[dict], options: SparkRunOptions) -> List[Any]:
    """``horovod_spark.run`` on a classic SparkSession: one barrier job of ``num_proc`` tasks,
    each running one rank, with the driver hosting the service the tasks and ranks meet at."""
    sc = spark_session.active_spark_context(options.caller)
    options = options.with_default_num_proc(sc.defaultParallelism)
    num_proc, start_timeout, rank_env, use_mpi = (options.num_proc, options.start_timeout, dict(options.rank_env),
                                                  options.use_mpi)
    executable = options.executable
    call = preflight.serialize_call(fn, args, kwargs)
    host_mode = config.SPARK_HOST_KEY.get()
    out = options.output
    sink = OutputSink(out.stdout, out.stderr, out.prefix_output_with_timestamp)

    def log(level: int, text: str) -> None:
        if out.verbose >= level:
            sink.runner_message(text)

    preflight.check_cluster(sc, num_proc, log)
    job_id = uuid.uuid4().hex
    key = wire.make_secret()
    addrs = driver_addresses(sc)
    service = start_driver_service(key, num_proc, job_id, sink, sc.getConf().get("spark.driver.bindAddress"), addrs)
    try:
        spool = ResultSpool(service)
    except BaseException:
        service.stop()
        raise
    bind = service.host
    log(2, "driver service on %s:%d (bound to %s)" % (addrs[0], service.port, bind))
    spec = TaskSpec(job_id=job_id, driver_addrs=addrs, port=service.port, key=key, num_proc=num_proc,
                    call=call, start_timeout=start_timeout, host_key_mode=host_mode, env=rank_env,
                    use_mpi=use_mpi, executable=executable, tls=service.tls is not None,
                    data_plane_auth=data_plane_auth.resolved({**os.environ, **rank_env}))

    def notify():
        with service.condition:
            service.condition.notify_all()

    name = getattr(fn, "__qualname__", type(fn).__name__)
    job = BarrierJob(sc, num_proc, functools.partial(run_task, spec), "horovod_spark-" + job_id,
                     "horovod_spark.run(%s, num_proc=%d)" % (name, num_proc), notify)
    launcher = None
    ok = False
    try:
        if use_mpi:
            from horovod_spark.spark.mpi.launch import MpiLauncher  # checks for mpirun before any job exists
            launcher = MpiLauncher(service, addrs[0], key, num_proc, sink, log, list(options.mpi_args or ()),
                                    list(options.nics))
        job.start()
        results = wait_for_outcome(service, job, launcher, start_timeout, log, spool)
        ok = True
        return results
    finally:
        if not ok and job.started:
            if not job.done:
                job.cancel()
            service.abort("run() on the driver is stopping the job")
            with service.condition:
                registered = sorted(service.registrations)
            stuck = service.wait_exited(registered, _EXIT_CONFIRM_S)
            if stuck:
                log(1, "ranks %s did not confirm their processes exited within %.0f s; Spark kills "
                       "their Python workers, and the rank processes die with them"
                    % (stuck, _EXIT_CONFIRM_S))
        try:
            if launcher is not None:
                launcher.close()
            if not job.join(_JOB_JOIN_S):
                log(1, "the cancelled Spark job group %s is still winding down" % job.group)
            sink.close()
        finally:
            service.stop()
            spool.close()
