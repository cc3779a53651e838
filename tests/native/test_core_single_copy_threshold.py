"""Messages on either side of the default single-copy threshold (HOROVOD_SHM_SINGLE_COPY_BYTES,
512 KiB: transport.h says why), at 2 and 3 ranks, with odd element counts so that one exchange
mixes messages through the shared-memory ring with messages read straight out of the peer's
memory. Inputs are small integers, so every sum is exact and results are compared bit for bit."""
import pytest

from horovod_spark.launcher import run_local

THRESHOLD = 512 << 10
ELEMENTS = THRESHOLD // 4  # float32 / int32 elements in one threshold-sized message


def _inputs(np, dtype, count, rank, salt):
    return ((np.arange(count, dtype=np.int64) * 7 + rank * 13 + salt) % 101).astype(dtype)


def _edges():
    import numpy as np

    from horovod_spark.common import _core, basics, ops

    basics.init()
    r, n = basics.rank(), basics.size()
    failures = []

    def check(what, ok):
        if not ok:
            failures.append("rank %d: %s" % (r, what))

    def single_copy_moved(run):
        before = _core.stats()["single_copy_bytes"]
        run()
        return _core.stats()["single_copy_bytes"] - before

    # Rings of 3+ ranks carry every segment in two halves at these totals (tuning.h,
    # kBidirectionalRingBytes), so a ring message of ELEMENTS takes a segment of `whole` elements.
    whole = ELEMENTS if n == 2 else 2 * ELEMENTS
    for dtype, code in ((np.float32, "float32"), (np.int32, "int32")):
        # Allreduce: the ring's messages just below, at and just above the threshold;
        # count = n * whole - 1 gives messages of both kinds in one call.
        for count in (n * whole - 2 * n, n * whole - 1, n * whole, n * whole + 1):
            tag = "%s[%d]" % (code, count)
            xs = [_inputs(np, dtype, count, q, 1) for q in range(n)]
            out = np.empty_like(xs[r])
            moved = single_copy_moved(lambda: ops.wait(ops.allreduce_async(
                "ar." + tag, xs[r].ctypes.data, out.ctypes.data, code, out.shape, ops.Sum)))
            check("allreduce " + tag, np.array_equal(out, sum(x.astype(np.int64) for x in xs).astype(dtype)))
            if count == n * whole - 2 * n:
                check("allreduce %s: %d bytes single-copy below the threshold" % (tag, moved), moved == 0)
            if count >= n * whole:
                check("allreduce %s: nothing single-copy at the threshold" % tag, moved > 0)
        # Allgather and broadcast: blocks of whole - 1, whole and whole + 1 elements.
        for count in (whole - 1, whole, whole + 1):
            tag = "%s[%d]" % (code, count)
            xs = [_inputs(np, dtype, count, q, 2) for q in range(n)]
            moved = [0]

            def gather():
                raw, shape = ops.wait(ops.allgather_async("ag." + tag, xs[r].ctypes.data, code, xs[r].shape))
                check("allgather " + tag, shape == (n * count,) and np.array_equal(raw.view(dtype), np.concatenate(xs)))

            moved[0] = single_copy_moved(gather)
            check("allgather %s: %d bytes single-copy" % (tag, moved[0]), (moved[0] > 0) == (count >= whole))
            buf = _inputs(np, dtype, count, r, 3)
            ops.wait(ops.broadcast_async("bc." + tag, buf.ctypes.data, buf.ctypes.data, code, buf.shape, 0))
            check("broadcast " + tag, np.array_equal(buf, _inputs(np, dtype, count, 0, 3)))
        # Alltoall: n * count elements in, count of them to each rank.
        for count in (ELEMENTS - 1, ELEMENTS + 1):
            tag = "%s[%d]" % (code, count)
            xs = [_inputs(np, dtype, n * count, q, 4) for q in range(n)]
            raw, shape, recv = ops.wait(ops.alltoall_async("a2a." + tag, xs[r].ctypes.data, code, xs[r].shape,
                                                           [count] * n))
            expect = np.concatenate([xs[q][r * count:(r + 1) * count] for q in range(n)])
            check("alltoall " + tag, np.array_equal(raw.view(dtype), expect) and recv == [count] * n)
    ops.wait(ops.barrier_async())
    basics.shutdown()
    return failures


@pytest.mark.parametrize("num_proc", [2, 3])
def test_sizes_around_the_single_copy_threshold_are_exact(num_proc):
    results = run_local(_edges, num_proc=num_proc, timeout=300)
    failures = [f for per_rank in results for f in per_rank]
    assert not failures, "\n".join(failures[:40])
