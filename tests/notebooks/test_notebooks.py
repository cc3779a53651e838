"""The notebooks in notebooks/ run end to end in a fresh Jupyter kernel (nbclient + ipykernel),
each with the local Spark it makes when no session is active, and print what they promise.

The kernel runs this interpreter (the venv's), with its packages and the editable horovod_spark
install, as a user's notebook server would. Each kernel starts its own SparkSession in its own
process; this module starts none.
"""
import os
import re
import sys

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

import horovod_spark  # noqa: E402

pytestmark = pytest.mark.timeout(900)

NOTEBOOKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__))), "notebooks")
CELL_TIMEOUT = 600


def _run(name, tmp_path):
    nb = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
    # ipykernel's own "python3" kernelspec, which jupyter_client starts with this interpreter.
    client = nbclient.NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable))
    return nb


def _text(nb):
    """Everything the cells printed (streams and results); errors fail execute() itself."""
    out = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stdout":
                out.append(output.get("text", ""))
            elif output.get("output_type") in ("execute_result", "display_data"):
                out.append(output.get("data", {}).get("text/plain", ""))
    return "".join(out)


def test_notebooks_are_all_tested():
    assert sorted(os.listdir(NOTEBOOKS)) == ["horovod_runner.ipynb", "horovod_spark_run.ipynb",
                                             "keras_estimator.ipynb", "lightning_estimator.ipynb",
                                             "torch_estimator.ipynb"]


def test_run_notebook(tmp_path):
    text = _text(_run("horovod_spark_run.ipynb", tmp_path))
    assert "ranks agree: True" in text, text
    assert re.search(r"'rank': 0, 'loss'", text) and re.search(r"'rank': 1, 'loss'", text), text


def test_horovod_runner_notebook(tmp_path):
    text = _text(_run("horovod_runner.ipynb", tmp_path))
    assert "same result on the driver and on the cluster: True" in text, text
    # np=-2 shows every rank's lines; log_callback_only shows only log_to_driver's.
    assert "[1]<stdout>:rank 1 step 0: loss" in text, text
    assert text.count("[0]<stdout>:trained 200 steps on 2 ranks") == 2, text
    assert text.count("step 0: loss") == 2, text


@pytest.mark.parametrize("name", ["torch_estimator.ipynb", "keras_estimator.ipynb", "lightning_estimator.ipynb"])
def test_estimator_notebook(name, tmp_path):
    text = _text(_run(name, tmp_path))
    accuracy = re.search(r"test accuracy: ([0-9.]+)", text)
    assert accuracy and float(accuracy.group(1)) >= 0.9, text
    assert re.search(r"^val_accuracy\s+(\d\.\d{4} ){5}\d\.\d{4}$", text, re.M), text
