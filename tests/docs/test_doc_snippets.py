"""Every fenced block of README.md and docs/*.md runs as pasted or is marked as a fragment
(rules in support/doc_snippets.py). One test per document, so a failure names it; each runs the
document's python blocks in one fresh interpreter (cwd a temporary folder) and then its bash blocks
in the repository root, all within one time limit per document."""
import os
import signal
import subprocess
import sys
import time

import pytest
from support.doc_snippets import ROOT, documents, extract_blocks, problems, read

SECONDS_PER_DOCUMENT = 240  # a loaded 2-core VM runs the slowest document in about 60 s
RUNNER = os.path.join(ROOT, "tests", "support", "doc_snippet_runner.py")


def _environment():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYSPARK_PYTHON"] = sys.executable
    env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return env


def _run(doc, what, command, cwd, deadline):
    """Run ``command`` in its own process group (killed whole on timeout: Spark's JVM, the ranks)."""
    process = subprocess.Popen(command, cwd=cwd, env=_environment(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        started = [line for line in output.splitlines() if line.startswith("[doc snippets]")]
        pytest.fail("%s: %s ran past the document's %d s (last started: %s)\n%s"
                    % (doc, what, SECONDS_PER_DOCUMENT, started[-1] if started else "nothing", output))
    if process.returncode != 0:
        failed = [line for line in output.splitlines() if line.startswith("[doc snippets] FAILED")]
        pytest.fail("%s: %s failed with exit status %d%s\n%s"
                    % (doc, what, process.returncode, " (%s)" % failed[-1] if failed else "", output))


@pytest.mark.parametrize("doc", documents())
def test_every_block_runs_or_is_a_fragment(doc, tmp_path):
    blocks = extract_blocks(doc, read(doc))
    refused = problems(blocks)
    assert not refused, "\n".join(refused)
    deadline = time.monotonic() + SECONDS_PER_DOCUMENT
    if any(block.runs and block.language == "python" for block in blocks):
        _run(doc, "its python blocks", [sys.executable, RUNNER, doc], str(tmp_path), deadline)
    for block in blocks:
        if block.runs and block.language == "bash":
            _run(doc, "the bash block at line %d" % block.line, ["bash", "-euo", "pipefail", "-c", block.code],
                 ROOT, deadline)
