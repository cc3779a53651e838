"""Lightning is optional: horovod_spark and horovod_spark.lightning import without it, and using
the strategy without it raises ImportError naming the extra to install."""
import os
import subprocess
import sys

import pytest

import horovod_spark
from horovod_spark.lightning import INSTALL_HINT

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(horovod_spark.__file__)))

# Makes `import lightning` fail in the child, as where it is not installed.
_WITHOUT_LIGHTNING = "import sys; sys.modules['lightning'] = None; sys.modules['lightning.pytorch'] = None\n"


def _python(code):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


def test_importing_the_package_does_not_import_lightning():
    proc = _python("import sys, horovod_spark, horovod_spark.lightning, horovod_spark.torch\n"
                   "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'pytorch_lightning')))")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.mark.parametrize("use", [
    "from horovod_spark.lightning import HorovodStrategy",
    "import horovod_spark.lightning as hl; hl.HorovodEnvironment",
    "import horovod_spark.lightning.strategy",
])
def test_using_the_strategy_without_lightning_names_the_extra(use):
    proc = _python(_WITHOUT_LIGHTNING + "import horovod_spark, horovod_spark.lightning\n"
                   "try:\n    " + use + "\nexcept ImportError as exc:\n    print('ImportError:', exc)\n")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("ImportError: horovod_spark.lightning")
    assert INSTALL_HINT in proc.stdout
    assert INSTALL_HINT == "pip install 'horovod_spark[lightning]'"


def test_unknown_names_are_attribute_errors():
    import horovod_spark.lightning as hl
    with pytest.raises(AttributeError):
        hl.NoSuchStrategy  # noqa: B018
