"""run_local and the horovod-spark-run CLI, with plain Python ranks (no native core needed)."""
import io
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import horovod_spark
from horovod_spark.exceptions import RankFailedError
from horovod_spark.launcher import cli, run_local

pytestmark = pytest.mark.timeout(60)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__)))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        with open("/proc/%d/stat" % pid) as f:  # a zombie nobody reaped is gone for our purposes
            return f.read().split(")")[-1].split()[0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


def _wait_dead(pids, within: float) -> list:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def _read_pids(directory) -> list:
    """Pids written so far; a file a rank has created but not yet filled is skipped, not fatal."""
    pids = []
    for p in sorted(directory.glob("*.pid")):
        text = p.read_text().strip()
        if text:
            pids.append(int(text))
    return pids


# -- functions run as ranks (module level: shipped by reference, imported by the ranks) ----------

def _rank_info(scale, offset=0):
    print("hello from rank", os.environ["HOROVOD_RANK"])
    print("a warning", file=sys.stderr)
    keys = ["HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
            "HOROVOD_CROSS_SIZE", "HOROVOD_RENDEZVOUS_ADDR", "HOROVOD_RENDEZVOUS_PORT", "HOROVOD_SECRET_KEY",
            "HOROVOD_RUN_SCOPE", "HOROVOD_HOSTNAME", "MY_SETTING"]
    info = {k: os.environ.get(k) for k in keys}
    info["value"] = int(os.environ["HOROVOD_RANK"]) * scale + offset
    return info


def _fail_on_rank_one(pid_dir):
    rank = int(os.environ["HOROVOD_RANK"])
    with open(os.path.join(pid_dir, "%d.pid" % rank), "w") as f:
        f.write(str(os.getpid()))
    if rank == 0:
        # A child of the rank must die with it: the whole process group is killed.
        child = subprocess.Popen(["sleep", "60"])
        with open(os.path.join(pid_dir, "0-child.pid"), "w") as f:
            f.write(str(child.pid))
    if rank == 1:
        time.sleep(0.5)
        raise ValueError("rank one cannot go on")
    time.sleep(60)


def _crash_without_traceback():
    if os.environ["HOROVOD_RANK"] == "0":
        print("about to crash hard", file=sys.stderr, flush=True)
        os._exit(3)
    time.sleep(60)


def _sleep_forever():
    time.sleep(60)


# -- run_local -----------------------------------------------------------------------------------

@pytest.mark.timeout(30)
def test_run_local_returns_results_by_rank():
    out, err = io.StringIO(), io.StringIO()
    threads_before = set(threading.enumerate())
    results = run_local(_rank_info, args=(10,), kwargs={"offset": 1}, num_proc=3, env={"MY_SETTING": "on"},
                        stdout=out, stderr=err)
    assert [r["value"] for r in results] == [1, 11, 21]
    for rank, info in enumerate(results):
        assert info["HOROVOD_RANK"] == str(rank) and info["HOROVOD_LOCAL_RANK"] == str(rank)
        assert info["HOROVOD_SIZE"] == info["HOROVOD_LOCAL_SIZE"] == "3"
        assert (info["HOROVOD_CROSS_RANK"], info["HOROVOD_CROSS_SIZE"]) == ("0", "1")
        assert info["HOROVOD_RENDEZVOUS_ADDR"] == "127.0.0.1"
        assert len(bytes.fromhex(info["HOROVOD_SECRET_KEY"])) == 32
        assert info["HOROVOD_HOSTNAME"] == socket.gethostname()
        assert info["MY_SETTING"] == "on"
        assert "[%d]<stdout>:hello from rank %d\n" % (rank, rank) in out.getvalue()
        assert "[%d]<stderr>:a warning\n" % rank in err.getvalue()
    assert len({r["HOROVOD_RUN_SCOPE"] for r in results}) == 1
    # The job's service is gone, and so are its threads.
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(results[0]["HOROVOD_RENDEZVOUS_PORT"])), timeout=1).close()
    assert set(threading.enumerate()) <= threads_before

    plain = io.StringIO()
    assert run_local(lambda: "ok", num_proc=1, stdout=plain, prefix_output=False) == ["ok"]


@pytest.mark.timeout(30)
def test_exception_on_rank_one_stops_everyone_quickly(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(RankFailedError) as info:
        run_local(_fail_on_rank_one, args=(str(tmp_path),), num_proc=3, stderr=io.StringIO())
    assert time.monotonic() - t0 < 10
    err = info.value
    assert err.rank == 1 and isinstance(err, RuntimeError)
    assert "ValueError: rank one cannot go on" in str(err)
    assert "_fail_on_rank_one" in err.remote_traceback
    pids = _read_pids(tmp_path)
    assert len(pids) == 4  # three ranks and rank 0's child
    assert _wait_dead(pids, within=0.5) == []


@pytest.mark.timeout(30)
def test_abnormal_exit_reports_code_and_stderr_tail():
    with pytest.raises(RankFailedError) as info:
        run_local(_crash_without_traceback, num_proc=2, stderr=io.StringIO())
    assert info.value.rank == 0 and info.value.exit_code == 3
    assert "exited with code 3" in str(info.value)
    assert "about to crash hard" in str(info.value)


@pytest.mark.timeout(30)
def test_timeout_stops_ranks():
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="still running"):
        run_local(_sleep_forever, num_proc=2, timeout=1.0)
    assert time.monotonic() - t0 < 8


def _init_unless_rank_one():
    if int(os.environ["HOROVOD_RANK"]) == 1:
        return None
    from horovod_spark.common import basics
    basics.init()


def test_rank_ending_without_init_fails_the_others_fast():
    start = time.monotonic()
    with pytest.raises(RankFailedError) as info:
        run_local(_init_unless_rank_one, num_proc=2, timeout=60)
    assert time.monotonic() - start < 15
    assert "rank 1 (exit code 0) ended without calling hvd.init()" in str(info.value)


def test_run_local_rejects_bad_arguments():
    with pytest.raises(ValueError, match="num_proc"):
        run_local(_sleep_forever, num_proc=0)
    with pytest.raises(TypeError):
        run_local("not callable")


# -- the CLI -------------------------------------------------------------------------------------

def _cli(*args, **popen_kwargs):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([REPO_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return subprocess.Popen([sys.executable, "-m", "horovod_spark.launcher"] + list(args), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen_kwargs)


def _script(tmp_path, body: str) -> str:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


_FAILING_SCRIPT = """
    import os, sys, time
    rank = int(os.environ["HOROVOD_RANK"])
    open(os.path.join(sys.argv[1], "%d.pid" % rank), "w").write(str(os.getpid()))
    print("rank", rank, "of", os.environ["HOROVOD_SIZE"], "timeline", os.environ.get("HOROVOD_TIMELINE"),
          os.environ.get("EXTRA"))
    if rank == 1:
        time.sleep(0.5)
        raise RuntimeError("rank 1 gives up")
    time.sleep(60)
"""


@pytest.mark.timeout(30)
def test_cli_prefixes_output_and_stops_peers_on_failure(tmp_path):
    script = _script(tmp_path, _FAILING_SCRIPT)
    t0 = time.monotonic()
    proc = _cli("-np", "2", "--timeline-filename", "tl.json", "--env", "EXTRA=yes",
                sys.executable, script, str(tmp_path), cwd=str(tmp_path))
    out, err = proc.communicate(timeout=20)
    assert time.monotonic() - t0 < 10  # rank 0 sleeps 60 s; it was killed
    assert proc.returncode == 1
    timeline = str(tmp_path / "tl.json")
    assert "[0]<stdout>:rank 0 of 2 timeline %s yes" % timeline in out
    assert "[1]<stdout>:rank 1 of 2 timeline %s yes" % timeline in out
    assert "[1]<stderr>:RuntimeError: rank 1 gives up" in err
    assert "[1]<stderr>:Traceback (most recent call last):" in err
    assert err.rstrip().splitlines()[-1] == "horovod-spark-run: rank 1 exited with code 1"
    assert _wait_dead(_read_pids(tmp_path), within=0.5) == []


@pytest.mark.timeout(30)
def test_cli_success_and_exit_code_of_rank(tmp_path):
    proc = _cli("-np", "2", sys.executable, "-c",
                "import os,sys; print('hi', os.environ['HOROVOD_RANK']); sys.exit(0)")
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert sorted(out.splitlines()) == ["[0]<stdout>:hi 0", "[1]<stdout>:hi 1"]

    proc = _cli("-np", "2", sys.executable, "-c",
                "import os,sys,time; r=os.environ['HOROVOD_RANK']; sys.exit(7) if r == '0' else time.sleep(60)")
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == 7
    assert "horovod-spark-run: rank 0 exited with code 7" in err


@pytest.mark.timeout(30)
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129),
                                       (signal.SIGKILL, None)])
def test_cli_signal_leaves_no_ranks(tmp_path, sig, code):
    script = _script(tmp_path, """
        import os, sys, time
        open(os.path.join(sys.argv[1], os.environ["HOROVOD_RANK"] + ".pid"), "w").write(str(os.getpid()))
        time.sleep(60)
    """)
    # A test runner started in the background may hand us SIGINT ignored, and one started under
    # nohup SIGHUP ignored (the launcher rightly keeps an inherited "ignore"); both must be live here.
    def live_signals():
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)

    proc = _cli("-np", "2", sys.executable, script, str(tmp_path), preexec_fn=live_signals)
    deadline = time.monotonic() + 15
    while len(_read_pids(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    pids = _read_pids(tmp_path)
    assert len(pids) == 2
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=15)
    if code is not None:
        assert proc.returncode == code
        assert "all ranks were stopped" in err
    # With SIGKILL the launcher cannot clean up; the kernel's parent-death signal does.
    assert _wait_dead(pids, within=5) == []


@pytest.mark.parametrize("argv, message", [
    (["-np", "0", "python", "x.py"], "must be a positive integer"),
    (["-np", "two", "python", "x.py"], "must be a positive integer"),
    (["-np", "2"], "missing the command to run"),
    (["python", "x.py"], "-np N is required"),
    (["-np", "2", "--env", "NOEQUALS", "python"], "expected NAME=VALUE"),
])
def test_cli_rejects_bad_arguments(capsys, argv, message):
    with pytest.raises(SystemExit) as info:
        cli.main(argv)
    assert info.value.code == 2
    assert message in capsys.readouterr().err
