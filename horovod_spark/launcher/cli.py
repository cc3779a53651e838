"""``horovod-spark-run -np N [options] command ...``: run a command as N local ranks.

Each rank gets the rendezvous environment (docs/dev/contracts.md) of a fresh job, its output is
prefixed ``[<rank>]<stdout>:`` / ``[<rank>]<stderr>:``, and the first rank to fail stops the rest;
the launcher then exits non-zero after the summary line ``horovod-spark-run: rank R exited with
code C``.
"""
import argparse
import os
import signal
import sys
import threading
from typing import List, Optional, Sequence

import horovod_spark
from horovod_spark.common import config
from horovod_spark.exceptions import ConfigError
from horovod_spark.launcher.local_job import LocalJob
from horovod_spark.launcher.options import LocalRunOptions

PROG = "horovod-spark-run"


class _Terminated(Exception):
    """SIGTERM or SIGHUP reached the launcher; unwinds to the cleanup like Ctrl-C does."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _integer(text: str) -> int:
    # Only the spelling; the value is checked with the job's other options (launcher/options.py).
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a positive integer, got %r" % text) from None


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a number of seconds, got %r" % text) from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be a positive number of seconds, got %s" % text)
    return value


def _start_timeout(text: str) -> float:
    """What HOROVOD_START_TIMEOUT accepts, checked here rather than in every rank."""
    try:
        return config.START_TIMEOUT.kind.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError("%r %s; give %s" % (text, exc, config.START_TIMEOUT.kind.accepts)) from None


def _env_assignment(text: str) -> str:
    name, sep, _ = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError("expected NAME=VALUE, got %r" % text)
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        usage="%(prog)s -np N [options] command [args ...]",
        description="Run a command as N local horovod_spark ranks (e.g. '%(prog)s -np 2 python train.py').")
    parser.add_argument("-np", "--num-proc", dest="num_proc", type=_integer, metavar="N",
                        help="number of ranks to start (required)")
    parser.add_argument("--timeline-filename", metavar="FILE",
                        help="record a Horovod timeline to FILE (sets %s)" % config.TIMELINE.name)
    parser.add_argument("--timeline-mark-cycles", action="store_true",
                        help="mark engine cycles in the timeline (sets %s=1)" % config.TIMELINE_MARK_CYCLES.name)
    parser.add_argument("--start-timeout", type=_start_timeout, metavar="S",
                        help="seconds hvd.init() waits for every rank (sets %s; default %s)"
                             % (config.START_TIMEOUT.name, config.START_TIMEOUT.describe_default()))
    parser.add_argument("--stall-check-seconds", type=_positive_float, metavar="S",
                        help="warn when a collective waits on some ranks for S seconds "
                             "(sets %s)" % config.STALL_CHECK_TIME_SECONDS.name)
    parser.add_argument("--env", action="append", default=[], type=_env_assignment, metavar="NAME=VALUE",
                        help="set an environment variable for every rank (repeatable)")
    parser.add_argument("--verbose", action="store_true", help="report what the launcher does on stderr")
    parser.add_argument("--check-build", action="store_true",
                        help="print the frameworks, transports, tensor operations and GPU support this "
                             "installation has, and exit")
    parser.add_argument("--version", action="version", version="%(prog)s " + horovod_spark.__version__)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command each rank runs")
    return parser


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.check_build:
        return args
    if args.num_proc is None:
        parser.error("-np N is required (the number of ranks to start)")
    if not args.command:
        parser.error("missing the command to run, e.g. '%s -np %d python train.py'" % (PROG, args.num_proc))
    try:
        config.check_assignments(dict(a.partition("=")[::2] for a in args.env), "--env")
        args.options = LocalRunOptions.from_kwargs(PROG, num_proc=args.num_proc, env=rank_env_overrides(args))
    except (ConfigError, TypeError, ValueError) as exc:
        parser.error(str(exc))
    return args


def rank_env_overrides(args: argparse.Namespace) -> dict:
    """The variables the options set for every rank (on top of ours and before the rendezvous ones)."""
    env = {}
    if args.timeline_filename:
        env[config.TIMELINE.name] = os.path.abspath(args.timeline_filename)
    if args.timeline_mark_cycles:
        env[config.TIMELINE_MARK_CYCLES.name] = "1"
    if args.start_timeout is not None:
        env[config.START_TIMEOUT.name] = repr(args.start_timeout)
    if args.stall_check_seconds is not None:
        env[config.STALL_CHECK_TIME_SECONDS.name] = repr(args.stall_check_seconds)
    for assignment in args.env:
        name, _, value = assignment.partition("=")
        env[name] = value
    return env


def _say(text: str) -> None:
    sys.stderr.write("%s: %s\n" % (PROG, text))
    sys.stderr.flush()


def _exit_status(returncode: int) -> int:
    # A rank killed by signal N reports like a shell would (128+N); codes a shell can't show become 1.
    if returncode < 0:
        return 128 + (-returncode)
    return returncode if 0 < returncode < 256 else 1


def _install_termination_handlers() -> dict:
    """Turn SIGTERM/SIGHUP into an exception so the ranks get stopped; returns what to restore.

    Only from the main thread (Python's rule), and not where the signal was deliberately ignored
    (e.g. under nohup)."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def on_signal(signum, frame):
        signal.signal(signum, signal.SIG_IGN)  # a repeat must not cut the cleanup short
        raise _Terminated(signum)

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, on_signal)
    return previous


def run(args: argparse.Namespace) -> int:
    job = LocalJob.from_options(args.command, args.options)
    previous_handlers = _install_termination_handlers()
    try:
        try:
            job.start()
            if args.verbose:
                _say("started %d rank(s) of %r (pids %s); rendezvous on 127.0.0.1:%d, scope %s; %s"
                     % (args.num_proc, " ".join(args.command), job.supervisor.pids(), job.port, job.run_scope,
                        "CPUs by rank " + " ".join(",".join(map(str, cpus)) for cpus in job.cpus) if job.cpus
                        else "ranks not bound to CPUs"))
            failure = job.supervisor.wait()
            job.close()  # on failure: stops the others and drains the failed rank's stderr first
            if failure is None:
                if args.verbose:
                    _say("all %d rank(s) exited with code 0" % args.num_proc)
                return 0
            _say(failure.describe())
            return _exit_status(failure.returncode)
        except KeyboardInterrupt:
            job.close()
            _say("interrupted; all ranks were stopped")
            return 130
        except _Terminated as exc:
            job.close()
            _say("got %s; all ranks were stopped" % signal.Signals(exc.signum).name)
            return 128 + exc.signum
        finally:
            job.close()
    finally:
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    if args.check_build:
        from horovod_spark.launcher.check_build import report
        sys.stdout.write(report())
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
