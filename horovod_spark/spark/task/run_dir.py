"""The private directory a Spark task gives its rank process: the pickled function goes in, the
pickled result or error comes out.

The directory is 0700 and every file in it 0600: the function's pickle may carry credentials the
user's closure captured. The task removes it in its ``finally``; a task whose Python worker is
killed (Spark cancels a job by killing its workers) never gets there, so the directory's name
carries the task's process id and the next task on the host removes every such directory whose
process is gone.
"""
import os
import re
import shutil
import stat
import tempfile

_PREFIX = "horovod_spark-"
_NAME = re.compile(r"^horovod_spark-[0-9a-f]{1,8}-\d+-p(?P<pid>\d+)-")
FILE_MODE = 0o600


def create(job_id: str, partition: int) -> str:
    sweep_stale()
    # mkdtemp makes the directory 0700 whatever the umask.
    return tempfile.mkdtemp(prefix="%s%s-%d-p%d-" % (_PREFIX, job_id[:8], partition, os.getpid()))


def write_private(path: str, data: bytes) -> None:
    """Write ``data`` to a new file readable by its owner only (an existing file is replaced)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def remove(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: not ours to judge
    return True


def sweep_stale(parent: str = None) -> int:
    """Remove this user's run directories whose task process no longer exists; returns how many."""
    parent = parent or tempfile.gettempdir()
    removed = 0
    try:
        names = os.listdir(parent)
    except OSError:
        return 0
    uid = os.getuid()
    for name in names:
        match = _NAME.match(name)
        if match is None:
            continue
        path = os.path.join(parent, name)
        try:
            info = os.lstat(path)
            if info.st_uid != uid or not stat.S_ISDIR(info.st_mode):
                continue
        except OSError:
            continue
        if not _alive(int(match.group("pid"))):
            remove(path)
            removed += 1
    return removed
