"""horovod_spark.run on one local[4] SparkSession: results, environment, failures, timeouts, logs,
service authentication, argument checks."""
import importlib.util
import io
import os
import pickle
import re
import socket
import struct
import subprocess
import sys
import threading
import time

import cloudpickle
import pytest

import horovod_spark
from horovod_spark.common import wire
from horovod_spark.common.kv_client import KVClient
from horovod_spark.spark import HorovodSparkError, RankFailedError, StartTimeoutError
from horovod_spark.spark.driver.service import DriverService

pyspark = pytest.importorskip("pyspark")

pytestmark = pytest.mark.timeout(120)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__)))
SLOTS = 4

# Functions below travel by value, like a notebook's: the executors need not import this module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def spark_master():
    return "local[%d]" % SLOTS


def _alive(pid: int) -> bool:
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


_threads_before_test = set()


@pytest.fixture(autouse=True)
def _note_threads_before_test():
    # Threads that live for the whole process (torch's staging worker, started by an earlier
    # module's collectives) are not the test's to account for.
    _threads_before_test.clear()
    _threads_before_test.update(t.ident for t in threading.enumerate())


def _our_threads(settle_s: float = 3.0):
    """Our service/runner threads started since the test began and still alive, after giving any
    that are already finishing up to settle_s to exit (a connection thread can be a few ms from its
    end when run() returns). A thread that really leaked is still listed."""
    deadline = time.monotonic() + settle_s
    while True:
        alive = [t.name for t in threading.enumerate()
                 if t.name.startswith(("kv-", "hs-")) and t.ident not in _threads_before_test]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


# -- rank functions ---------------------------------------------------------------------------

def _rank_times(scale):
    rank = int(os.environ["HOROVOD_RANK"])
    time.sleep(0.3 * (int(os.environ["HOROVOD_SIZE"]) - rank))  # finish in reverse rank order
    return {"rank": rank, "value": rank * scale}


def _rank_env():
    keys = ["HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
            "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE", "HOROVOD_HOSTNAME", "HOROVOD_RUN_SCOPE",
            "HOROVOD_RENDEZVOUS_ADDR", "HOROVOD_RENDEZVOUS_PORT", "MY_SETTING", "CUDA_VISIBLE_DEVICES"]
    env = {k: os.environ.get(k) for k in keys}
    # The rendezvous variables must name the live, authenticated KV service of this job.
    client = KVClient.from_env()
    scope = os.environ["HOROVOD_RUN_SCOPE"]
    client.put(scope, "r%s" % env["HOROVOD_RANK"], env["HOROVOD_RANK"].encode())
    size = int(env["HOROVOD_SIZE"])
    seen = client.get_many(scope, ["r%d" % r for r in range(size)], timeout=30)
    env["kv_seen"] = sorted(int(v) for v in seen.values())
    env["hostname"] = socket.gethostname()
    env["pid"] = os.getpid()
    env["ppid"] = os.getppid()
    client.close()
    return env


def _fail_one(pid_dir, bad_rank):
    rank = int(os.environ["HOROVOD_RANK"])
    with open(os.path.join(pid_dir, "%d.pid" % rank), "w") as f:
        f.write("%d %s" % (os.getpid(), os.environ["HOROVOD_RENDEZVOUS_PORT"]))
    if rank == bad_rank:
        time.sleep(0.5)
        raise ValueError("boom on purpose")
    time.sleep(120)  # a peer blocked forever, as if in a collective with the failed rank


def _print_lines(flag_path):
    rank = int(os.environ["HOROVOD_RANK"])
    print("first line of rank %d" % rank, flush=True)
    print("to stderr from %d" % rank, file=sys.stderr, flush=True)
    sys.stdout.write("partial ")
    sys.stdout.flush()
    deadline = time.monotonic() + 30
    while not os.path.exists(flag_path):  # the driver saw our first line while we run
        if time.monotonic() > deadline:
            raise TimeoutError("the driver never saw the first line")
        time.sleep(0.05)
    sys.stdout.write("line joined\nno newline at the end")
    return rank


def _leave_grandchild(pid_dir):
    import subprocess
    child = subprocess.Popen(["sleep", "300"])
    with open(os.path.join(pid_dir, "%s.pid" % os.environ["HOROVOD_RANK"]), "w") as f:
        f.write(str(child.pid))
    return child.pid


def _forge_then_work():
    """Rank 0 attacks its own driver service with forged frames, then checks it still works."""
    addr, port = os.environ["HOROVOD_RENDEZVOUS_ADDR"], int(os.environ["HOROVOD_RENDEZVOUS_PORT"])
    outcome = {}
    if os.environ["HOROVOD_RANK"] == "0":
        with socket.create_connection((addr, port), timeout=10) as s:
            try:
                wire.client_handshake(s, b"not the secret", timeout=10)
            except wire.AuthenticationError:
                outcome["handshake"] = "refused"
            forged = wire.encode_message(("failed", 1, "X", "forged", ""))
            try:
                s.sendall(struct.pack(">IQ", len(forged), 0) + b"\0" * 32 + forged)
                s.settimeout(10)
                outcome["forged_reply"] = s.recv(1)  # b"": the service hung up without answering
            except ConnectionResetError:
                outcome["forged_reply"] = b""  # hung up with our frame unread
    client = KVClient.from_env()
    client.put(os.environ["HOROVOD_RUN_SCOPE"], "ok", b"1")
    client.close()
    return outcome


def _allreduce_and_optimizer_step():
    import torch

    import horovod_spark.torch as hvd
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    summed = hvd.allreduce(torch.full((3,), float(rank + 1)), op=hvd.Sum, name="summed")
    averaged = hvd.allreduce(torch.tensor([float(rank)]), name="averaged")
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(float(rank))  # differs per rank until broadcast
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    opt.zero_grad()
    model(torch.tensor([[float(rank + 1), 1.0]])).sum().backward()  # grad = this rank's input
    opt.step()
    out = {"rank": rank, "size": size, "local_rank": hvd.local_rank(), "local_size": hvd.local_size(),
           "summed": summed.tolist(), "averaged": averaged.item(),
           "weight": model.weight.detach().flatten().tolist()}
    hvd.shutdown()
    return out


def check_allreduce_and_step(results, size):
    """What _allreduce_and_optimizer_step must return on every rank of a healthy job."""
    expected_sum = float(size * (size + 1) // 2)
    mean_grad = (size + 1) / 2.0  # gradients are averaged over ranks: mean of rank + 1
    for rank, out in enumerate(results):
        assert out["rank"] == rank and out["size"] == size
        assert out["summed"] == [expected_sum] * 3
        assert out["averaged"] == pytest.approx((size - 1) / 2.0)
        assert out["weight"] == pytest.approx([0.0 - 0.1 * mean_grad, 0.0 - 0.1 * 1.0])


def _init_on_rank_zero_only():
    from horovod_spark.common import basics
    if int(os.environ["HOROVOD_RANK"]) == 1:
        return "rank 1 never calls hvd.init()"
    basics.init()
    return basics.rank()


def test_rank_returning_without_init_fails_the_others_fast(spark):
    # Rank 0 would otherwise wait in hvd.init() for the whole start timeout (600 s by default).
    start = time.monotonic()
    with pytest.raises(RankFailedError) as info:
        horovod_spark.run(_init_on_rank_zero_only, num_proc=2, verbose=0)
    assert time.monotonic() - start < 20
    assert info.value.rank == 0
    assert "rank 1 (exit code 0) ended without calling hvd.init()" in str(info.value)


def _die_before_allreduce():
    """Rank 1 raises while rank 0 waits in an allreduce with it: rank 0 then fails too (peer lost),
    and the root cause must still be the headline. Raw core ops: no torch import needed."""
    import numpy as np

    from horovod_spark.common import basics, ops
    basics.init()
    if basics.rank() == 1:
        time.sleep(0.5)
        raise ValueError("root cause on rank 1")
    buf = np.ones(4, dtype=np.float32)
    ops.wait(ops.allreduce_async("x", buf.ctypes.data, buf.ctypes.data, "float32", (4,), ops.Sum),
             timeout=60)
    return buf.tolist()


def _mpi_where(fail_rank=None, pid_dir=None):
    """Under use_mpi=True: MPI's view of this rank, and which Spark Python worker it descends from."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    if pid_dir:  # this rank and mpirun's daemon that started it
        with open(os.path.join(pid_dir, "%d.pid" % comm.Get_rank()), "w") as f:
            f.write("%d %d" % (os.getpid(), os.getppid()))
    pid, worker = os.getpid(), None
    while pid > 1:  # walk up: rank <- mpirun's daemon <- /bin/sh <- the task's Python worker
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            if b"pyspark.daemon" in f.read():
                worker = pid
                break
        with open("/proc/%d/stat" % pid) as f:
            pid = int(f.read().rsplit(")", 1)[1].split()[1])
    if comm.Get_rank() == fail_rank:
        raise RuntimeError("rank %d fails under MPI" % fail_rank)
    if fail_rank is not None:
        time.sleep(120)
    return {"mpi_rank": comm.Get_rank(), "mpi_size": comm.Get_size(),
            "sum": comm.allreduce(comm.Get_rank() + 1), "worker": worker, "pid": os.getpid()}


def _mpi_hvd():
    import torch
    from mpi4py import MPI

    import horovod_spark.torch as hvd
    hvd.init()
    out = (hvd.rank(), hvd.size(), MPI.COMM_WORLD.Get_rank(),
           hvd.allreduce(torch.ones(2), op=hvd.Sum, name="mpi").tolist(),
           os.environ.get("OMPI_MCA_btl_tcp_eager_limit"), os.environ.get("OMPI_MCA_btl_tcp_if_include"))
    hvd.shutdown()
    return out


def _needs_mpi():
    from horovod_spark.spark.mpi.launch import _mpirun
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("MPI mode needs mpi4py")
    try:
        _mpirun()
    except HorovodSparkError as exc:
        pytest.skip(str(exc))


# -- tests ------------------------------------------------------------------------------------

def test_results_ordered_by_rank(spark):
    for num_proc in (2, SLOTS):
        results = horovod_spark.run(_rank_times, args=(10,), num_proc=num_proc, verbose=0)
        assert results == [{"rank": r, "value": 10 * r} for r in range(num_proc)]


def test_allreduce_and_distributed_optimizer(spark):
    # Two ranks only: each rank imports torch (seconds of CPU on a small machine); the 4-rank,
    # two-executor version is in test_spark_cluster.py.
    results = horovod_spark.run(_allreduce_and_optimizer_step, num_proc=2, verbose=0)
    check_allreduce_and_step(results, 2)
    assert [r["local_rank"] for r in results] == [0, 1]


def test_root_cause_beats_peer_lost_errors(spark):
    with pytest.raises(RankFailedError) as info:
        horovod_spark.run(_die_before_allreduce, num_proc=2, verbose=0)
    assert info.value.rank == 1 and info.value.exc_type == "ValueError"
    assert "root cause on rank 1" in info.value.remote_traceback


def test_num_proc_defaults_to_default_parallelism(spark):
    assert spark.sparkContext.defaultParallelism == SLOTS
    assert horovod_spark.run(lambda: int(os.environ["HOROVOD_SIZE"]), verbose=0) == [SLOTS] * SLOTS


def test_environment_inside_fn(spark):
    results = horovod_spark.run(_rank_env, num_proc=SLOTS, env={"MY_SETTING": 42}, verbose=0)
    host = socket.gethostname()
    scopes = {r["HOROVOD_RUN_SCOPE"] for r in results}
    assert len(scopes) == 1
    for rank, env in enumerate(results):
        assert env["HOROVOD_RANK"] == str(rank)
        assert env["HOROVOD_SIZE"] == str(SLOTS)
        # One host: every rank is local to every other, ordered by rank.
        assert env["HOROVOD_LOCAL_RANK"] == str(rank)
        assert env["HOROVOD_LOCAL_SIZE"] == str(SLOTS)
        assert env["HOROVOD_CROSS_RANK"] == "0"
        assert env["HOROVOD_CROSS_SIZE"] == "1"
        assert env["HOROVOD_HOSTNAME"] == env["hostname"] == host
        assert env["HOROVOD_RENDEZVOUS_ADDR"] == spark.sparkContext.getConf().get("spark.driver.host")
        assert env["MY_SETTING"] == "42"
        assert env["CUDA_VISIBLE_DEVICES"] is None  # no GPUs scheduled: device choice by local_rank
        assert env["kv_seen"] == list(range(SLOTS))
        # fn runs in a child of the Python worker, not in the worker itself.
        assert env["ppid"] != os.getpid() and env["pid"] != env["ppid"]
    assert len({env["pid"] for env in results}) == SLOTS


def test_exception_on_one_rank_fails_fast_and_cleans_up(spark, tmp_path):
    tracker = spark.sparkContext.statusTracker()
    start = time.monotonic()
    with pytest.raises(RankFailedError) as info:
        horovod_spark.run(_fail_one, args=(str(tmp_path), 2), num_proc=SLOTS, verbose=0)
    elapsed = time.monotonic() - start
    assert elapsed < 15, "took %.1f s" % elapsed
    exc = info.value
    assert exc.rank == 2 and exc.exc_type == "ValueError"
    assert "boom on purpose" in str(exc)
    assert 'raise ValueError("boom on purpose")' in exc.remote_traceback
    # The rank shows the driver's file for code sent by value, whatever cloudpickle named it.
    assert 'File "%s", line %d, in _fail_one' % (__file__, _fail_one.__code__.co_firstlineno + 6) \
        in exc.remote_traceback, exc.remote_traceback
    assert "_fail_one" in exc.remote_traceback
    # The job group was cancelled: its job is over and did not succeed.
    job_ids = tracker.getJobIdsForGroup(exc.job_group)
    assert job_ids
    for job_id in job_ids:
        assert tracker.getJobInfo(job_id).status in ("FAILED", "UNKNOWN")
    assert not set(job_ids) & set(tracker.getActiveJobsIds())
    # Nothing outlives the call: rank processes, the service's port, our driver threads.
    records = [p.read_text().split() for p in sorted(tmp_path.glob("*.pid"))]
    assert len(records) == SLOTS
    pids = [int(pid) for pid, _ in records]
    assert [p for p in pids if _alive(p)] == []
    port = int(records[0][1])
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    assert _our_threads() == []


def test_unreachable_driver_is_a_clear_error(spark, monkeypatch):
    monkeypatch.setenv("HOROVOD_SPARK_DRIVER_HOST", "no-such-host.invalid")
    start = time.monotonic()
    with pytest.raises(HorovodSparkError, match="cannot reach the horovod_spark driver service") as info:
        horovod_spark.run(lambda: 0, num_proc=2, verbose=0)
    assert time.monotonic() - start < 15
    assert "HOROVOD_SPARK_DRIVER_HOST" in str(info.value)
    assert _our_threads() == []


def _sleep_forever(pid_dir):
    with open(os.path.join(pid_dir, "%s.pid" % os.environ["HOROVOD_RANK"]), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(120)


def test_interrupted_driver_stops_everything(spark, tmp_path):
    """Ctrl-C in a notebook: run() raises KeyboardInterrupt, and the ranks die with the job."""
    import signal
    tracker = spark.sparkContext.statusTracker()

    def interrupt_when_running():
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("*.pid"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_running, daemon=True).start()
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        horovod_spark.run(_sleep_forever, args=(str(tmp_path),), num_proc=2, verbose=0)
    assert time.monotonic() - start < 60
    pids = [int(p.read_text()) for p in tmp_path.glob("*.pid")]
    assert len(pids) == 2 and [p for p in pids if _alive(p)] == []
    assert not tracker.getActiveJobsIds()
    assert _our_threads() == []


def test_no_spark_session_is_a_clear_error():
    code = "import horovod_spark; horovod_spark.run(print, num_proc=1)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=REPO_ROOT))
    assert proc.returncode != 0
    assert "HorovodSparkError: horovod_spark.run needs an active SparkSession" in proc.stderr


def test_not_enough_slots_fails_at_once(spark):
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(None))
    start = time.monotonic()
    with pytest.raises(HorovodSparkError) as info:
        horovod_spark.run(lambda: 0, num_proc=SLOTS + 1, verbose=0)
    assert time.monotonic() - start < 2
    text = str(info.value)
    assert "num_proc=%d" % (SLOTS + 1) in text and "has %d" % SLOTS in text
    assert "local[%d]" % (SLOTS + 1) in text  # how to fix it
    assert set(tracker.getJobIdsForGroup(None)) == before  # no job was submitted


def test_start_timeout_names_ranks_that_never_started(spark, tmp_path):
    sc = spark.sparkContext
    # Honest scenario: another job holds one of the 4 slots, so the barrier stage cannot start.
    blocker_started = tmp_path / "blocker"

    def hold_slot(_):
        open(str(blocker_started), "w").close()
        time.sleep(60)
        return []

    def blocker():
        sc.setJobGroup("test-blocker", "holds one slot", interruptOnCancel=True)
        try:
            sc.parallelize([0], 1).mapPartitions(hold_slot).collect()
        except Exception:
            pass  # cancelled below

    thread = threading.Thread(target=blocker, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not blocker_started.exists():
            assert time.monotonic() < deadline, "blocker job never started"
            time.sleep(0.05)
        start = time.monotonic()
        with pytest.raises(StartTimeoutError) as info:
            horovod_spark.run(lambda: 0, num_proc=SLOTS, start_timeout=2, verbose=0)
        elapsed = time.monotonic() - start
        assert 2 <= elapsed < 12, elapsed
        assert info.value.missing == list(range(SLOTS))
        assert "never registered" in str(info.value) and "free task slots" in str(info.value)
        assert not set(sc.statusTracker().getJobIdsForGroup(info.value.job_group)) \
            & set(sc.statusTracker().getActiveJobsIds())
    finally:
        sc.cancelJobGroup("test-blocker")
        thread.join(30)
    assert _our_threads() == []


def test_start_timeout_env_default(spark, monkeypatch):
    monkeypatch.setenv("HOROVOD_SPARK_START_TIMEOUT", "-3")
    with pytest.raises(ValueError, match="HOROVOD_SPARK_START_TIMEOUT"):
        horovod_spark.run(lambda: 0, num_proc=1)


def test_output_streams_to_given_files_while_running(spark, tmp_path):
    flag = tmp_path / "driver-saw-first-line"

    class Watcher(io.StringIO):
        def write(self, text):
            n = super().write(text)
            if "[1]<stdout>:first line of rank 1" in self.getvalue():
                flag.touch()
            return n

    out, err = Watcher(), io.StringIO()
    results = horovod_spark.run(_print_lines, args=(str(flag),), num_proc=2, stdout=out, stderr=err,
                                verbose=0)
    assert results == [0, 1]
    lines = out.getvalue().splitlines()
    for rank in (0, 1):
        assert "[%d]<stdout>:first line of rank %d" % (rank, rank) in lines
        assert "[%d]<stdout>:partial line joined" % rank in lines  # half lines are joined, not split
        assert "[%d]<stdout>:no newline at the end" % rank in lines  # flushed when the rank ends
        assert "[%d]<stderr>:to stderr from %d" % (rank, rank) in err.getvalue().splitlines()
    assert "<stderr>" not in out.getvalue()


def test_output_timestamps(spark, tmp_path):
    flag = tmp_path / "flag"
    flag.touch()
    out = io.StringIO()
    horovod_spark.run(_print_lines, args=(str(flag),), num_proc=1, stdout=out, stderr=io.StringIO(),
                      verbose=0, prefix_output_with_timestamp=True)
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \[0\]<stdout>:first line of rank 0$",
                     out.getvalue(), re.M), out.getvalue()


def test_rank_leftovers_are_killed(spark, tmp_path):
    pids = horovod_spark.run(_leave_grandchild, args=(str(tmp_path),), num_proc=2, verbose=0)
    assert len(pids) == 2 and [p for p in pids if _alive(p)] == []


def test_forged_frames_during_a_run(spark):
    results = horovod_spark.run(_forge_then_work, num_proc=2, verbose=0)
    assert results[0] == {"handshake": "refused", "forged_reply": b""}


class _Exploit:
    """Unpickling this would create the marker file."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _hung_up(s, data: bytes) -> bool:
    """Send ``data``; True when the service closes the connection without a reply byte."""
    try:
        s.sendall(data)
        s.settimeout(5)
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True  # closed with our bytes unread


def test_driver_service_rejects_forged_frames_without_unpickling(tmp_path):
    key = wire.make_secret()
    marker = str(tmp_path / "pwned")
    service = DriverService(key, 2, "job", lambda rank, chunks: None, host="127.0.0.1")
    port = service.start()
    try:
        evil = pickle.dumps(("failed", 0, "X", "forged", _Exploit(marker)))
        # 1. Wrong secret: the handshake fails and the connection is dropped before any payload.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            with pytest.raises(wire.AuthenticationError):
                wire.client_handshake(s, b"wrong key", timeout=5)
            assert _hung_up(s, len(evil).to_bytes(4, "big") + b"\0" * 40 + evil)
        # 2. A frame where a handshake belongs: same.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            assert _hung_up(s, len(evil).to_bytes(4, "big") + b"\0" * 32 + evil)
        # 3. Even with the secret, a pickle that would import/call something is refused.
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            session = wire.client_handshake(s, key, timeout=5)
            session.send(evil)
            reply = session.recv_message(timeout=5)
            assert reply[0] == "err" and reply[1] == "bad_request"
        assert not os.path.exists(marker)
        with service.condition:
            assert service.failures == []
        # A real client still gets served, and request validation holds.
        client = KVClient("127.0.0.1", port, key)
        assert client.request("ping") == "pong"
        with pytest.raises(Exception, match="job"):
            client.request("register", "other-job", 0, {}, 1.0)
        client.close()
    finally:
        service.stop()


def test_driver_service_start_timeout_names_missing_partitions():
    key = wire.make_secret()
    service = DriverService(key, 3, "job", lambda rank, chunks: None, host="127.0.0.1")
    port = service.start()
    try:
        client = KVClient("127.0.0.1", port, key)
        info = {"host": "h", "addr": "127.0.0.1", "pid": 1, "executor": "e", "attempt_id": 0, "gpus": [],
                "python": sys.executable}
        with pytest.raises(TimeoutError, match=r"only 1 of 3 tasks registered.*missing partitions \[1, 2\]"):
            client.request("register", "job", 0, info, 0.5, wait=0.5)
        assert service.missing_partitions() == [1, 2]
        client.close()
    finally:
        service.stop()


def test_unpicklable_fn_fails_before_any_job(spark):
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(None))
    lock = threading.Lock()
    with pytest.raises(HorovodSparkError, match="cannot be pickled with cloudpickle") as info:
        horovod_spark.run(lambda: lock.acquire(), num_proc=2)
    assert "lock" in str(info.value)
    assert set(tracker.getJobIdsForGroup(None)) == before


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-2, ValueError), (2.0, TypeError),
                                        ("2", TypeError), (True, TypeError)])
def test_bad_num_proc(spark, bad, error):
    with pytest.raises(error, match="num_proc"):
        horovod_spark.run(lambda: 0, num_proc=bad)


def _nic_and_python():
    import torch

    import horovod_spark.torch as hvd
    from horovod_spark.common import rendezvous
    hvd.init()
    total = hvd.allreduce(torch.ones(1), op=hvd.Sum).item()
    hvd.shutdown()
    return (os.environ.get("HOROVOD_GLOO_IFACE"), rendezvous.advertised_address(),
            os.environ.get("HS_STARTED_BY_WRAPPER"), total)


def test_horovod_run_parameters_nics_executable_use_gloo(spark, tmp_path):
    # horovod.spark.run's parameters, in its order: nics picks the interface the ranks advertise,
    # executable the ranks' interpreter, use_gloo our own transport.
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text('#!/bin/sh\nHS_STARTED_BY_WRAPPER=yes exec "%s" "$@"\n' % sys.executable)
    wrapper.chmod(0o755)
    out = horovod_spark.run(_nic_and_python, (), None, 2, None, None, True, None, None, None, None, 0, ["lo"],
                            executable=str(wrapper))
    assert out == [("lo", "127.0.0.1", "yes", 2.0)] * 2


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(use_mpi=True, use_gloo=True), ValueError, "two different transports"),
    (dict(extra_mpi_args="--bind-to none"), ValueError, "extra_mpi_args=.* needs use_mpi=True"),
    (dict(use_mpi=True, extra_mpi_args=["-x", "A"]), TypeError, "string of mpirun arguments"),
    (dict(nics=["eth0,eth1"]), ValueError, "network interface names"),
    (dict(nics=[]), ValueError, "network interface names"),
    (dict(executable=""), ValueError, "Python interpreter"),
    (dict(args=(1, 2)), TypeError, r"cannot be called with args=\(1, 2\).*too many positional arguments"),
    (dict(kwargs={"lr": 0.1}), TypeError, r"cannot be called with .*unexpected keyword argument 'lr'"),
])
def test_bad_run_parameters_fail_before_any_job(spark, kwargs, error, match):
    jobs = len(spark.sparkContext.statusTracker().getJobIdsForGroup())
    with pytest.raises(error, match=match):
        horovod_spark.run(lambda: 0, num_proc=2, **kwargs)
    assert len(spark.sparkContext.statusTracker().getJobIdsForGroup()) == jobs


def test_unknown_nic_names_the_interfaces(spark):
    with pytest.raises(RankFailedError) as info:
        horovod_spark.run(_nic_and_python, num_proc=2, nics=["nosuchnic0"], verbose=0)
    assert "nosuchnic0" in str(info.value) and "its interfaces are" in info.value.remote_traceback


def test_mpi_mode_one_rank_per_task(spark):
    _needs_mpi()
    out = horovod_spark.run(_mpi_where, num_proc=2, use_mpi=True, verbose=0)
    assert [(o["mpi_rank"], o["mpi_size"], o["sum"]) for o in out] == [(0, 2, 3), (1, 2, 3)]
    # Each MPI rank is a descendant of a different Spark Python worker: its own task.
    assert all(o["worker"] for o in out) and out[0]["worker"] != out[1]["worker"]
    assert [p for p in (o["pid"] for o in out) if _alive(p)] == []


def test_mpi_mode_core_and_failure(spark, tmp_path):
    _needs_mpi()
    # extra_mpi_args reach mpirun (an MCA setting the ranks then see in their environment).
    out = horovod_spark.run(_mpi_hvd, num_proc=2, use_mpi=True, verbose=0, nics=["lo"],
                            extra_mpi_args="--mca btl_tcp_eager_limit 65536")
    assert out == [(0, 2, 0, [2.0, 2.0], "65536", "lo"), (1, 2, 1, [2.0, 2.0], "65536", "lo")]
    start = time.monotonic()
    with pytest.raises(RankFailedError) as info:
        horovod_spark.run(_mpi_where, args=(1, str(tmp_path)), num_proc=2, use_mpi=True, verbose=0)
    assert time.monotonic() - start < 15
    assert info.value.rank == 1 and "rank 1 fails under MPI" in info.value.remote_traceback
    pids = [int(p) for f in tmp_path.glob("*.pid") for p in f.read_text().split()]
    assert len(pids) == 4  # two ranks, two daemons
    assert [p for p in pids if _alive(p)] == []
    assert _our_threads() == []
