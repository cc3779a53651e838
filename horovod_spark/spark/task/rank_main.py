"""Entry point of a rank process: ``python -m horovod_spark.spark.task.rank_main [WORKDIR]``.

The Spark task (our parent, inside the Python worker) has already set the rendezvous
environment, so ``hvd.init()`` in fn needs no arguments. WORKDIR holds ``call.pkl`` (cloudpickled
``(fn, args, kwargs)``); we leave ``result.pkl`` (cloudpickled return value) or ``error.msg`` (a
wire message: exception type, text, formatted traceback) and exit 0 or 1. Files rather than pipes
because results can be large and the pipes carry the user's stdout/stderr.

In MPI mode mpirun starts us (through its daemon inside our Spark task) without arguments; the
daemon's environment gives WORKDIR, and we first check that MPI put us in the right task.
"""
import os
import sys
import traceback

from horovod_spark.common import config


def _die_with_parent() -> None:
    """Ask the kernel to SIGKILL us when the Spark task's process dies (Spark kills Python workers
    of cancelled tasks); then re-check, in case it died before we got here."""
    expected = config.SPARK_PARENT_PID.get()
    if sys.platform.startswith("linux"):
        import ctypes
        import signal
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if expected and os.getppid() != expected:
        os._exit(137)


def _write_atomic(path: str, data: bytes) -> None:
    from horovod_spark.spark.task.run_dir import write_private
    tmp = path + ".tmp"
    write_private(tmp, data)
    os.replace(tmp, path)


def _report_error(workdir: str, exc: BaseException, tb_text: str, what: str) -> None:
    from horovod_spark.common import wire
    sys.stderr.write(tb_text)
    sys.stderr.flush()
    message = "%s%s" % (what, exc)
    _write_atomic(os.path.join(workdir, "error.msg"),
                  wire.encode_message((type(exc).__name__, message, tb_text)))
    if _under_mpi():
        # Our Spark task learns of this only when mpirun's daemon exits, which waits for the
        # whole MPI job; tell the driver now so it stops every rank at once.
        try:
            from horovod_spark.common.kv_client import KVClient
            with KVClient.from_env(io_timeout=5.0) as client:
                client.request("failed", config.SPARK_EXPECTED_RANK.get(),
                               type(exc).__name__, message, tb_text)
        except Exception as report_exc:
            sys.stderr.write("(could not report this to the driver directly: %s)\n" % report_exc)


def _under_mpi() -> bool:
    return config.SPARK_EXPECTED_RANK.is_set()


def _check_mpi_rank() -> None:
    expected = config.SPARK_EXPECTED_RANK.get()
    if expected is None:
        return
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMIX_RANK"))
    size = os.environ.get("OMPI_COMM_WORLD_SIZE")
    want_size = config.SPARK_EXPECTED_SIZE.require(hint="it goes with %s" % config.SPARK_EXPECTED_RANK.name)
    if rank != str(expected) or (size is not None and size != str(want_size)):
        raise RuntimeError("mpirun placed MPI rank %s of %s in the Spark task of partition %s of %s; "
                           "the MPI launch must map one rank per task in order"
                           % (rank, size, expected, want_size))


def main(workdir: str) -> int:
    _die_with_parent()
    import cloudpickle
    try:
        _check_mpi_rank()
    except RuntimeError as exc:
        _report_error(workdir, exc, traceback.format_exc(), "")
        return 1
    try:
        call_path = os.path.join(workdir, "call.pkl")
        with open(call_path, "rb") as f:
            fn, args, kwargs = cloudpickle.load(f)
        # Read once; removed now so the pickled function is gone even if our task is killed
        # before it removes the directory.
        os.unlink(call_path)
    except BaseException as exc:
        _report_error(workdir, exc, traceback.format_exc(), "cannot unpickle fn on the executor "
                      "(is every module it uses installed there?): ")
        return 1
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt in fn are failures too
        # Start the traceback at fn: this file's frame is noise to the user.
        tb_text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__.tb_next))
        _report_error(workdir, exc, tb_text, "")
        return 1
    try:
        data = cloudpickle.dumps(result)
    except BaseException as exc:
        _report_error(workdir, exc, traceback.format_exc(), "fn returned a value that cannot be pickled: ")
        return 1
    _write_atomic(os.path.join(workdir, "result.pkl"), data)
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1] if len(sys.argv) > 1 else config.SPARK_WORKDIR.require(
        hint="give the directory as the argument, or set it (horovod_spark.run's tasks do)"))
    sys.stdout.flush()
    sys.stderr.flush()
    if code and _under_mpi():
        # A normal exit would run MPI_Finalize (mpi4py's atexit), which waits for every other
        # rank; exiting without it makes mpirun stop the job now.
        os._exit(code)
    sys.exit(code)
