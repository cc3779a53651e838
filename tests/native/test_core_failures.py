"""What ranks see when something goes wrong: mismatched requests fail on every rank with the tensor
and ranks named (and the engine keeps working), a rank that dies abruptly makes the others raise
within 10 s, a tensor submitted by only some ranks triggers the stall warning."""
import json
import textwrap

import pytest
from support.rank_procs import rank_processes

from horovod_spark.launcher import run_local


def _mismatches():
    import numpy as np

    from horovod_spark.common import basics, ops
    from horovod_spark.exceptions import HorovodCollectiveError

    basics.init()
    r = basics.rank()
    seen = {}

    def attempt(label, fn):
        try:
            fn()
            seen[label] = "no error"
        except HorovodCollectiveError as exc:
            seen[label] = str(exc)

    shape_x = np.zeros(3 + r, np.float32)
    attempt("shape", lambda: ops.wait(ops.allreduce_async(
        "grads.w", shape_x.ctypes.data, shape_x.ctypes.data, "float32", shape_x.shape, ops.Sum)))
    dt = np.zeros(4, np.float32 if r == 0 else np.float64)
    attempt("dtype", lambda: ops.wait(ops.allreduce_async(
        "grads.b", dt.ctypes.data, dt.ctypes.data, str(dt.dtype), dt.shape, ops.Sum)))
    y = np.zeros(4, np.float32)
    attempt("op", lambda: ops.wait(ops.allreduce_async(
        "loss", y.ctypes.data, y.ctypes.data, "float32", y.shape, ops.Sum if r == 0 else ops.Max)))
    attempt("root", lambda: ops.wait(ops.broadcast_async(
        "params", y.ctypes.data, y.ctypes.data, "float32", y.shape, 5)))
    # A grouped allreduce is one packed request: members must match rank by rank even where the
    # totals agree (rank 0: 2 + 6 elements, rank 1: 6 + 2).
    members = [np.zeros(2 if r == 0 else 6, np.float32), np.zeros(6 if r == 0 else 2, np.float32)]
    attempt("group", lambda: ops.wait(ops.grouped_allreduce_async(
        "layer.grads", [m.ctypes.data for m in members], [m.ctypes.data for m in members], "float32",
        [m.shape for m in members], ops.Sum)))
    # the engine is still healthy afterwards
    ok = np.ones(4, np.float32)
    ops.wait(ops.allreduce_async("after", ok.ctypes.data, ok.ctypes.data, "float32", ok.shape, ops.Sum))
    seen["after"] = ok.tolist()
    basics.shutdown()
    return seen


def test_mismatched_requests_fail_on_every_rank_naming_tensor_and_ranks():
    results = run_local(_mismatches, num_proc=2, timeout=120)
    for seen in results:
        assert "grads.w" in seen["shape"] and "rank 0 has [3]" in seen["shape"] and \
            "rank 1 has [4]" in seen["shape"]
        assert "grads.b" in seen["dtype"] and "float32" in seen["dtype"] and "float64" in seen["dtype"]
        assert "'loss'" in seen["op"] and "Sum" in seen["op"] and "Max" in seen["op"]
        assert "root_rank 5" in seen["root"]
        assert "'layer.grads'" in seen["group"] and "member shapes" in seen["group"] and \
            "rank 0 has [2], [6]" in seen["group"] and "rank 1 has [6], [2]" in seen["group"], seen["group"]
        assert seen["after"] == [2.0] * 4


DIE_CODE = textwrap.dedent("""
    import json, os, sys, time
    import numpy as np
    from horovod_spark.common import basics, ops
    from horovod_spark.exceptions import HorovodInternalError
    basics.init()
    x = np.ones(1 << 16, np.float32)
    ops.wait(ops.allreduce_async("warm", x.ctypes.data, x.ctypes.data, "float32", x.shape, ops.Sum))
    if basics.rank() == 1:
        time.sleep(0.5)
        os._exit(3)
    t0 = time.monotonic()
    try:
        ops.wait(ops.allreduce_async("after_death", x.ctypes.data, x.ctypes.data, "float32",
                                     x.shape, ops.Sum), timeout=60)
        print(json.dumps({"error": None}))
    except HorovodInternalError as exc:
        print(json.dumps({"error": str(exc), "seconds": time.monotonic() - t0}))
    try:
        ops.wait(ops.allreduce_async("later", x.ctypes.data, x.ctypes.data, "float32",
                                     x.shape, ops.Sum), timeout=10)
        print(json.dumps({"later": None}))
    except HorovodInternalError as exc:
        print(json.dumps({"later": str(exc)}))
""")


@pytest.mark.parametrize("shm", ["1", "0"], ids=["tcp", "shm"])
def test_rank_dying_abruptly_makes_others_raise_quickly(shm):
    with rank_processes(DIE_CODE, 2, {"HOROVOD_SHM_DISABLE": shm}) as (p0, p1):
        out, err = p0.communicate(timeout=60)
        assert p1.wait(timeout=10) == 3
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert lines and lines[0]["error"], (out, err)
    assert "rank 1" in lines[0]["error"] and "exited unexpectedly" in lines[0]["error"]
    assert lines[0]["seconds"] < 10
    assert lines[1]["later"] and "rank 1" in lines[1]["later"]


def _shutdown_while_threads_wait():
    import threading
    import time

    import numpy as np

    from horovod_spark.common import basics, ops

    basics.init()
    if basics.rank() == 1:
        time.sleep(3)  # never sends what rank 0's threads wait for; stays until they are done
        basics.shutdown()
        return None
    ended = {}

    def blocking():  # the latency path: a blocking allreduce
        x = np.ones(4, np.float32)
        try:
            ops.allreduce("never.blocking", x.ctypes.data, x.ctypes.data, "float32", x.shape, ops.Sum)
        except Exception as exc:  # (which one is what the test reports)
            ended["blocking"] = "%s: %s" % (type(exc).__name__, exc)

    def waiting():  # an asynchronous handle, waited on
        y = np.ones(4, np.float32)
        h = ops.allreduce_async("never.async", y.ctypes.data, y.ctypes.data, "float32", y.shape, ops.Sum)
        try:
            ops.wait(h)
        except Exception as exc:
            ended["waiting"] = "%s: %s" % (type(exc).__name__, exc)

    threads = [threading.Thread(target=f) for f in (blocking, waiting)]
    for t in threads:
        t.start()
    from horovod_spark.common import _core  # (its counters show when the engine holds both requests)

    deadline = time.monotonic() + 30
    while _core.stats()["requests_full"] < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # (and both threads wait on them)
    basics.shutdown()  # as atexit does while daemon threads wait in collectives
    for t in threads:
        t.join(10)
    return {"alive": [t.is_alive() for t in threads], "ended": ended}


def test_shutdown_while_other_threads_wait_in_collectives():
    # The engine stays alive until the waiting calls have returned (an ASan build of the core
    # reported a use after free here when it did not), and both threads get the shut-down error.
    out = run_local(_shutdown_while_threads_wait, num_proc=2, timeout=60)[0]
    assert out["alive"] == [False, False], out
    for how in ("blocking", "waiting"):
        assert "HorovodInternalError" in out["ended"].get(how, "") and "shut down" in out["ended"][how], out


STALL_CODE = textwrap.dedent("""
    import time
    import numpy as np
    from horovod_spark.common import basics, ops
    basics.init()
    x = np.ones(4, np.float32)
    if basics.rank() == 0:
        h = ops.allreduce_async("only_rank0_sends_this", x.ctypes.data, x.ctypes.data, "float32",
                                x.shape, ops.Sum)
        time.sleep(3.5)
    else:
        time.sleep(3.5)
    basics.shutdown()
""")


def test_stall_warning_names_tensor_and_missing_ranks():
    env = {"HOROVOD_STALL_CHECK_TIME_SECONDS": "1"}
    with rank_processes(STALL_CODE, 2, env) as (p0, p1):
        out, err = p0.communicate(timeout=60)
        p1.communicate(timeout=60)
    assert "only_rank0_sends_this" in err and "missing ranks [1]" in err, err
    assert "Submitted by ranks [0]" in err


@pytest.mark.parametrize("env, error", [
    # the rendezvous service is gone (a driver that died): refused connection
    ({"HOROVOD_RENDEZVOUS_PORT": "1"}, "ConnectionError"),
    # nics= naming an interface this host does not have (ConfigError: a ValueError naming the variable)
    ({"HOROVOD_GLOO_IFACE": "nosuchnic0"}, "ConfigError"),
])
def test_init_failing_before_the_links_exist_raises_cleanly(env, error):
    """hvd.init() that fails after creating the core but before connecting it raises a Python
    error and leaves the process usable (it used to crash with SIGSEGV tearing the core down)."""
    import os
    import subprocess
    import sys
    script = textwrap.dedent("""
        import horovod_spark.torch as hvd
        try:
            hvd.init()
        except Exception as exc:
            print("raised", type(exc).__name__)
        print("still running", hvd.is_initialized())
    """)
    full_env = dict(os.environ, HOROVOD_RANK="0", HOROVOD_SIZE="2", HOROVOD_RENDEZVOUS_ADDR="127.0.0.1",
                    HOROVOD_RENDEZVOUS_PORT="1", HOROVOD_SECRET_KEY="00", HOROVOD_START_TIMEOUT="5")
    full_env.update(env)
    proc = subprocess.run([sys.executable, "-c", script], env=full_env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[:2] == ["raised " + error, "still running False"]
