"""Results the core allocates (allgather, alltoall, reducescatter) reuse the memory of results the
caller has dropped: a reused block must carry the new values, and a result still held must never
be overwritten by a later one of the same size. Only results of 1 MiB or more are pooled, so the
blocks here are larger than that."""
from horovod_spark.launcher import run_local


def _reuse():
    import numpy as np

    from horovod_spark.common import _core, basics, ops

    basics.init()
    r, n = basics.rank(), basics.size()
    rows = [3 + q for q in range(n)]  # uneven first dimensions
    cols = 1 << 16  # a row is 256 KiB: every gathered result is over 1 MiB
    failures = []

    def gathered(step):
        x = np.full((rows[r], cols), 100 * step + r, dtype=np.float32)
        raw, shape = ops.wait(ops.allgather_async("pool.ag", x.ctypes.data, "float32", x.shape))
        return raw.view(np.float32).reshape(shape)

    def expected(step):
        return np.concatenate([np.full((rows[q], cols), 100 * step + q, dtype=np.float32) for q in range(n)])

    held = gathered(0)
    for step in range(1, 6):
        got = gathered(step)  # the block of step - 2 (dropped) is reused; `held` is not
        if not np.array_equal(got, expected(step)):
            failures.append("rank %d step %d: wrong gather" % (r, step))
        if not np.array_equal(held, expected(step - 1)):
            failures.append("rank %d step %d: the held result changed" % (r, step))
        held = got
    idle = _core.stats()["idle_result_bytes"]
    if idle < sum(rows) * cols * 4:
        failures.append("rank %d: no result block kept for reuse (%d idle bytes)" % (r, idle))
    # Every byte of a reused block is written: an alltoall of the same size as the gathered blocks
    # now idle, and a reducescatter, give exact results, not leftovers of the gathers.
    length = sum(rows) * cols
    chunk = length // n
    x = np.arange(length, dtype=np.float32) + r
    raw, shape, _ = ops.wait(ops.alltoall_async("pool.a2a", x.ctypes.data, "float32", x.shape))
    want = np.concatenate([(np.arange(length, dtype=np.float32) + q)[chunk * r:chunk * (r + 1)] for q in range(n)])
    if not np.array_equal(raw.view(np.float32), want):
        failures.append("rank %d: wrong alltoall from a reused block" % r)
    raw, shape = ops.wait(ops.reducescatter_async("pool.rs", x.ctypes.data, "float32", x.shape, ops.Sum))
    total = sum(np.arange(length, dtype=np.float32) + q for q in range(n))
    if not np.array_equal(raw.view(np.float32), total[chunk * r:chunk * (r + 1)]):
        failures.append("rank %d: wrong reducescatter from a reused block" % r)
    ops.wait(ops.barrier_async())
    basics.shutdown()
    return failures


def test_result_blocks_are_reused_without_clobbering_held_results():
    results = run_local(_reuse, num_proc=2, timeout=120)
    failures = [f for per_rank in results for f in per_rank]
    assert not failures, "\n".join(failures)
