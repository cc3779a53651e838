"""The core under membership change: after a peer dies, the survivors shut the core down and start
it again with a new size and new ranks in the same process, and repeated resets leak no file
descriptors, threads (Python or native) or shared-memory segments."""
import json
import textwrap

import pytest
from support.rank_procs import rank_processes

# Each cycle: init with this process's (rank, size) for that cycle, one allreduce checked against
# the sum of the ranks, shutdown; then the process's resources are counted. Counts are taken after
# the first cycle, so lazily created one-off things (imports, the KV client's first use) are not
# mistaken for leaks.
RESET_CODE = textwrap.dedent("""
    import json, os, sys, threading, time
    import numpy as np
    from horovod_spark.common import basics, ops
    from horovod_spark.exceptions import HorovodInternalError

    plan = json.loads(sys.argv[1])[int(os.environ["HOROVOD_RANK"])]

    def counts():
        shm = sorted(os.listdir("/dev/shm"))
        with open("/proc/self/maps") as maps:  # shared memory still mapped, unlinked or not
            mapped = sum(1 for line in maps if "/dev/shm/" in line or "(deleted)" in line)
        return {"fds": len(os.listdir("/proc/self/fd")), "threads": threading.active_count(),
                "tasks": len(os.listdir("/proc/self/task")), "shm": shm, "mapped": mapped}

    def cycle(rank, size, tag):
        os.environ["HOROVOD_RANK"], os.environ["HOROVOD_SIZE"] = str(rank), str(size)
        os.environ["HOROVOD_LOCAL_RANK"], os.environ["HOROVOD_LOCAL_SIZE"] = str(rank), str(size)
        basics.init()
        assert (basics.rank(), basics.size()) == (rank, size), (basics.rank(), basics.size())
        x = np.full(1 << 18, basics.rank(), np.float32)
        ops.wait(ops.allreduce_async(tag, x.ctypes.data, x.ctypes.data, "float32", x.shape, ops.Sum),
                 timeout=60)
        assert x[0] == sum(range(size)) and x[-1] == sum(range(size)), (x[0], size)
        seen["during"] = counts()  # what a running core holds, which the counts after must not keep
        basics.shutdown()

    seen = {"counts": []}
    for i, step in enumerate(plan):
        if step[0] == "fail":
            _, rank, size, dead = step
            os.environ["HOROVOD_RANK"], os.environ["HOROVOD_SIZE"] = str(rank), str(size)
            os.environ["HOROVOD_LOCAL_RANK"], os.environ["HOROVOD_LOCAL_SIZE"] = str(rank), str(size)
            basics.init()
            x = np.ones(1 << 22, np.float32)
            if basics.rank() == dead:
                time.sleep(0.3)
                os._exit(9)  # dies while the others are inside a 16 MiB allreduce
            t0 = time.monotonic()
            try:
                ops.wait(ops.allreduce_async("big", x.ctypes.data, x.ctypes.data, "float32", x.shape,
                                             ops.Sum), timeout=120)
                seen["failed_after"] = None
            except HorovodInternalError as exc:
                seen["failed_after"] = time.monotonic() - t0
                seen["error"] = str(exc)
            t0 = time.monotonic()
            try:
                ops.wait(ops.allreduce_async("next", x.ctypes.data, x.ctypes.data, "float32", x.shape,
                                             ops.Sum), timeout=120)
            except HorovodInternalError:
                seen["next_failed_after"] = time.monotonic() - t0
            basics.shutdown()
        else:
            cycle(step[1], step[2], "cycle.%d" % i)
        seen["counts"].append(counts())
    print(json.dumps(seen))
""")


def _last_json(out):
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, out
    return json.loads(lines[-1])


def _assert_no_growth(counts, err):
    first = counts[0]
    for later in counts[1:]:
        assert later["fds"] <= first["fds"], (counts, err)
        assert later["threads"] <= first["threads"], (counts, err)
        assert later["tasks"] <= first["tasks"], (counts, err)
        assert later["mapped"] <= first["mapped"], (counts, err)
        assert not set(later["shm"]) - set(first["shm"]), (counts, err)


@pytest.mark.parametrize("shm", ["0", "1"], ids=["shm", "tcp"])
def test_five_resets_leak_nothing(shm):
    cycles = 6  # one to warm up, five counted
    plan = [[["ok", r, 2]] * cycles for r in range(2)]
    with rank_processes(RESET_CODE, 2, {"HOROVOD_SHM_DISABLE": shm}, argv=[json.dumps(plan)]) as procs:
        outs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        seen = _last_json(out)
        counts = seen["counts"]
        assert len(counts) == cycles
        # the counts can see a core: a running one holds more threads and descriptors
        assert seen["during"]["tasks"] > counts[-1]["tasks"] and seen["during"]["fds"] > counts[-1]["fds"], seen
        _assert_no_growth(counts, err[-2000:])
        # nothing of this job's is left in /dev/shm once the core is shut down
        assert not [name for name in counts[-1]["shm"] if name not in counts[0]["shm"]]


@pytest.mark.parametrize("shm", ["0", "1"], ids=["shm", "tcp"])
def test_survivors_of_a_dead_peer_reset_to_a_smaller_job_with_new_ranks(shm):
    # Three ranks; rank 2 dies during a large allreduce. The survivors fail fast, shut down, and
    # form a job of two with their ranks swapped, then run four more reset cycles.
    plan = [
        [["fail", 0, 3, 2]] + [["ok", 1, 2]] * 5,
        [["fail", 1, 3, 2]] + [["ok", 0, 2]] * 5,
        [["fail", 2, 3, 2]],
    ]
    with rank_processes(RESET_CODE, 3, {"HOROVOD_SHM_DISABLE": shm}, argv=[json.dumps(plan)]) as procs:
        outs = [p.communicate(timeout=180) for p in procs]
    assert procs[2].returncode == 9
    for p, (out, err) in zip(procs[:2], outs[:2]):
        assert p.returncode == 0, err[-3000:]
        seen = _last_json(out)
        assert seen["failed_after"] is not None and seen["failed_after"] < 10, seen
        assert "rank 2" in seen["error"], seen["error"]
        assert seen["next_failed_after"] < 1, seen
        counts = seen["counts"]
        assert len(counts) == 6
        # the first count follows the failed job; the reset cycles after it add nothing
        _assert_no_growth(counts[1:], err[-2000:])
        assert not [name for name in counts[-1]["shm"] if name not in counts[1]["shm"]]
