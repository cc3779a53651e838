"""The speculative small allreduce (native/engine/engine.h, Engine::Speculation).

A rank with nothing else in flight sends a small cached allreduce's input to every peer before
negotiation; when every rank did so for the same op, each finishes it alone, with no response.
These tests run real ranks through the cases where that could go wrong: ranks out of step,
some ranks speculating and others not, a mismatch after inputs already went out, join, and
process sets that only some ranks belong to.
"""
import pytest

from horovod_spark.launcher import run_local

TIMEOUT = 150


def _repeat_one_tensor(iterations):
    import numpy as np

    from horovod_spark.common import _core, basics, ops

    basics.init()
    r, n = basics.rank(), basics.size()
    x = np.empty(1024, np.float32)
    wrong = 0
    before = _core.stats()
    for i in range(iterations):
        x[:] = r + i
        ops.allreduce("loss", x.ctypes.data, x.ctypes.data, "float32", x.shape, ops.Average)
        wrong += int(not np.all(x == np.float32(sum(q + i for q in range(n)) / n)))
    after = _core.stats()
    basics.shutdown()
    return wrong, {k: after[k] - before[k]
                   for k in ("speculative_sent", "speculative_done", "caller_lane_done", "responses")}


def test_a_repeated_small_allreduce_completes_without_responses():
    results = run_local(_repeat_one_tensor, args=(300,), num_proc=3, timeout=TIMEOUT)
    for wrong, stats in results:
        assert wrong == 0
        # The first round negotiates (and fills the cache); after it ranks go ahead on their own,
        # except where one rank was still busy with the previous round.
        assert stats["speculative_sent"] >= 250, stats
        assert stats["speculative_done"] >= 200, stats
        assert stats["responses"] <= 100, stats
        # Many of those ran start to end in the calling thread (the caller's lane; a rank that
        # waits past the lane's spin hands over to the engine's passes).
        assert stats["caller_lane_done"] >= 30, stats


def test_speculation_can_be_turned_off():
    results = run_local(_repeat_one_tensor, args=(50,), num_proc=2, timeout=TIMEOUT,
                        env={"HOROVOD_SPECULATIVE_ALLREDUCE": "0"})
    for wrong, stats in results:
        assert wrong == 0
        assert stats["speculative_sent"] == 0 and stats["responses"] == 50, stats


def _random_program(seed, steps):
    """The same random program on every rank, with per-rank random delays so that ranks drift
    in and out of step: synchronous and asynchronous small allreduces (speculation-eligible or
    not), a large one, broadcasts, allgathers and a process set that rank 1 is not in."""
    import random
    import time

    import numpy as np

    from horovod_spark.common import _core, basics, ops, process_sets

    basics.init()
    r, n = basics.rank(), basics.size()
    program = random.Random(seed)
    jitter = random.Random(seed * 1000 + r)
    ps = process_sets.add_process_set([0, 2])
    shapes = {"a": (1000,), "b": (3,), "c": (17, 2), "big": (40000,)}  # big: 160 KB, never early
    failures = []

    def value(name, step, rank):  # the same on every rank (str hashes are salted per process)
        return float((sum(map(ord, name)) * 31 + step * 7 + rank * 13) % 1000) / 8.0

    def check(what, got, want):
        if not np.allclose(got, want, rtol=1e-5):
            failures.append("step %d %s: got %r want %r" % (step, what, got.ravel()[:3], np.ravel(want)[:3]))

    for step in range(steps):
        if jitter.random() < 0.3:
            time.sleep(jitter.random() * 0.0005)
        kind = program.random()
        if kind < 0.45:  # one synchronous allreduce
            name = program.choice(["a", "b", "c", "big"])
            op = program.choice([ops.Sum, ops.Average, ops.Max])
            x = np.full(shapes[name], value(name, step, r), np.float64)
            ops.allreduce(name, x.ctypes.data, x.ctypes.data, "float64", x.shape, op)
            parts = [value(name, step, q) for q in range(n)]
            want = {ops.Sum: sum(parts), ops.Average: sum(parts) / n, ops.Max: max(parts)}[op]
            check(name, x, want)
        elif kind < 0.65:  # a batch of asynchronous ones, waited in reverse
            names = program.sample(["a", "b", "c"], program.randint(1, 3))
            bufs = {nm: np.full(shapes[nm], value(nm, step, r), np.float64) for nm in names}
            hs = [ops.allreduce_async(nm, b.ctypes.data, b.ctypes.data, "float64", b.shape, ops.Sum)
                  for nm, b in bufs.items()]
            for h in reversed(hs):
                ops.wait(h)
            for nm, b in bufs.items():
                check(nm, b, sum(value(nm, step, q) for q in range(n)))
        elif kind < 0.75:
            root = program.randrange(n)
            x = np.full(5, value("bc", step, r), np.float32)
            ops.wait(ops.broadcast_async("bc", x.ctypes.data, x.ctypes.data, "float32", x.shape, root))
            check("broadcast", x, np.float32(value("bc", step, root)))
        elif kind < 0.85:
            x = np.full((r + 1, 2), value("ag", step, r), np.float32)
            data, shape = ops.wait(ops.allgather_async("ag", x.ctypes.data, "float32", x.shape))
            got = np.frombuffer(data, np.float32).reshape(shape)
            want = np.concatenate([np.full((q + 1, 2), value("ag", step, q), np.float32) for q in range(n)])
            check("allgather", got, want)
        else:  # process set {0, 2}: rank 1 sees the response go by and keeps going
            if r in (0, 2):
                x = np.full(8, value("ps", step, r), np.float64)
                ops.allreduce("ps.x", x.ctypes.data, x.ctypes.data, "float64", x.shape, ops.Sum,
                              process_set_id=ps.process_set_id)
                check("process set", x, value("ps", step, 0) + value("ps", step, 2))
    stats = _core.stats()
    process_sets.remove_process_set(ps)
    basics.shutdown()
    return failures, stats["speculative_sent"], stats["speculative_done"]


@pytest.mark.parametrize("seed", [1, 2])
def test_random_programs_with_drifting_ranks_give_exact_results(seed):
    results = run_local(_random_program, args=(seed, 400), num_proc=3, timeout=TIMEOUT)
    for failures, sent, _done in results:
        assert failures == []
        assert sent > 0  # the program did exercise the speculative path
    assert sum(done for _, _, done in results) > 0


def _mismatch_after_early_send():
    import numpy as np

    from horovod_spark.common import basics, ops
    from horovod_spark.exceptions import HorovodCollectiveError

    basics.init()
    r, n = basics.rank(), basics.size()
    x = np.ones(100, np.float32)
    for _ in range(20):  # cached and going ahead on its own
        ops.allreduce("m", x.ctypes.data, x.ctypes.data, "float32", x.shape, ops.Average)
    # Rank 1 changes the shape: its request misses the cache, the others already sent their input.
    bad = np.ones(101 if r == 1 else 100, np.float32)
    error = None
    try:
        ops.allreduce("m", bad.ctypes.data, bad.ctypes.data, "float32", bad.shape, ops.Sum)
    except HorovodCollectiveError as exc:
        error = str(exc)
    # The links must carry nothing stale afterwards: these results are exact.
    results = []
    for i in range(30):
        y = np.full(100, float(r * 10 + i), np.float32)
        ops.allreduce("m" if i % 2 else "after", y.ctypes.data, y.ctypes.data, "float32", y.shape, ops.Sum)
        results.append(bool(np.all(y == sum(q * 10 + i for q in range(n)))))
    basics.shutdown()
    return error, all(results)


def test_a_mismatch_after_inputs_went_out_fails_everywhere_and_leaves_the_links_clean():
    results = run_local(_mismatch_after_early_send, num_proc=3, timeout=TIMEOUT)
    for error, later_ok in results:
        assert error is not None and "'m'" in error and "shape" in error, error
        assert later_ok


def _join_with_early_sends():
    import numpy as np

    from horovod_spark.common import basics, ops

    basics.init()
    r = basics.rank()
    x = np.ones(64, np.float32)
    for _ in range(10):
        ops.allreduce("j", x.ctypes.data, x.ctypes.data, "float32", x.shape, ops.Sum)
        x[:] = 1
    extra = []
    if r == 0:  # the others have joined: they contribute zeros
        for _ in range(5):
            ops.allreduce("j", x.ctypes.data, x.ctypes.data, "float32", x.shape, ops.Sum)
            extra.append(float(x[0]))
            x[:] = 1
    last = ops.wait(ops.join_async())
    basics.shutdown()
    return extra, last


def test_join_while_a_rank_keeps_sending_early():
    results = run_local(_join_with_early_sends, num_proc=3, timeout=TIMEOUT)
    assert results[0] == ([1.0] * 5, 0)
    assert [res[1] for res in results] == [0, 0, 0]


def _two_threads_opposite_orders():
    import threading

    import numpy as np

    from horovod_spark.common import _core, basics, ops

    basics.init()
    r, n = basics.rank(), basics.size()
    wrong = []

    def loop(name, offset):
        x = np.empty(256, np.float32)
        for i in range(200):
            x[:] = r + i + offset
            ops.allreduce(name, x.ctypes.data, x.ctypes.data, "float32", x.shape, ops.Sum)
            if not np.all(x == sum(q + i + offset for q in range(n))):
                wrong.append((name, i))

    # Each rank starts its two threads in the opposite order, so their first requests cross.
    names = [("t1", 0), ("t2", 1000)] if r == 0 else [("t2", 1000), ("t1", 0)]
    threads = [threading.Thread(target=loop, args=nm) for nm in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    alive = any(t.is_alive() for t in threads)
    stats = _core.stats()
    basics.shutdown()
    return wrong, alive, stats["speculative_sent"]


def test_collectives_from_two_threads_in_crossing_orders_stay_exact_and_live():
    # Once a second thread submits, the rank stops speculating (before that, the first thread may
    # have gone ahead on its own: speculative_sent is not asserted).
    for wrong, alive, _ in run_local(_two_threads_opposite_orders, num_proc=2, timeout=TIMEOUT):
        assert wrong == [] and not alive


def _idle_beside_early_input():
    import time

    import numpy as np

    from horovod_spark.common import _core, basics, ops

    basics.init()
    x = np.ones(1024, np.float32)
    for _ in range(20):
        ops.allreduce("x", x.ctypes.data, x.ctypes.data, "float32", x.shape, ops.Sum)
    cpu = []
    for _ in range(3):
        if basics.rank() == 0:
            # Rank 1 has already sent this round's input; rank 0 is busy elsewhere meanwhile.
            started = time.process_time()
            time.sleep(0.3)
            cpu.append(time.process_time() - started)
        ops.allreduce("x", x.ctypes.data, x.ctypes.data, "float32", x.shape, ops.Sum)
    sent = _core.stats()["speculative_sent"]
    basics.shutdown()
    return cpu, sent


def test_a_rank_does_not_spin_while_a_peers_early_input_waits_for_it():
    # Unread early-sent bytes are no reason to stay awake: the engine thread once looked at them
    # before every sleep, never slept, and took a whole CPU from the rank's own work.
    (cpu, sent), _ = run_local(_idle_beside_early_input, num_proc=2, timeout=TIMEOUT)
    assert sent > 0
    assert max(cpu) < 0.1, "rank 0 used %s CPU seconds per 0.3 s of sleep" % cpu


def _blocking_broadcast(x, root, name="bc"):
    from horovod_spark.common import ops

    outcome = ops.run_broadcast_prechecked(name, x.ctypes.data, x.ctypes.data, ops.DTYPES[x.dtype.name], x.shape,
                                           root, 0)
    if outcome is not True:
        ops.finish_run(outcome)


def _blocking_allgather(x, n, name="ag"):
    """Blocking allgather offering an output of n equal blocks; returns the result."""
    import numpy as np

    from horovod_spark.common import ops

    out = np.empty((x.shape[0] * n,) + x.shape[1:], x.dtype)
    outcome = ops.run_allgather_prechecked(name, x.ctypes.data, out.ctypes.data, out.nbytes, ops.DTYPES[x.dtype.name],
                                           x.shape, 0)
    if outcome is True:
        return out
    data, shape, _ = ops.finish_run_data(outcome)
    return out if data is None else np.frombuffer(data, x.dtype).reshape(shape)


def _repeat_broadcast_and_allgather(iterations):
    import numpy as np

    from horovod_spark.common import _core, basics

    basics.init()
    r, n = basics.rank(), basics.size()
    wrong = []
    before = _core.stats()
    for i in range(iterations):
        root = (i // 50) % n  # a few roots, each long enough to be cached and go ahead
        x = np.full(256, float(r * 1000 + i), np.float32)
        _blocking_broadcast(x, root)
        if not np.all(x == root * 1000 + i):
            wrong.append(("broadcast", i))
        y = np.full((4, 3), float(r * 1000 + i), np.float64)
        got = _blocking_allgather(y, n)
        if not np.array_equal(got, np.concatenate([np.full((4, 3), float(q * 1000 + i)) for q in range(n)])):
            wrong.append(("allgather", i))
    after = _core.stats()
    basics.shutdown()
    return wrong, {k: after[k] - before[k]
                   for k in ("speculative_sent", "speculative_done", "caller_lane_done", "responses")}


def test_repeated_small_broadcasts_and_allgathers_complete_without_responses():
    results = run_local(_repeat_broadcast_and_allgather, args=(150,), num_proc=3, timeout=TIMEOUT)
    for wrong, stats in results:
        assert wrong == []
        # 300 collectives: the first of each signature (3 roots, one allgather) negotiates.
        assert stats["speculative_sent"] >= 250, stats
        assert stats["speculative_done"] >= 200, stats
        assert stats["responses"] <= 100, stats
        assert stats["caller_lane_done"] >= 30, stats  # (see the allreduce's test above)


def _data_disagreement_after_early_send():
    import numpy as np

    from horovod_spark.common import _core, basics
    from horovod_spark.exceptions import HorovodCollectiveError

    basics.init()
    r, n = basics.rank(), basics.size()
    outcomes = []
    x = np.ones(100, np.float32)
    for _ in range(20):  # cached: every rank goes ahead on its own
        _blocking_allgather(x, n)
        _blocking_broadcast(x, 0)
    # Rank 1 gathers more rows than it did (80 KB, more than the direct algorithm takes): a valid
    # allgather, which the others' early blocks must still complete exactly.
    mine = np.full(100 if r != 1 else 20000, float(r), np.float32)
    sent = _core.stats()["speculative_sent"]
    got = _blocking_allgather(mine, n)
    early = [_core.stats()["speculative_sent"] - sent]
    outcomes.append(np.array_equal(got, np.concatenate([np.full(100 if q != 1 else 20000, float(q), np.float32)
                                                        for q in range(n)])))
    # Rank 2 broadcasts a different shape after the root's data went out: an error everywhere.
    error = None
    sent = _core.stats()["speculative_sent"]
    try:
        _blocking_broadcast(np.ones(101 if r == 2 else 100, np.float32), 0)
    except HorovodCollectiveError as exc:
        error = str(exc)
    early.append(_core.stats()["speculative_sent"] - sent)
    # The links carry nothing stale afterwards.
    for i in range(30):
        y = np.full(100, float(r * 10 + i), np.float32)
        _blocking_broadcast(y, i % n)
        outcomes.append(bool(np.all(y == (i % n) * 10 + i)))
        got = _blocking_allgather(y, n)
        outcomes.append(np.array_equal(got, np.concatenate([np.full(100, float((i % n) * 10 + i), np.float32)] * n)))
    basics.shutdown()
    return error, outcomes, early


def test_disagreeing_broadcasts_and_allgathers_after_early_sends_fall_back_and_leave_the_links_clean():
    results = run_local(_data_disagreement_after_early_send, num_proc=3, timeout=TIMEOUT)
    for error, outcomes, _ in results:
        assert error is not None and "'bc'" in error and "shape" in error, error
        assert all(outcomes), outcomes
    # The ranks whose requests matched the cache had sent their inputs early (rank 1's allgather and
    # rank 2's broadcast missed it).
    assert [early for _, _, early in results] == [[1, 1], [0, 1], [1, 0]]
