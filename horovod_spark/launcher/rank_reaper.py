"""Every process a rank starts ends with the rank, however it detached.

A process started with ``setsid``, double-forked into a daemon or started with
``Popen(start_new_session=True)`` leaves the rank's process group, and once its parent exits Linux
re-parents it to init, where nothing that walks the rank's process tree can find it. A *child
subreaper* (``PR_SET_CHILD_SUBREAPER``) gets such orphans instead, so they stay its descendants.

Two uses, so this module imports nothing but the standard library:

- Run as a script (``python -I -S rank_reaper.py PARENT CPUS GRACE CMD...``) it stands between a
  local supervisor (``run_local``, ``horovod-spark-run``, a ``run_elastic`` task) and the rank: it
  dies with PARENT (``PR_SET_PDEATHSIG``; ``-``: no parent check), binds to CPUS (``-``: none),
  becomes a subreaper, starts CMD and reaps whatever is re-parented to it. When the rank ends, or
  SIGTERM/SIGINT/SIGHUP arrives (passed on to every descendant, SIGKILL after GRACE seconds), it
  ends all its descendants and exits with the rank's status.
- Imported, its functions let a Spark task (whose rank must stay a child of the task's Python
  worker) make that worker a subreaper and find the orphans that came back to it.

Linux only; elsewhere the prctl is skipped and only descendants still attached are found.
"""
import os
import select
import signal
import sys
import time

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# How long SIGKILLed processes may take to disappear (uninterruptible sleep) before we give up.
_KILL_WAIT_S = 5.0


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """Make this process the child subreaper of its descendants; False where the OS has none."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def process_table() -> dict:
    """pid -> (parent pid, process group) of every process we can see (Linux /proc)."""
    out = {}
    if not os.path.isdir("/proc"):
        return out
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/stat" % name, "rb") as f:
                    fields = f.read().rsplit(b")", 1)[1].split()
                out[int(name)] = (int(fields[1]), int(fields[2]))
            except (OSError, IndexError, ValueError):
                continue  # exited while we looked
    return out


def descendants(root: int, table: dict) -> set:
    children = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, stack = set(), [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie has released everything; only its parent's wait is due)."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
            return True
        except OSError:
            return False


def reap(pids) -> None:
    """Collect the exit status of those of ``pids`` that are our children and have ended."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def signal_all(pids, sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end_descendants(root: int, grace: float) -> None:
    """SIGTERM every descendant of ``root`` (this process), SIGKILL what is left after ``grace`` s,
    and reap them (as a subreaper, the orphans among them are our children)."""
    for sig, wait_s in ((signal.SIGTERM, grace), (signal.SIGKILL, _KILL_WAIT_S)):
        victims = descendants(root, process_table())
        if not victims:
            return
        signal_all(victims, sig)
        deadline = time.monotonic() + wait_s
        while True:
            # A victim may fork while we wait: its children are found by the next look.
            victims = {p for p in victims | descendants(root, process_table()) if running(p)}
            if sig == signal.SIGKILL:
                signal_all(victims, sig)
            reap(descendants(root, process_table()))
            if not victims or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
    reap(descendants(root, process_table()))


def _exit_like(status: int) -> None:
    """Exit as the rank did: with its code, or killed by its signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig != signal.SIGKILL:  # whose disposition cannot be set, nor needs to be
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)  # a signal whose default is to go on (SIGCHLD, SIGWINCH)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _start_rank(cmd, me: int, wake_r: int, wake_w: int, inherited: dict) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:
        signal.set_wakeup_fd(-1)
        os.close(wake_r)
        os.close(wake_w)
        for sig, disposition in inherited.items():
            signal.signal(sig, disposition)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != me:
            os._exit(137)
        os.execvp(cmd[0], cmd)
    except OSError as e:
        sys.stderr.write("cannot execute %s: %s\n" % (cmd[0], e.strerror))
        sys.stderr.flush()
    finally:
        os._exit(127)


def main(argv) -> None:
    parent, cpus, grace, cmd = argv[0], argv[1], float(argv[2]), argv[3:]
    if parent != "-":
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != int(parent):
            os._exit(137)
    if cpus != "-":
        # Before any thread exists that would keep the old mask; the rank inherits it.
        try:
            os.sched_setaffinity(0, [int(c) for c in cpus.split(",")])
        except OSError as e:
            sys.stderr.write("cannot bind this rank to CPUs %s: %s; HOROVOD_CPU_BIND=0 leaves the ranks' placement "
                             "to the OS\n" % (cpus, e.strerror))
            sys.stderr.flush()
            os._exit(126)
    become_subreaper()
    me = os.getpid()
    # Signals only wake the loop below (through the pipe); it decides what to do.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    stop = []
    # The rank gets the dispositions we were given: a signal handed to us ignored (a launcher in
    # the background, under nohup) stays ignored, by us too.
    inherited = {sig: signal.getsignal(sig) for sig in _STOP_SIGNALS + (signal.SIGCHLD,)}
    inherited = {sig: signal.SIG_IGN if d == signal.SIG_IGN else signal.SIG_DFL for sig, d in inherited.items()}
    for sig in _STOP_SIGNALS:
        if inherited[sig] != signal.SIG_IGN:
            signal.signal(sig, lambda signum, _frame: stop.append(signum))
    signal.signal(signal.SIGCHLD, lambda *_: None)
    rank = _start_rank(cmd, me, wake_r, wake_w, inherited)
    status, kill_at = None, None
    while status is None:
        timeout = None if kill_at is None else max(0.0, kill_at - time.monotonic())
        select.select([wake_r], [], [], timeout)
        try:
            while os.read(wake_r, 512):
                pass
        except BlockingIOError:
            pass
        while True:  # reap the rank and any orphan that ended
            try:
                pid, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            if pid == rank:
                status = st
        if status is not None:
            break
        if stop and kill_at is None:
            signal_all(descendants(me, process_table()), stop[0])
            kill_at = time.monotonic() + grace
        elif kill_at is not None and time.monotonic() >= kill_at:
            signal_all(descendants(me, process_table()), signal.SIGKILL)
            kill_at = time.monotonic() + 0.1  # look again shortly: SIGKILL takes effect at once
    end_descendants(me, grace)
    _exit_like(status)


if __name__ == "__main__":
    main(sys.argv[1:])
