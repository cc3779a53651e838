"""Run N ranks on this machine: ``run_local(fn, num_proc=N)`` and the job behind the CLI.

A ``LocalJob`` is a fresh-secret KV service on 127.0.0.1 plus N supervised processes carrying the
rendezvous environment of docs/dev/contracts.md. ``run_local`` ships ``fn`` through that service
(every byte authenticated), runs it in fresh interpreters, and returns the results by rank; on the
first failure it stops every rank and raises ``RankFailedError`` with the rank's traceback.
"""
import functools
import logging
import os
import site
import socket
import sys
import uuid
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, TextIO

import horovod_spark
from horovod_spark.common import config, data_plane_auth, rendezvous, source_pickle, wire, wire_tls
from horovod_spark.common.kv_client import KVClient
from horovod_spark.common.kv_server import KVStoreServer
from horovod_spark.exceptions import RankFailedError
from horovod_spark.launcher import cpu_binding, run_local_rank
from horovod_spark.launcher.options import LocalRunOptions
from horovod_spark.launcher.supervisor import RankExit, RankSupervisor

log = logging.getLogger(__name__)

LOCAL_ADDR = "127.0.0.1"

# After every rank published its result, how long a rank may take to exit before it is killed
# (e.g. a non-daemon thread left running by fn).
_EXIT_GRACE = 30.0


def _package_root_for_path() -> Optional[str]:
    """The directory to put on the ranks' PYTHONPATH so they import this same horovod_spark, or
    None when it is already in site-packages (prepending that would shadow the stdlib)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__)))
    site_dirs = set(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    site_dirs.add(site.getusersitepackages())
    return None if root in site_dirs else root


def rank_environment(rank: int, size: int, port: int, secret: bytes, run_scope: str,
                     base_env: Mapping[str, str], hostname: Optional[str] = None,
                     cpus: Optional[Sequence[int]] = None) -> Dict[str, str]:
    """The environment of one local rank: ``base_env`` plus the rendezvous variables; ``cpus``
    are those the rank is bound to, if it is."""
    env = dict(base_env)
    env.update({
        config.RANK.name: str(rank),
        config.SIZE.name: str(size),
        config.LOCAL_RANK.name: str(rank),
        config.LOCAL_SIZE.name: str(size),
        config.CROSS_RANK.name: "0",
        config.CROSS_SIZE.name: "1",
        config.RENDEZVOUS_ADDR.name: LOCAL_ADDR,
        config.RENDEZVOUS_PORT.name: str(port),
        config.SECRET_KEY.name: secret.hex(),
        config.RUN_SCOPE.name: run_scope,
        config.HOSTNAME.name: hostname or socket.gethostname(),
    })
    # Output should reach the launcher line by line, not when a 8 KiB buffer fills.
    env.setdefault("PYTHONUNBUFFERED", "1")
    # N ranks each using every core for intra-op threads thrash; share the cores unless told.
    if not env.get("OMP_NUM_THREADS"):
        env["OMP_NUM_THREADS"] = str(len(cpus) if cpus else max(1, (os.cpu_count() or 1) // size))
    root = _package_root_for_path()
    if root is not None:
        parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        if root not in parts:
            env["PYTHONPATH"] = os.pathsep.join([root] + parts)
    return env


class LocalJob:
    """A KV service and ``num_proc`` local ranks of ``argv``; use as a context manager.

    ``env`` adds to (and overrides) our environment for the ranks; the rendezvous variables are
    always the job's own. ``LocalJob.from_options`` starts from options already checked.
    """

    def __init__(self, argv: Sequence[str], num_proc: int, env: Optional[Mapping[str, str]] = None, *,
                 stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None,
                 prefix_output: bool = True, kill_grace: float = 2.0):
        options = LocalRunOptions.from_kwargs("LocalJob", num_proc=num_proc, env=env, stdout=stdout, stderr=stderr,
                                              prefix_output=prefix_output)
        self._setup(argv, options, kill_grace)

    @classmethod
    def from_options(cls, argv: Sequence[str], options: LocalRunOptions, kill_grace: float = 2.0) -> "LocalJob":
        job = cls.__new__(cls)
        job._setup(argv, options, kill_grace)
        return job

    def _setup(self, argv: Sequence[str], options: LocalRunOptions, kill_grace: float) -> None:
        if not argv:
            raise ValueError("no command to run")
        self.argv = list(argv)
        self.num_proc = options.num_proc
        self.secret = wire.make_secret()
        self.run_scope = "local-" + uuid.uuid4().hex
        self.port: Optional[int] = None
        self.supervisor: Optional[RankSupervisor] = None
        self._extra_env = dict(options.env)
        bind = config.CPU_BIND.get({**os.environ, **self._extra_env})
        self.cpus: Optional[List[List[int]]] = cpu_binding.plan(self.num_proc) if bind else None
        self.server = KVStoreServer(self.secret, host=LOCAL_ADDR,
                                    tls=wire_tls.ServerTLS.from_env({**os.environ, **self._extra_env}))
        self._io = dict(stdout=options.stdout, stderr=options.stderr, prefix_output=options.prefix_output,
                        kill_grace=kill_grace)

    def start(self) -> "LocalJob":
        self.port = self.server.start()
        try:
            base = dict(os.environ)
            base.update(self._extra_env)
            # The ranks use TLS exactly when this job's service does, whatever their environment says.
            base[config.SPARK_TLS.name] = "1" if self.server.tls is not None else "0"
            base.update(data_plane_auth.rank_env(data_plane_auth.resolved(base)))
            envs = [rank_environment(r, self.num_proc, self.port, self.secret, self.run_scope, base,
                                     cpus=self.cpus[r] if self.cpus else None)
                    for r in range(self.num_proc)]
            # A rank that ends while others wait for it in hvd.init() makes them fail at once.
            on_exit = functools.partial(rendezvous.note_rank_exit, self.server, self.run_scope)
            self.supervisor = RankSupervisor([self.argv] * self.num_proc, envs, on_exit=on_exit, cpus=self.cpus,
                                             **self._io)
            self.supervisor.start()
        except BaseException:
            self.close()
            raise
        return self

    def client(self) -> KVClient:
        """A client of this job's KV service (for the launcher's own use)."""
        return KVClient(LOCAL_ADDR, self.port, self.secret, tls=self.server.tls is not None)

    def close(self) -> None:
        """Stop every rank and the service. A Ctrl-C arriving meanwhile does not cut this short:
        the cleanup is retried, then the interrupt is re-raised."""
        interrupt = None
        for _ in range(3):
            try:
                if self.supervisor is not None:
                    self.supervisor.stop()
                self.server.stop()
                break
            except KeyboardInterrupt as exc:
                interrupt = exc
        if interrupt is not None:
            raise interrupt

    def __enter__(self) -> "LocalJob":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def _failure_error(job: LocalJob, failure: RankExit) -> RankFailedError:
    scope = run_local_rank.launcher_scope(job.run_scope)
    reported = job.server.get_nowait(scope, run_local_rank.error_key(failure.rank))
    if reported is not None:
        return RankFailedError(failure.rank, failure.returncode, reported.decode("utf-8", "replace"),
                               "rank %d of %d raised an exception; all ranks were stopped"
                               % (failure.rank, job.num_proc))
    tail = job.supervisor.stderr_tail(failure.rank)
    return RankFailedError(failure.rank, failure.returncode,
                           tail and "(last lines of its stderr)\n" + tail,
                           "%s without reporting a result; all ranks were stopped" % failure.describe())


def run_local(fn: Callable[..., Any], args: Sequence[Any] = (), kwargs: Optional[Mapping[str, Any]] = None,
              num_proc: int = 2, env: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
              stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None,
              prefix_output: bool = True) -> List[Any]:
    """Run ``fn(*args, **kwargs)`` as ``num_proc`` local ranks; return its results ordered by rank.

    Each rank is a fresh Python process with the rendezvous environment set, so ``hvd.init()``
    inside ``fn`` forms the job. Rank output goes to ``stdout``/``stderr`` (default: ours),
    prefixed ``[<rank>]<stdout>:`` / ``[<rank>]<stderr>:`` unless ``prefix_output`` is False.
    On the first rank to fail, every rank is stopped and ``RankFailedError`` (rank, traceback) is
    raised. ``timeout`` (seconds, None: unlimited) bounds the whole run; past it the ranks are
    stopped and ``TimeoutError`` is raised. No process, thread or port outlives the call.
    """
    options = LocalRunOptions.from_kwargs("run_local", num_proc=num_proc, env=env, timeout=timeout, stdout=stdout,
                                          stderr=stderr, prefix_output=prefix_output)
    return run_local_with_options(fn, args, kwargs, options)


def run_local_with_options(fn: Callable[..., Any], args: Sequence[Any], kwargs: Optional[Mapping[str, Any]],
                           options: LocalRunOptions) -> List[Any]:
    """``run_local``'s body, for callers that built and checked the options already."""
    import cloudpickle

    if not callable(fn):
        raise TypeError("run_local needs a callable, got %r" % (fn,))
    num_proc, timeout = options.num_proc, options.timeout
    # By-value code takes its file name and source lines along, for the ranks' tracebacks.
    payload = source_pickle.dumps((fn, tuple(args), dict(kwargs or {})))
    argv = [sys.executable, "-m", "horovod_spark.launcher.run_local_rank"]
    with LocalJob.from_options(argv, options) as job:
        scope = run_local_rank.launcher_scope(job.run_scope)
        with job.client() as client:
            client.put(scope, run_local_rank.SYS_PATH_KEY, wire.encode_message([p for p in sys.path if p]))
            client.put_blob(scope, run_local_rank.FN_KEY, payload)

            def all_reported() -> bool:
                return all(job.server.get_nowait(scope, run_local_rank.result_key(r)) is not None
                           for r in range(num_proc))

            try:
                failure = job.supervisor.wait(timeout, until=all_reported)
                if failure is None and job.supervisor.running_ranks():
                    try:
                        failure = job.supervisor.wait(_EXIT_GRACE)
                    except TimeoutError:
                        log.warning("run_local: rank(s) %s returned a result but did not exit within %.0f s; "
                                    "killing them", job.supervisor.running_ranks(), _EXIT_GRACE)
            except TimeoutError as exc:
                raise TimeoutError("run_local: %s (timeout=%s); all ranks were stopped" % (exc, timeout)) from None
            if failure is not None:
                job.supervisor.stop()  # drains the failed rank's stderr for the error message
                raise _failure_error(job, failure)
            results = []
            for rank in range(num_proc):
                if job.server.get_nowait(scope, run_local_rank.result_key(rank)) is None:
                    raise RankFailedError(rank, 0, job.supervisor.stderr_tail(rank),
                                          "rank %d exited with code 0 without reporting a result "
                                          "(did fn call os._exit?)" % rank)
                results.append(cloudpickle.loads(client.get_blob(scope, run_local_rank.result_key(rank), 30.0)))
            return results
