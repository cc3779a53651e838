"""Process-set registration that not every rank makes: it fails after HOROVOD_PROCESS_SET_TIMEOUT on
the ranks that made it, naming the ranks that did not (instead of waiting forever), the stall
inspector reports it meanwhile, and a late or repeated call still meets the others' calls."""
import io
import time

from horovod_spark.launcher import run_local

TIMEOUT_S = 3
ENV = {"HOROVOD_PROCESS_SET_TIMEOUT": str(TIMEOUT_S), "HOROVOD_STALL_CHECK_TIME_SECONDS": "1"}


def _attempt(fn):
    """(error message or None, seconds taken)."""
    from horovod_spark.exceptions import HorovodCollectiveError
    start = time.monotonic()
    try:
        fn()
        return None, time.monotonic() - start
    except HorovodCollectiveError as exc:
        return str(exc), time.monotonic() - start


def _ranks():
    import time

    from horovod_spark.common import basics, ops, process_sets

    basics.init()
    r = basics.rank()
    out = {}
    # 1. only rank 0 registers; rank 1 is busy elsewhere for longer than the timeout
    if r == 0:
        out["alone"] = _attempt(lambda: process_sets.add_process_set([1]))
    else:
        time.sleep(TIMEOUT_S + 1)
    ops.wait(ops.barrier_async())
    # 2. the same call made again by every rank (rank 1's first, rank 0's second) goes through
    ps = process_sets.add_process_set([1])
    out["retry_id"] = ps.process_set_id
    # 3. the ranks ask for different sets: each fails, naming what the other asked for
    out["different"] = _attempt(lambda: process_sets.add_process_set([r]))
    ops.wait(ops.barrier_async())
    # 4. a removal only rank 1 makes
    if r == 1:
        out["remove_alone"] = _attempt(lambda: process_sets.remove_process_set(ps))
    else:
        time.sleep(TIMEOUT_S + 1)
    ops.wait(ops.barrier_async())
    out["removed"] = process_sets.remove_process_set(ps)
    basics.shutdown()
    return out


def test_unmatched_process_set_calls_time_out_naming_the_missing_ranks():
    err = io.StringIO()
    results = run_local(_ranks, num_proc=2, env=ENV, timeout=120, stderr=err)
    message, seconds = results[0]["alone"]
    assert message is not None, "add_process_set on one rank did not fail"
    assert "add_process_set([1])" in message and "ranks [1] did not call it" in message, message
    assert "HOROVOD_PROCESS_SET_TIMEOUT" in message
    assert TIMEOUT_S - 0.5 <= seconds < TIMEOUT_S + 5, seconds
    assert results[0]["retry_id"] == results[1]["retry_id"] and results[0]["retry_id"] > 0
    for r in range(2):
        message, seconds = results[r]["different"]
        other = 1 - r
        assert message is not None and "add_process_set([%d]) timed out" % r in message, message
        assert "ranks [%d] did not call it" % other in message, message
        assert "Ranks [%d] asked for add_process_set([%d]) instead" % (other, other) in message, message
    message, _ = results[1]["remove_alone"]
    assert message is not None and "remove_process_set(id %d)" % results[1]["retry_id"] in message, message
    assert "ranks [0] did not call it" in message, message
    assert results[0]["removed"] is True and results[1]["removed"] is True
    # the stall inspector reported the pending registration, as it does for collectives
    log = err.getvalue()
    assert "stall: add_process_set([1]) has waited" in log and "missing ranks [1]" in log, log[-3000:]
