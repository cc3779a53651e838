"""Every collective x every dtype x sizes 0, 1, odd, >= 1 MiB x 2, 3 and 4 real ranks, checked
against numpy on the raw-buffer API of the core (no framework in between).

Transport "single-copy": shared memory with HOROVOD_SHM_SINGLE_COPY_BYTES at 4 KiB, so that most
messages are read straight out of the sending process's memory (transport/single_copy.h)."""
import pytest

from horovod_spark.launcher import run_local


def _sweep(transport):
    import numpy as np
    from support import core_reference as ref

    from horovod_spark.common import _core, basics, ops

    if transport == "mixed":
        ref.pretend_two_hosts()
    basics.init()
    if transport == "mixed":
        assert (basics.local_size(), basics.cross_size()) == (2, 2)
        assert basics.local_rank() == basics.rank() % 2 and basics.cross_rank() == basics.rank() // 2
    r, n = basics.rank(), basics.size()
    failures = []

    def check(what, ok):
        if not ok:
            failures.append("rank %d: %s" % (r, what))

    for dtype in ref.DTYPES:
        item = np.dtype(ref.storage(dtype)).itemsize
        for count in (0, 1, 7, (1 << 20) // item + 3):
            tag = "%s[%d]" % (dtype, count)
            # allreduce, every op, out of place
            for op_name, op in ref.OPS.items():
                xs = [ref.make_input(dtype, count, q, op_name) for q in range(n)]
                out = np.empty_like(xs[r])
                h = ops.allreduce_async("ar.%s.%s" % (tag, op_name), xs[r].ctypes.data,
                                        out.ctypes.data, dtype, out.shape, op)
                ops.wait(h)
                check("allreduce %s %s" % (op_name, tag),
                      ref.matches(out, ref.reduce_reference(xs, dtype, op_name), dtype))
            # allreduce Average in place (floats), with pre/postscale
            if dtype in ref.TOLERANCE:
                xs = [ref.make_input(dtype, count, q) for q in range(n)]
                buf = xs[r].copy()
                ops.wait(ops.allreduce_async("avg." + tag, buf.ctypes.data, buf.ctypes.data, dtype,
                                             buf.shape, ops.Average, prescale=2.0, postscale=0.5))
                check("allreduce Average " + tag,
                      ref.matches(buf, ref.reduce_reference(xs, dtype, "Sum") / n, dtype))
            # allgather: first dimension differs per rank
            rows = [count + q if count else q % 2 for q in range(n)]
            xs = [ref.make_input(dtype, rows[q] * 2, q).reshape(rows[q], 2) for q in range(n)]
            raw, shape = ops.wait(ops.allgather_async("ag." + tag, xs[r].ctypes.data, dtype, xs[r].shape))
            got = raw.view(ref.storage(dtype)).reshape(shape)
            check("allgather " + tag, shape == (sum(rows), 2) and
                  np.array_equal(got, np.concatenate(xs)))
            # broadcast from the last rank, in place
            root = n - 1
            buf = ref.make_input(dtype, count, r, salt=7)
            ops.wait(ops.broadcast_async("bc." + tag, buf.ctypes.data, buf.ctypes.data, dtype,
                                         buf.shape, root))
            check("broadcast " + tag, np.array_equal(buf, ref.make_input(dtype, count, root, salt=7)))
            # alltoall with uneven splits that differ per rank
            def splits_of(q):
                base = [count // n + (1 if p < count % n else 0) for p in range(n)]
                return base[q % n:] + base[:q % n]
            xs = [ref.make_input(dtype, count, q, salt=3) for q in range(n)]
            raw, shape, recv = ops.wait(ops.alltoall_async("a2a." + tag, xs[r].ctypes.data, dtype,
                                                           xs[r].shape, splits_of(r)))
            expect = []
            for q in range(n):
                offs = np.cumsum([0] + splits_of(q))
                expect.append(xs[q][offs[r]:offs[r + 1]])
            got = raw.view(ref.storage(dtype)).reshape(shape)
            check("alltoall " + tag, np.array_equal(got, np.concatenate(expect)) and
                  recv == [splits_of(q)[r] for q in range(n)])
            # reducescatter (Sum): earlier ranks get the remainder rows
            if dtype != "bool":
                xs = [ref.make_input(dtype, count, q, salt=5) for q in range(n)]
                raw, shape = ops.wait(ops.reducescatter_async("rs." + tag, xs[r].ctypes.data, dtype,
                                                              xs[r].shape, ops.Sum))
                lens = [count // n + (1 if q < count % n else 0) for q in range(n)]
                start = sum(lens[:r])
                full = ref.reduce_reference(xs, dtype, "Sum")
                check("reducescatter " + tag, shape == (lens[r],) and
                      ref.matches(raw.view(ref.storage(dtype)), full[start:start + lens[r]], dtype))
    _check_single_copy(transport, _core.stats(), check)
    ops.wait(ops.barrier_async())
    basics.shutdown()
    return failures


def _check_single_copy(transport, stats, check):
    if transport == "single-copy":
        check("no bytes travelled single-copy", stats["single_copy_bytes"] > 1 << 20)
    else:
        check("%d bytes travelled single-copy" % stats["single_copy_bytes"],
              transport != "tcp" or stats["single_copy_bytes"] == 0)


def _env(transport):
    return {"tcp": {"HOROVOD_SHM_DISABLE": "1"},
            "single-copy": {"HOROVOD_SHM_SINGLE_COPY_BYTES": "4096"}}.get(transport, {})


@pytest.mark.parametrize("num_proc,transport", [(2, "shm"), (3, "shm"), (4, "shm"), (2, "tcp"),
                                                (3, "tcp"), (4, "mixed"), (3, "single-copy")])
def test_every_collective_dtype_and_size(num_proc, transport):
    env = _env(transport)
    results = run_local(_sweep, args=(transport,), num_proc=num_proc, env=env, timeout=300)
    failures = [f for per_rank in results for f in per_rank]
    assert not failures, "\n".join(failures[:40])


def _fused_sweep(transport):
    """Many tensors submitted before any wait, so the engine fuses them: odd sizes, in place and
    out of place, every op, a packed group, pre/postscale; large enough (> 64 KiB fused) that the
    fused allreduce runs between the tensors' own memory with no fusion-buffer copy."""
    import numpy as np
    from support import core_reference as ref

    from horovod_spark.common import _core, basics, ops

    if transport == "mixed":
        ref.pretend_two_hosts()
    basics.init()
    r, n = basics.rank(), basics.size()
    failures = []
    counts = [1, 7, 4099, 0, 333, 20011, 5, 12289, 64, 3]  # about 37k elements per batch
    if transport != "shm":
        # Over TCP the copy-free path takes pieces of 256 KiB on average and up (smaller ones stage
        # through the fusion buffer: a syscall per piece would cost more than the copy).
        counts += [700001, 900007]
    scattered_before = _core.stats()["scattered_allreduces"]
    for dtype in ref.DTYPES:
        for op_name, op in ref.OPS.items():
            inputs = [[ref.make_input(dtype, c, q, op_name, salt=i) for i, c in enumerate(counts)] for q in range(n)]
            mine = [x.copy() for x in inputs[r]]
            outs = [x if i % 3 else np.empty_like(x) for i, x in enumerate(mine)]  # every third out of place
            handles = [ops.allreduce_async("fz.%s.%s.%d" % (dtype, op_name, i), x.ctypes.data, o.ctypes.data,
                                           dtype, x.shape, op) for i, (x, o) in enumerate(zip(mine, outs))]
            group = [ref.make_input(dtype, c, q, op_name, salt=100 + i) for q in range(n) for i, c in enumerate(counts)]
            group_mine = [x.copy() for x in group[r * len(counts):(r + 1) * len(counts)]]
            handles.append(ops.grouped_allreduce_async(
                "fz.group.%s.%s" % (dtype, op_name), [x.ctypes.data for x in group_mine],
                [x.ctypes.data for x in group_mine], dtype, [x.shape for x in group_mine], op))
            for h in handles:
                ops.wait(h)
            for i, o in enumerate(outs):
                if not ref.matches(o, ref.reduce_reference([inputs[q][i] for q in range(n)], dtype, op_name), dtype):
                    failures.append("rank %d: fused %s %s tensor %d (%d elements)" % (r, dtype, op_name, i, counts[i]))
            for i, x in enumerate(group_mine):
                expect = ref.reduce_reference([group[q * len(counts) + i] for q in range(n)], dtype, op_name)
                if not ref.matches(x, expect, dtype):
                    failures.append("rank %d: group %s %s member %d" % (r, dtype, op_name, i))
        if dtype in ref.TOLERANCE:
            xs = [[ref.make_input(dtype, c, q, salt=50 + i) for i, c in enumerate(counts)] for q in range(n)]
            mine = [x.copy() for x in xs[r]]
            handles = [ops.allreduce_async("fz.avg.%s.%d" % (dtype, i), x.ctypes.data, x.ctypes.data, dtype,
                                           x.shape, ops.Average, prescale=2.0, postscale=0.5)
                       for i, x in enumerate(mine)]
            for h in handles:
                ops.wait(h)
            for i, x in enumerate(mine):
                expect = ref.reduce_reference([xs[q][i] for q in range(n)], dtype, "Sum") / n
                if not ref.matches(x, expect, dtype):
                    failures.append("rank %d: fused Average %s tensor %d" % (r, dtype, i))
    scattered = _core.stats()["scattered_allreduces"] - scattered_before
    if scattered == 0:
        failures.append("rank %d: no fused allreduce ran without the fusion-buffer copy" % r)
    _check_single_copy(transport, _core.stats(),
                       lambda what, ok: ok or failures.append("rank %d: %s" % (r, what)))
    ops.wait(ops.barrier_async())
    basics.shutdown()
    return failures


@pytest.mark.parametrize("num_proc,transport", [(2, "shm"), (3, "shm"), (4, "shm"), (2, "tcp"), (4, "mixed"),
                                                (3, "single-copy")])
def test_fused_allreduce_between_tensors(num_proc, transport):
    env = _env(transport)
    if transport == "mixed":  # the flat algorithm's copy-free path (test_core_hierarchical.py: the two-level one)
        env["HOROVOD_HIERARCHICAL_ALLREDUCE"] = "0"
    results = run_local(_fused_sweep, args=(transport,), num_proc=num_proc, env=env, timeout=300)
    failures = [f for per_rank in results for f in per_rank]
    assert not failures, "\n".join(failures[:40])
