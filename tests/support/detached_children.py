"""A rank that starts long-sleeping children in every way a process can detach from it, and how a
test finds out whether any of them outlived the rank."""
import os
import subprocess
import sys
import time

SLEEP = "300"


def _sleeper(pid_file: str) -> list:
    """argv of a process that writes its pid to ``pid_file`` and sleeps."""
    return ["/bin/sh", "-c", 'echo $$ > "%s.tmp" && mv "%s.tmp" "%s" && exec sleep %s'
            % (pid_file, pid_file, pid_file, SLEEP)]


def start_detached_children(directory: str) -> list:
    """Starts, from this rank: a plain child, one with setsid, one with start_new_session=True and
    a double-fork daemon; waits until each wrote its pid; returns the pids."""
    rank = os.environ.get("HOROVOD_RANK", "0")
    files = {kind: os.path.join(directory, "%s.%s.pid" % (rank, kind))
             for kind in ("plain", "setsid", "new_session", "daemon")}
    subprocess.Popen(_sleeper(files["plain"]))
    subprocess.Popen(["setsid"] + _sleeper(files["setsid"]))
    subprocess.Popen(_sleeper(files["new_session"]), start_new_session=True)
    first = os.fork()
    if first == 0:  # the classic daemon: fork, setsid, fork again, the middle one exits
        try:
            os.setsid()
            if os.fork() == 0:
                argv = _sleeper(files["daemon"])
                os.execv(argv[0], argv)
        finally:
            os._exit(0)
    os.waitpid(first, 0)
    deadline = time.monotonic() + 20
    while not all(os.path.exists(f) for f in files.values()):
        if time.monotonic() > deadline:
            raise TimeoutError("the children did not start: %s" % sorted(files))
        time.sleep(0.02)
    return [int(open(f).read()) for f in files.values()]


CLI_SCRIPT = """
import sys
sys.path.insert(0, %r)
from support.detached_children import start_detached_children
start_detached_children(sys.argv[1])
"""


def alive(pids) -> list:
    """Those of ``pids`` still running (a zombie counts as gone: it holds nothing)."""
    out = []
    for pid in pids:
        try:
            with open("/proc/%d/stat" % pid, "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] != b"Z":
                    out.append(pid)
        except (OSError, IndexError):
            pass
    return out


def kill(pids) -> None:
    for pid in pids:
        try:
            os.kill(pid, 9)
        except OSError:
            pass


if __name__ == "__main__":
    print(start_detached_children(sys.argv[1]))
