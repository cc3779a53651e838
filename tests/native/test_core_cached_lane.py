"""The coordinator's steady-state lane: tensors that every rank sends as response-cache ids are
counted per id instead of stored per rank (native/engine/cached_lane.h). Whatever is unusual must
still behave as on the general path: two cached signatures of one tensor on different ranks fail
as a mismatch, a late rank triggers the stall warning, a rank that joins contributes zeros."""
import json
import textwrap

from support.rank_procs import rank_processes

from horovod_spark.launcher import run_local


def _lane_program():
    import numpy as np

    from horovod_spark.common import _core, basics, ops
    from horovod_spark.exceptions import HorovodCollectiveError

    def _allreduce(name, values):
        return ops.allreduce_async(name, values.ctypes.data, values.ctypes.data, "float32", values.shape, ops.Sum)

    basics.init()
    r, n = basics.rank(), basics.size()
    expected = float(sum(q + 1 for q in range(n)))
    out = {}

    # Steady state: 16 tensors, 6 rounds; from the second round on they travel as cache ids.
    before = dict(_core.stats())
    tensors = [np.zeros(3 + i, np.float32) for i in range(16)]
    ok = True
    for _ in range(6):
        for t in tensors:
            t[:] = r + 1
        for h in [_allreduce("step.%d" % i, t) for i, t in enumerate(tensors)]:
            ops.wait(h)
        ok = ok and all(np.all(t == expected) for t in tensors)
    out["steady_correct"] = bool(ok)
    out["steady_cached_requests"] = _core.stats()["requests_cached"] - before["requests_cached"]

    # Two signatures of one tensor, each cached on every rank.
    small, large = np.zeros(4, np.float32), np.zeros(8, np.float32)
    for _ in range(3):
        ops.wait(_allreduce("w", small))
        ops.wait(_allreduce("w", large))
    # Now the last rank sends the other one: a mismatch on every rank, not a hang.
    try:
        ops.wait(_allreduce("w", large if r == n - 1 else small), timeout=30)
        out["mismatch"] = "no error"
    except HorovodCollectiveError as exc:
        out["mismatch"] = str(exc)
    small[:] = r + 1
    ops.wait(_allreduce("w", small))
    out["after_mismatch"] = small.tolist()

    # A rank that joins while the others' cached tensor waits: it contributes zeros.
    j = np.zeros(5, np.float32)
    for _ in range(3):
        ops.wait(_allreduce("j", j))
    j[:] = r + 1 if r != n - 1 else 100.0
    if r != n - 1:
        ops.wait(_allreduce("j", j), timeout=30)
    out["joined_value"] = float(j[0])
    out["last_joined"] = ops.wait(ops.join_async(), timeout=30)
    basics.shutdown()
    return out


def test_lane_steady_state_mismatch_and_join_on_three_ranks():
    results = run_local(_lane_program, num_proc=3, timeout=120)
    for r, out in enumerate(results):
        assert out["steady_correct"], out
        assert out["steady_cached_requests"] >= 16 * 5, out
        assert "'w'" in out["mismatch"] and "[4]" in out["mismatch"] and "[8]" in out["mismatch"], out["mismatch"]
        assert out["after_mismatch"] == [6.0] * 4
        # Ranks 0 and 1 get 1 + 2: rank 2 joined instead of sending its 100s.
        assert out["joined_value"] == (3.0 if r < 2 else 100.0), out
    assert {out["last_joined"] for out in results} == {results[0]["last_joined"]}


LATE_RANK_CODE = textwrap.dedent("""
    import json, time
    import numpy as np
    from horovod_spark.common import basics, ops
    basics.init()
    r = basics.rank()
    x = np.zeros(4, np.float32)
    for _ in range(3):  # cached from here on
        ops.wait(ops.allreduce_async("late", x.ctypes.data, x.ctypes.data, "float32", x.shape, ops.Sum))
    x[:] = r + 1
    if r == 2:
        time.sleep(2.5)
    ops.wait(ops.allreduce_async("late", x.ctypes.data, x.ctypes.data, "float32", x.shape, ops.Sum),
             timeout=30)
    print(json.dumps({"value": float(x[0])}))
    basics.shutdown()
""")


def test_late_rank_on_a_cached_tensor_gets_the_stall_warning_and_completes():
    env = {"HOROVOD_STALL_CHECK_TIME_SECONDS": "1"}
    with rank_processes(LATE_RANK_CODE, 3, env) as procs:
        outputs = [p.communicate(timeout=60) for p in procs]
    for out, err in outputs:
        assert json.loads(out.strip().splitlines()[-1]) == {"value": 6.0}, (out, err)
    err0 = outputs[0][1]
    assert "'late'" in err0 and "missing ranks [2]" in err0 and "Submitted by ranks [0, 1]" in err0, err0


def _random_steps():
    """120 rounds of 24 tensors submitted in a different random order on each rank, with short
    random pauses; in about one round in ten the last rank sends one tensor one element longer."""
    import random
    import time

    import numpy as np

    from horovod_spark.common import basics, ops
    from horovod_spark.exceptions import HorovodCollectiveError

    basics.init()
    r, n = basics.rank(), basics.size()
    mine, shared = random.Random(1234 + r), random.Random(99)  # shared: the same draws on every rank
    expected = float(sum(q + 1 for q in range(n)))
    wrong, failed_as_planned = 0, 0
    for _ in range(120):
        sizes = [shared.choice([3, 5, 4096, 70000]) for _ in range(24)]
        odd = shared.randrange(24) if shared.random() < 0.1 else -1
        arrays = [np.full(s + (i == odd and r == n - 1), r + 1, np.float32) for i, s in enumerate(sizes)]
        order = list(range(24))
        mine.shuffle(order)
        handles = {}
        for i in order:
            if mine.random() < 0.2:
                time.sleep(mine.random() * 0.002)
            a = arrays[i]
            handles[i] = ops.allreduce_async("t.%d" % i, a.ctypes.data, a.ctypes.data, "float32", a.shape, ops.Sum)
        for i in order:
            try:
                ops.wait(handles[i], timeout=30)
                wrong += int(i == odd or not np.all(arrays[i] == expected))
            except HorovodCollectiveError:
                failed_as_planned += int(i == odd)
                wrong += int(i != odd)
    basics.shutdown()
    return {"wrong": wrong, "mismatches": failed_as_planned}


def test_random_orders_and_occasional_mismatches_on_three_ranks():
    results = run_local(_random_steps, num_proc=3, timeout=120)
    assert all(out["wrong"] == 0 for out in results), results
    assert len({out["mismatches"] for out in results}) == 1 and results[0]["mismatches"] > 0, results
