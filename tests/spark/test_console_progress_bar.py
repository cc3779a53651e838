"""Rank lines and Spark's console progress bar on one terminal: ``horovod_spark.run`` on a session
with ``spark.ui.showConsoleProgress`` on, in a pseudo-terminal, its ranks printing while the barrier
stage's bar is drawn. Rendered as a terminal shows it, every rank line stands alone, with no part of
the bar around it; written to a pipe, the lines carry no terminal control characters."""
import os
import pty
import re
import select
import subprocess
import sys

import pytest

import horovod_spark
from horovod_spark.common.console import CLEAR_LINE, line_start

pytest.importorskip("pyspark")

pytestmark = pytest.mark.timeout(240)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__)))
JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "console_bar_job.py")
RANK_LINE = re.compile(r"^\[(\d)\]<stdout>:rank (\d) line (\d+)$")


def _on_a_terminal(argv, env, timeout):
    """Everything ``argv`` wrote to its terminal (stdout and stderr both), as bytes decoded."""
    main, child_end = pty.openpty()
    proc = subprocess.Popen(argv, stdin=child_end, stdout=child_end, stderr=child_end, env=env, cwd=REPO_ROOT)
    os.close(child_end)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([main], [], [], 1.0)
            if ready:
                try:
                    data = os.read(main, 65536)
                except OSError:  # EIO: the child's end closed
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(main)
    return proc.returncode, b"".join(chunks).decode("utf-8", "replace")


def _render(raw: str):
    """The lines a terminal shows for ``raw``: carriage return, erase to the end of the line (ESC [K)
    and newline applied; any other character overwrites the one under the cursor."""
    lines, line, col = [], [], 0
    i = 0
    while i < len(raw):
        if raw.startswith("\033[K", i):
            del line[col:]
            i += 3
            continue
        ch = raw[i]
        i += 1
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append("".join(line).rstrip())
            line, col = [], 0
        else:
            if col < len(line):
                line[col] = ch
            else:
                line.append(ch)
            col += 1
    lines.append("".join(line).rstrip())
    return lines


def test_rank_lines_never_run_into_sparks_progress_bar():
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=REPO_ROOT + (os.pathsep + path if path else ""),
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, TERM="xterm")
    code, raw = _on_a_terminal([sys.executable, JOB], env, timeout=200)
    assert code == 0, raw[-5000:]
    # The bar was drawn while the ranks printed, so the check below checks something.
    assert "[Stage 0:" in raw, raw[-5000:]
    shown = _render(raw)
    rank_lines = [line for line in shown if "<stdout>:" in line]
    assert len(rank_lines) == 24, "\n".join(shown)
    for line in rank_lines:
        m = RANK_LINE.match(line)
        assert m and m.group(1) == m.group(2), "a rank line ran into something else: %r" % line
    assert "results [0, 1]" in shown


def test_lines_to_files_and_pipes_carry_no_control_characters(tmp_path):
    with open(str(tmp_path / "out.txt"), "w") as f:
        assert line_start(f) == ""
    read_end, write_end = os.pipe()
    with os.fdopen(read_end) as r, os.fdopen(write_end, "w") as w:
        assert line_start(w) == "" and line_start(r) == ""
    main, child_end = pty.openpty()
    with os.fdopen(child_end, "w") as terminal:
        assert line_start(terminal) == CLEAR_LINE
    os.close(main)


def test_a_fits_epoch_lines_to_a_terminal_wipe_the_bar_first():
    from horovod_spark.estimator.common.progress_driver import ProgressPrinter
    from horovod_spark.estimator.common.progress_rank import MARKER
    main, child_end = pty.openpty()
    with os.fdopen(child_end, "w") as terminal:
        printer = ProgressPrinter(verbose=1, out=terminal, err=terminal)
        printer.write('[0]<stdout>:%s{"event": "train_begin", "epochs": 1, "start_epoch": 0, "steps": 1, '
                      '"val_steps": 0, "run_id": "r"}\n' % MARKER)
        printer.write('[0]<stdout>:%s{"event": "epoch_end", "epoch": 0, "logs": {"loss": 0.5}, "seconds": 1.0}\n'
                      % MARKER)
        printer.close()
        shown = os.read(main, 4096).decode()
    os.close(main)
    assert shown.startswith(CLEAR_LINE + "epoch 1/1 - loss: 0.5000"), repr(shown)
