"""Starts, watches and kills the local processes of a job; shared by ``run_local`` and the CLI.

Each rank runs in its own session (so its process group holds the rank and everything it forks),
with stdout/stderr piped into one pump thread that writes them to ours, line by line, prefixed
``[<rank>]<stdout>:`` / ``[<rank>]<stderr>:``; a line longer than ``line_limit`` bytes goes out in
pieces, each but the last marked as continuing (``common/line_sink.py``). The supervisor reports the first rank to fail;
``stop()`` then ends every group (SIGTERM, then SIGKILL after a grace period) and drains output.

Ranks are started through ``rank_reaper.py``, which Linux SIGKILLs if the supervising thread dies
(``PR_SET_PDEATHSIG``, passed on to the rank), so even a SIGKILLed launcher leaves no ranks behind;
as a child subreaper it also ends whatever the rank started, detached or not, when the rank ends.
"""
import collections
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, List, Mapping, Optional, Sequence, TextIO, Tuple

from horovod_spark.common.line_sink import MAX_LINE_BYTES, LineAssembler, marked

OUTPUT_PREFIX = "[{rank}]<{stream}>:"

# Each rank runs under rank_reaper.py, with -I -S (no site, ~10 ms): it dies with the supervising
# thread, binds the rank to its CPUs, and ends every process the rank started, however detached,
# when the rank ends. The reaper ends them within half the kill grace, before ours runs out.
_RANK_REAPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank_reaper.py")

_PIPE_CHUNK = 64 * 1024
_TAIL_LINE_CHARS = 64 * 1024


def output_prefix(rank: int, stream: str) -> str:
    """The prefix put before every line a rank writes to ``stream`` ('stdout' or 'stderr')."""
    return OUTPUT_PREFIX.format(rank=rank, stream=stream)


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "signal %d" % -returncode
        return "exited with code %d (killed by %s)" % (returncode, name)
    return "exited with code %d" % returncode


class RankExit:
    """How one rank ended."""

    def __init__(self, rank: int, returncode: int):
        self.rank = rank
        self.returncode = returncode

    def __repr__(self):
        return "RankExit(rank=%d, returncode=%d)" % (self.rank, self.returncode)

    def describe(self) -> str:
        return "rank %d %s" % (self.rank, describe_exit(self.returncode))


class _OutputPump(threading.Thread):
    """One thread multiplexing every rank's pipes, so nothing blocks on a full pipe and the whole
    lot can be stopped at once."""

    def __init__(self, prefix_output: bool, tail_lines: int, line_limit: int):
        super().__init__(name="rank-output-pump", daemon=True)
        self._prefix_output = prefix_output
        self._line_limit = line_limit
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._partial: Dict[int, LineAssembler] = {}
        self._write_lock = threading.Lock()
        self._deadline: Optional[float] = None
        self._open = 0
        # Guards closing the wake pipe: once closed its fd number may be reused by an unrelated file,
        # so stop() must never write to it after that.
        self._close_lock = threading.Lock()
        self._closed = False
        self.tails: Dict[int, collections.deque] = collections.defaultdict(
            lambda: collections.deque(maxlen=tail_lines))

    def add(self, fd: int, rank: int, stream: str, sink: TextIO) -> None:
        """Register a pipe; only before ``start()`` (selectors are not thread-safe)."""
        os.set_blocking(fd, False)
        self._sel.register(fd, selectors.EVENT_READ, (rank, stream, sink))
        self._partial[fd] = LineAssembler(self._line_limit)
        self._open += 1

    def run(self) -> None:
        try:
            while self._open:
                timeout = None
                if self._deadline is not None:
                    timeout = self._deadline - time.monotonic()
                    if timeout <= 0:
                        break
                for key, _ in self._sel.select(timeout):
                    if key.data is None:
                        os.read(self._wake_r, 64)
                    else:
                        self._read(key.fd, *key.data)
        finally:
            for key in list(self._sel.get_map().values()):
                if key.data is not None:
                    self._flush_partial(key.fd, *key.data)
            self._close_all()

    def _close_all(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
            for key in list(self._sel.get_map().values()):
                os.close(key.fd)
            self._sel.close()
            os.close(self._wake_w)

    def _read(self, fd: int, rank: int, stream: str, sink: TextIO) -> None:
        try:
            data = os.read(fd, _PIPE_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._flush_partial(fd, rank, stream, sink)
            self._sel.unregister(fd)
            os.close(fd)
            self._open -= 1
            return
        self._emit(self._partial[fd].feed(data), rank, stream, sink)

    def _flush_partial(self, fd: int, rank: int, stream: str, sink: TextIO) -> None:
        lines = self._partial.pop(fd, None)
        rest = lines.rest() if lines is not None else b""
        if rest:
            self._emit([(rest, True)], rank, stream, sink)

    def _emit(self, lines: List[Tuple[bytes, bool]], rank: int, stream: str, sink: TextIO) -> None:
        if not lines:
            return
        texts = [marked(line.decode("utf-8", "replace"), complete) for line, complete in lines]
        if stream == "stderr":
            # The tail feeds failure messages: the first 64 KiB of a line say enough there.
            self.tails[rank].extend(t if len(t) <= _TAIL_LINE_CHARS else t[:_TAIL_LINE_CHARS] + " [...]" for t in texts)
        prefix = output_prefix(rank, stream) if self._prefix_output else ""
        with self._write_lock:
            try:
                sink.write("".join(prefix + t + "\n" for t in texts))
                sink.flush()
            except Exception:
                pass  # our own stdout is gone or broken; keep draining so ranks never block on a full pipe

    def stop(self, drain_timeout: float) -> None:
        """Read until every pipe hit EOF or ``drain_timeout`` passed, then close them all."""
        if self.ident is None:  # never started (a spawn failed): just release the fds
            self._close_all()
            return
        self._deadline = time.monotonic() + drain_timeout
        with self._close_lock:
            if not self._closed:
                os.write(self._wake_w, b"x")
        self.join(drain_timeout + 5.0)


class RankSupervisor:
    """Runs ``argvs[r]`` with ``envs[r]`` for every rank r.

    ``stdout``/``stderr`` are text streams (default: ``sys.stdout``/``sys.stderr`` at ``start()``).
    ``kill_grace`` is how long a rank may take to exit after SIGTERM before it gets SIGKILL.
    ``line_limit``: the longest line, in bytes, written whole; a longer one goes out in marked pieces.
    """

    def __init__(self, argvs: Sequence[Sequence[str]], envs: Sequence[Mapping[str, str]], *,
                 cwd: Optional[str] = None, stdout: Optional[TextIO] = None, stderr: Optional[TextIO] = None,
                 prefix_output: bool = True, tail_lines: int = 100, kill_grace: float = 2.0,
                 on_exit: Optional[Callable[[int, int], None]] = None, first_label: int = 0,
                 cpus: Optional[Sequence[Sequence[int]]] = None, line_limit: int = MAX_LINE_BYTES):
        if len(argvs) != len(envs):
            raise ValueError("one argv and one environment per rank (got %d and %d)" % (len(argvs), len(envs)))
        if cpus is not None and len(cpus) != len(argvs):
            raise ValueError("one CPU set per rank (got %d for %d ranks)" % (len(cpus), len(argvs)))
        if not argvs:
            raise ValueError("no ranks to run")
        self._argvs = [list(a) for a in argvs]
        self._envs = [dict(e) for e in envs]
        self._cwd = cwd
        self._stdout = stdout
        self._stderr = stderr
        self._kill_grace = kill_grace
        self._on_exit = on_exit  # (rank, returncode), once per rank as it is reaped
        self._first_label = first_label  # output of rank r is prefixed [r + first_label]
        # Rank r's process (and so whatever it starts) runs only on cpus[r] (None: anywhere).
        self._cpus = [",".join(str(c) for c in rank_cpus) for rank_cpus in cpus] if cpus else None
        self._procs: List[subprocess.Popen] = []
        self._returncodes: Dict[int, int] = {}
        self._pump = _OutputPump(prefix_output, tail_lines, line_limit)
        self._started = False
        self._stopped = False

    @property
    def num_ranks(self) -> int:
        return len(self._argvs)

    @property
    def returncodes(self) -> Dict[int, int]:
        """Exit codes of the ranks reaped so far, by rank."""
        return dict(self._returncodes)

    def running_ranks(self) -> List[int]:
        return [r for r in range(len(self._procs)) if r not in self._returncodes]

    def stderr_tail(self, rank: int) -> str:
        """The last lines rank ``rank`` wrote to stderr (complete only after ``stop()``)."""
        return "\n".join(self._pump.tails.get(rank + self._first_label, ()))

    def pids(self) -> List[int]:
        return [p.pid for p in self._procs]

    # -- starting -------------------------------------------------------------------------------
    def start(self) -> None:
        if self._started:
            raise RuntimeError("RankSupervisor.start() called twice")
        self._started = True
        out = self._stdout if self._stdout is not None else sys.stdout
        err = self._stderr if self._stderr is not None else sys.stderr
        try:
            for rank, (argv, env) in enumerate(zip(self._argvs, self._envs)):
                proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", _RANK_REAPER, str(os.getpid()),
                     self._cpus[rank] if self._cpus else "-", repr(self._kill_grace / 2)] + argv,
                    env=env, cwd=self._cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
                self._procs.append(proc)
                # The pump reads its own duplicates; closing Popen's copies means nothing else can
                # consume the rank's output.
                label = rank + self._first_label
                self._pump.add(os.dup(proc.stdout.fileno()), label, "stdout", out)
                self._pump.add(os.dup(proc.stderr.fileno()), label, "stderr", err)
                proc.stdout.close()
                proc.stderr.close()
        except BaseException:
            self.stop()
            raise
        self._pump.start()

    # -- watching -------------------------------------------------------------------------------
    def _reap_if_exited(self, rank: int) -> bool:
        proc = self._procs[rank]
        try:
            # WNOWAIT leaves the rank a zombie, so its pid (= its process group id) cannot be reused
            # while we kill whatever it left behind in its group.
            info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            info = True  # already reaped by someone else; Popen.wait below returns its code
        if info is None:
            return False
        self._killpg(proc.pid, signal.SIGKILL)
        self._returncodes[rank] = proc.wait()
        if self._on_exit is not None:
            self._on_exit(rank, self._returncodes[rank])
        return True

    @staticmethod
    def _killpg(pgid: int, sig: int) -> None:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def poll(self) -> Optional[RankExit]:
        """Reap ranks that ended; return the first failure among them (lowest rank on a tie)."""
        failure = None
        for rank in self.running_ranks():
            if self._reap_if_exited(rank) and self._returncodes[rank] != 0 and failure is None:
                failure = RankExit(rank, self._returncodes[rank])
        return failure

    def wait(self, timeout: Optional[float] = None, until: Optional[Callable[[], bool]] = None,
             poll_interval: float = 0.02) -> Optional[RankExit]:
        """Wait for every rank to end; return the first failed rank as soon as one fails.

        Returns None when all ranks exited 0, or early when ``until()`` is true. Raises
        ``TimeoutError`` naming the running ranks after ``timeout`` s (None: no limit).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            failure = self.poll()
            if failure is not None:
                return failure
            running = self.running_ranks()
            if not running or (until is not None and until()):
                return None
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("rank(s) %s still running after %.1f s"
                                   % (", ".join(map(str, running)), timeout))
            time.sleep(poll_interval)

    # -- stopping -------------------------------------------------------------------------------
    def stop(self, drain_timeout: float = 2.0) -> None:
        """End every rank's process group (SIGTERM, SIGKILL after ``kill_grace``), reap them all and
        stop the output pump. Safe to call more than once and from ``finally``."""
        if self._stopped:
            return
        try:
            running = self.running_ranks()
            for rank in running:
                self._killpg(self._procs[rank].pid, signal.SIGTERM)
            deadline = time.monotonic() + self._kill_grace
            while self.running_ranks() and time.monotonic() < deadline:
                self.poll()
                time.sleep(0.01)
            for rank in self.running_ranks():
                self._killpg(self._procs[rank].pid, signal.SIGKILL)
            deadline = time.monotonic() + 10.0
            while self.running_ranks() and time.monotonic() < deadline:
                self.poll()
                time.sleep(0.01)
            if self.running_ranks():
                raise RuntimeError("rank(s) %s survived SIGKILL for 10 s (uninterruptible sleep?)"
                                   % ", ".join(map(str, self.running_ranks())))
        finally:
            self._pump.stop(drain_timeout)
        self._stopped = True  # only once everything is down, so an interrupted stop() can be retried

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
