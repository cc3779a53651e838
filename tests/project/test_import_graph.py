"""The package's import graph keeps the house rules (tests/support/import_graph.py says which):
layers point down, no module cycle, no private name used outside its module (nor a private module
outside its package), and Horovod's import paths only re-export. No exceptions are listed: a
violation fails here. The rest of the file plants each kind of violation in a small package to show
that the checker sees it."""
import os
import textwrap

from support import import_graph

import horovod_spark

PACKAGE = os.path.dirname(os.path.abspath(horovod_spark.__file__))


def test_horovod_spark_keeps_the_rules():
    problems = import_graph.check(PACKAGE).problems()
    assert not problems, "\n".join(problems)


def test_every_alias_path_exists():
    modules = import_graph.load_modules(PACKAGE)
    missing = [alias for alias in import_graph.ALIASES if alias not in modules]
    assert not missing, "ALIASES names modules that do not exist: %s" % missing


def _package(tmp_path, files):
    """A package named horovod_spark under tmp_path, with the given {relative path: source}."""
    root = tmp_path / "horovod_spark"
    for relative, source in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    for directory, _, names in os.walk(root):
        if "__init__.py" not in names:
            (tmp_path / directory / "__init__.py").write_text("")
    return str(root)


CLEAN = {
    "exceptions.py": "class HorovodError(Exception):\n    pass\n",
    "common/basics.py": "from horovod_spark.exceptions import HorovodError\n\n\ndef _state():\n    return 1\n\n\n"
                        "def size():\n    return _state()\n",
    "common/_core.py": "VALUE = 1\n",
    "common/ops.py": "from horovod_spark.common import _core, basics\n",
    "torch/mpi_ops.py": "from horovod_spark.common import basics\nfrom horovod_spark.torch import _helpers\n",
    "torch/_helpers.py": "X = 1\n",
    "spark/driver.py": "from horovod_spark.launcher import local_job\n",
    "launcher/local_job.py": "from horovod_spark.common.basics import size\n",
    "runner/__init__.py": '"""Another name."""\nfrom horovod_spark.launcher.local_job import size\n\n'
                          '__all__ = ["size"]\n',
}


def test_a_clean_package_passes(tmp_path):
    assert import_graph.check(_package(tmp_path, CLEAN)).problems() == []


def test_an_import_up_the_layers_is_found(tmp_path):
    files = dict(CLEAN, **{"common/ops.py": "from horovod_spark.common import _core\n"
                                            "from horovod_spark.spark import driver\n"})
    report = import_graph.check(_package(tmp_path, files))
    assert report.layer_violations == [("horovod_spark.common.ops", "horovod_spark.spark.driver")]


def test_a_lazy_import_counts_too(tmp_path):
    files = dict(CLEAN, **{"launcher/local_job.py": "def run():\n    from horovod_spark.torch import mpi_ops\n"})
    report = import_graph.check(_package(tmp_path, files))
    assert report.layer_violations == [("horovod_spark.launcher.local_job", "horovod_spark.torch.mpi_ops")]


def test_a_cycle_is_found(tmp_path):
    files = dict(CLEAN, **{"common/_core.py": "from horovod_spark.common import ops\n"})
    report = import_graph.check(_package(tmp_path, files))
    assert report.cycles == [["horovod_spark.common._core", "horovod_spark.common.ops"]]


def test_a_private_name_of_another_module_is_found(tmp_path):
    files = dict(CLEAN, **{"common/ops.py": "from horovod_spark.common.basics import _state\n"})
    report = import_graph.check(_package(tmp_path, files))
    assert report.private_crossings == [("horovod_spark.common.ops", "horovod_spark.common.basics", "_state")]


def test_a_private_attribute_of_an_imported_module_is_found(tmp_path):
    files = dict(CLEAN, **{"common/ops.py": "from horovod_spark.common import basics\nbasics._state()\n"})
    report = import_graph.check(_package(tmp_path, files))
    assert report.private_crossings == [("horovod_spark.common.ops", "horovod_spark.common.basics", "_state")]


def test_a_private_module_outside_its_package_is_found(tmp_path):
    files = dict(CLEAN, **{"torch/mpi_ops.py": "from horovod_spark.common import _core\n",
                           "launcher/local_job.py": "from horovod_spark.torch._helpers import X\n"})
    report = import_graph.check(_package(tmp_path, files))
    assert set(report.private_crossings) == {
        ("horovod_spark.torch.mpi_ops", "horovod_spark.common", "_core"),
        ("horovod_spark.launcher.local_job", "horovod_spark.torch._helpers", "X")}


def test_an_alias_with_code_of_its_own_is_found(tmp_path):
    files = dict(CLEAN, **{"runner/__init__.py": "from horovod_spark.launcher.local_job import size\n\n\n"
                                                 "def twice():\n    return 2 * size()\n"})
    report = import_graph.check(_package(tmp_path, files))
    assert report.impure_aliases == [("horovod_spark.runner", 4, "FunctionDef")]


def test_a_part_in_no_layer_is_found(tmp_path):
    files = dict(CLEAN, **{"plugins/extra.py": "X = 1\n"})
    assert import_graph.check(_package(tmp_path, files)).unknown_parts == ["plugins"]
