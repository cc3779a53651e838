"""Rank-side entry of ``run_local``: ``python -m horovod_spark.launcher.run_local_rank``.

Fetches the cloudpickled ``(fn, args, kwargs)`` from the job's KV service (authenticated with
HOROVOD_SECRET_KEY), runs it, and publishes the cloudpickled result, or the formatted traceback,
under ``<HOROVOD_RUN_SCOPE>.launcher``. Exit code 0 means a result was published, 1 an error.
Keys carry the rank, or in an elastic job the worker number (ranks change there; workers do not).
"""
import sys
import traceback

# Keys in the launcher scope; the driver side (local_job.py) reads the same names.
FN_KEY = "fn"
SYS_PATH_KEY = "sys_path"
_MAX_TRACEBACK_BYTES = 1024 * 1024


def launcher_scope(run_scope: str) -> str:
    return run_scope + ".launcher"


def result_key(rank: int) -> str:
    return "result.%d" % rank


def error_key(rank: int) -> str:
    return "error.%d" % rank


def _report_error(client, scope: str, rank: int, text: str) -> None:
    data = text.encode("utf-8", "replace")
    if len(data) > _MAX_TRACEBACK_BYTES:
        data = b"...(truncated)...\n" + data[-_MAX_TRACEBACK_BYTES:]
    try:
        client.put(scope, error_key(rank), data)
    except Exception as exc:
        # The driver will fall back to our stderr tail, so the traceback must be there too.
        sys.stderr.write(text + "\n(could not report this to the launcher: %s)\n" % exc)
        sys.stderr.flush()


def main() -> int:
    import cloudpickle

    from horovod_spark.common import config, wire
    from horovod_spark.common.kv_client import KVClient

    rank = config.ELASTIC_WORKER.require() if config.ELASTIC.get() else config.RANK.require()
    scope = launcher_scope(config.RUN_SCOPE.require())
    start_timeout = config.START_TIMEOUT.get()
    client = KVClient.from_env()
    try:
        try:
            # The driver's sys.path first, so functions pickled by reference (defined in the
            # driver's modules) import here the same way.
            for entry in wire.decode_message(client.get(scope, SYS_PATH_KEY, start_timeout)):
                if entry not in sys.path:
                    sys.path.append(entry)
            fn, args, kwargs = cloudpickle.loads(client.get_blob(scope, FN_KEY, start_timeout))
        except BaseException:
            _report_error(client, scope, rank, "rank %d could not load the function to run:\n%s"
                          % (rank, traceback.format_exc()))
            return 1
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            # Start the traceback at fn: this file's frame is noise to the user.
            _report_error(client, scope, rank,
                          "".join(traceback.format_exception(type(exc), exc, exc.__traceback__.tb_next)))
            return 1
        try:
            data = cloudpickle.dumps(result)
        except BaseException:
            _report_error(client, scope, rank, "the result of rank %d could not be pickled:\n%s"
                          % (rank, traceback.format_exc()))
            return 1
        client.put_blob(scope, result_key(rank), data)
        return 0
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        client.close()


if __name__ == "__main__":
    sys.exit(main())
