"""HorovodStrategy in a script started by the command-line launcher (horovod-spark-run -np 2)."""
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("lightning.pytorch", reason="Lightning is not installed (pip install 'horovod_spark[lightning]')")

import torch  # noqa: E402
from support import TESTS_DIR  # noqa: E402
from support import lightning_training as lt  # noqa: E402

import horovod_spark  # noqa: E402

pytestmark = pytest.mark.timeout(240)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__)))

SCRIPT = """
    import os, sys
    import torch
    sys.path.insert(0, {tests!r})
    from support import lightning_training as lt

    result = lt.train()
    torch.save({{"weights": result["weights"], "global_step": result["global_step"]}},
               os.path.join(sys.argv[1], "rank%d.pt" % lt.rank()))
"""


def test_strategy_in_a_script_under_the_launcher(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT.format(tests=TESTS_DIR)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    proc = subprocess.run([sys.executable, "-m", "horovod_spark.launcher", "-np", "2", sys.executable, str(script),
                           str(tmp_path)], env=env, capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    results = [torch.load(tmp_path / ("rank%d.pt" % r)) for r in range(2)]
    lt.check_trained_like_one_process(results)
