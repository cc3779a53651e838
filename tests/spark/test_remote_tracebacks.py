"""A rank's traceback reaches the driver with the user's file name, line numbers and source lines
for functions that travel by value (cloudpickle >= 3.1 names their code "<dynamic-code>"), defined in
a test module, a ``__main__`` script or a notebook cell, through both launchers: horovod_spark.run
on Spark and run_local."""
import io
import json
import os
import re
import subprocess
import sys
import textwrap

import cloudpickle
import pytest

import horovod_spark
from horovod_spark.exceptions import RankFailedError
from horovod_spark.launcher import run_local

pytestmark = pytest.mark.timeout(240)

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__)))

# The user's code, as a script or a notebook cell has it; check() fails on every rank.
USER_CODE = textwrap.dedent('''\
    def check(value):
        if value >= 0:
            raise ValueError("boom")
        return value


    def train(value):
        return [check(v) for v in (value,)]
    ''')

# The driver's side: runs train on both launchers and prints what the driver got back.
DRIVER_CODE = textwrap.dedent('''\
    import io
    import json
    import os
    import sys

    from pyspark.sql import SparkSession

    import horovod_spark
    from horovod_spark.launcher import run_local

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").appName("remote_tracebacks")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("FATAL")


    def remote_traceback(launch, **kwargs):
        try:
            launch(train, args=(1,), num_proc=2, stderr=io.StringIO(), **kwargs)
        except Exception as exc:  # RankFailedError of either launcher
            return exc.remote_traceback
        return "no failure"


    report = {"file": check.__code__.co_filename, "line": check.__code__.co_firstlineno + 2,
              "spark": remote_traceback(horovod_spark.run, verbose=0),
              "local": remote_traceback(run_local, timeout=60)}
    spark.stop()
    print("REPORT " + json.dumps(report))
    ''')

RAISE_LINE = 'raise ValueError("boom")'


def _report(text: str) -> dict:
    for line in text.splitlines():
        if line.startswith("REPORT "):
            return json.loads(line[len("REPORT "):])
    raise AssertionError("no report in the output:\n" + text)


def _check_report(report: dict) -> None:
    frame = 'File "%s", line %d, in check' % (report["file"], report["line"])
    for launcher in ("spark", "local"):
        remote = report[launcher]
        assert frame in remote and RAISE_LINE in remote, "%s:\n%s" % (launcher, remote)
        assert "in train" in remote and "return [check(v) for v in (value,)]" in remote, remote
        # Starting at fn: every frame is the user's (none of the launcher's, none "<dynamic-code>").
        assert set(re.findall(r'File "([^"]+)"', remote)) == {report["file"]}, remote


def _env() -> dict:
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
                PYTHONPATH=REPO_ROOT + (os.pathsep + path if path else ""))


def test_function_of_a_main_script(tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text(USER_CODE + "\n\n" + DRIVER_CODE)
    done = subprocess.run([sys.executable, str(script)], cwd=str(tmp_path), env=_env(),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    report = _report(done.stdout)
    assert report["file"] == str(script)
    _check_report(report)


def test_function_of_a_notebook_cell(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(USER_CODE),
                                         nbformat.v4.new_code_cell(DRIVER_CODE)])
    client = nbclient.NotebookClient(nb, timeout=180, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=_env())
    out = "".join(o.get("text", "") for o in nb.cells[1].outputs if o.get("output_type") == "stream")
    report = _report(out)
    # IPython names a cell's code after a file that exists only in the kernel's linecache.
    assert report["file"] != "<dynamic-code>" and not os.path.exists(report["file"]), report["file"]
    _check_report(report)


# -- a function of this test module, sent by value, through run_local --------------------------
# (test_spark_run.py checks the same through horovod_spark.run.)

def _fail_here():
    raise ValueError("boom")


def test_function_of_a_test_module_through_run_local():
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        with pytest.raises(RankFailedError) as info:
            run_local(_fail_here, num_proc=2, stderr=io.StringIO(), timeout=60)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    code = _fail_here.__code__
    remote = info.value.remote_traceback
    assert 'File "%s", line %d, in _fail_here' % (code.co_filename, code.co_firstlineno + 1) in remote, remote
    assert RAISE_LINE in remote, remote
