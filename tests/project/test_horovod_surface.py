"""Horovod 0.28.1's public names (tests/support/horovod_surface.json, derived from its source) against
horovod_spark's modules: each is offered under Horovod's path with Horovod's parameter names, or its gap
has a reason, and docs/migrating.md shows exactly those gaps."""
import importlib.util
import os
import subprocess

import pytest
from support import REPO_ROOT, horovod_surface

pytest.importorskip("pyspark")
pytest.importorskip("torch")
pytest.importorskip("tensorflow")

_spec = importlib.util.spec_from_file_location("horovod_surface_script",
                                               os.path.join(REPO_ROOT, "scripts", "horovod_surface.py"))
derive_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(derive_script)


def test_every_horovod_name_is_offered_or_its_gap_has_a_reason():
    assert horovod_surface.problems() == []


def test_the_check_notices_an_unexplained_gap_and_a_stale_reason(monkeypatch):
    missing = dict(horovod_surface.MISSING)
    missing.pop(("horovod.tensorflow", "LocalGradientAggregationHelper"))
    missing[("horovod.torch", "allreduce")] = "pretend it is missing"
    missing.pop(("horovod.spark.common.store", "HDFSStore.read_serialized_keras_model"))
    missing[("horovod.spark.common.store", "LocalStore.sync_fn")] = "pretend it is missing"
    missing[("horovod.spark.common.store", "LocalStore.no_such_method")] = "pretend Horovod has it"
    monkeypatch.setattr(horovod_surface, "MISSING", missing)
    gaps = {key: dict(value) for key, value in horovod_surface.SIGNATURE_GAPS.items()}
    gaps[("horovod.spark.keras", "KerasModel")]["model"] = "pretend it is not taken"
    monkeypatch.setattr(horovod_surface, "SIGNATURE_GAPS", gaps)
    problems = horovod_surface.problems()
    assert ("horovod.tensorflow.LocalGradientAggregationHelper: missing from horovod_spark.tensorflow, and MISSING "
            "gives no reason" in problems)
    assert "horovod.torch.allreduce: horovod_spark.torch offers it now; remove it from MISSING" in problems
    assert "horovod.spark.keras.KerasModel: model is no longer a gap; remove it from SIGNATURE_GAPS" in problems
    # Methods of public classes are compared the same way.
    assert ("horovod.spark.common.store.HDFSStore.read_serialized_keras_model: missing from "
            "horovod_spark.spark.common.store.HDFSStore, and MISSING gives no reason" in problems)
    assert ("horovod.spark.common.store.LocalStore.sync_fn: horovod_spark.spark.common.store.LocalStore offers it "
            "now; remove it from MISSING" in problems)
    assert "MISSING lists horovod.spark.common.store.LocalStore.no_such_method, which Horovod does not have" in problems


def test_a_method_that_takes_other_parameters_than_horovods_is_noticed(monkeypatch):
    from horovod_spark.store import Store

    def get_checkpoints(self, run, suffix=".ckpt"):
        return []

    monkeypatch.setattr(Store, "get_checkpoints", get_checkpoints)
    problems = horovod_surface.problems()
    assert ("horovod.spark.common.store.Store.get_checkpoints: horovod_spark.spark.common.store takes no run_id, "
            "and SIGNATURE_GAPS gives no reason" in problems), problems


def test_migrating_md_lists_exactly_the_gaps():
    with open(horovod_surface.DOC_PATH) as f:
        doc = f.read()
    assert horovod_surface.render() in doc, "regenerate it: python scripts/horovod_surface.py doc"


def test_horovods_paths_name_our_objects():
    import horovod_spark.estimator as estimator
    import horovod_spark.keras as keras_api
    import horovod_spark.store as store
    from horovod_spark.spark import keras as spark_keras
    from horovod_spark.spark import torch as spark_torch
    from horovod_spark.spark.common import store as common_store
    from horovod_spark.tensorflow import keras as tf_keras
    from horovod_spark.tensorflow.keras import callbacks as tf_keras_callbacks
    assert spark_keras.KerasEstimator is estimator.KerasEstimator and spark_keras.KerasModel is estimator.KerasModel
    assert spark_torch.TorchEstimator is estimator.TorchEstimator and spark_torch.TorchModel is estimator.TorchModel
    assert common_store.Store is store.Store and common_store.FilesystemStore is store.FsspecStore
    assert all(getattr(tf_keras, name) is getattr(keras_api, name) for name in keras_api.__all__ if name != "callbacks")
    assert tf_keras.callbacks is tf_keras_callbacks
    assert all(getattr(tf_keras_callbacks, name) is getattr(keras_api.callbacks, name)
               for name in keras_api.callbacks.__all__)


def test_small_tensorflow_helpers_under_horovods_names():
    import tensorflow as tf

    import horovod_spark.tensorflow as hvd
    assert [hvd.check_num_rank_power_of_2(n) for n in (0, 1, 2, 3, 4, 6, 8)] == [False, True, True, False, True,
                                                                                 False, True]
    assert hvd.handle_average_backwards_compatibility(None, None) == hvd.Average
    assert hvd.handle_average_backwards_compatibility(hvd.Sum, None) == hvd.Sum
    with pytest.warns(DeprecationWarning):
        assert hvd.handle_average_backwards_compatibility(None, False) == hvd.Sum
    with pytest.raises(ValueError, match="supersedes average"):
        hvd.handle_average_backwards_compatibility(hvd.Sum, True)
    variables = [tf.Variable(1.0), tf.Variable(2.0)]
    refs = hvd.vars_to_refs(variables)
    assert len({r for r in refs}) == 2 and hvd.refs_to_vars(refs) == variables


def test_estimator_helpers_under_horovods_names():
    import keras

    from horovod_spark.estimator import KerasEstimator, KerasModel, TorchEstimator, TorchModel
    from horovod_spark.spark.common.backend import default_num_proc
    assert TorchEstimator().get_model_class() is TorchModel and KerasEstimator().get_model_class() is KerasModel
    model = keras.Sequential([keras.Input((3, 4)), keras.layers.Dense(2)])
    assert KerasEstimator(model=model).get_model_shapes() == ([[-1, 3, 4]], [[-1, 3, 2]])
    with pytest.raises(ValueError, match="needs the model Param"):
        KerasEstimator().get_model_shapes()
    assert callable(default_num_proc)


def _git_repo(tmp_path, files):
    repo = str(tmp_path / "horovod")
    os.makedirs(repo)
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(repo, path)), exist_ok=True)
        with open(os.path.join(repo, path), "w") as f:
            f.write(text)
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    for argv in (["init", "-q"], ["add", "."], ["commit", "-qm", "x"], ["tag", "v9.9.9"]):
        subprocess.run(["git", "-C", repo] + argv, check=True, env=env, capture_output=True)
    return repo


def test_derivation_rules_on_a_small_source_tree(tmp_path):
    repo = _git_repo(tmp_path, {
        "horovod/__init__.py": "",
        "horovod/common/util.py": "def check_extension(): pass\n",
        "horovod/torch/__init__.py": (
            "import os\n"
            "from horovod.common.util import check_extension\n"
            "try:\n    from horovod.torch.mpi_ops import allreduce, size\nexcept ImportError:\n    pass\n"
            "if True:\n    from horovod.torch import elastic\n"
            "def _private(): pass\n"
            "class Thing:\n    @keyword_only\n    def __init__(self, a=1, *, b=2, **rest): pass\n"
            "class Base:\n    def read(self, path): pass\n    def _hidden(self): pass\n"
            "class Child(Base):\n    @staticmethod\n    def norm(path): pass\n"
            "    @classmethod\n    def matches(cls, path, *, strict=False): pass\n"
            "    @property\n    def fs(self): pass\n"),
        "horovod/torch/mpi_ops.py": ("import horovod.common.basics as _b\n"
                                     "def allreduce(tensor, average=None, *, name=None): pass\nsize = _b.size\n"),
        "horovod/torch/elastic/__init__.py": "",
    })
    source = derive_script.Source(repo, "v9.9.9")
    names = derive_script.public_names(source, "horovod.torch")
    assert derive_script.class_methods(source, "horovod.torch", "Child") == {
        "read": {"kind": "method", "params": ["path"], "positional": ["path"]},
        "norm": {"kind": "method", "params": ["path"], "positional": ["path"]},
        "matches": {"kind": "method", "params": ["path", "strict"], "positional": ["path"]},
        "fs": {"kind": "property", "params": None, "positional": None},
    }
    assert names == {
        "Base": {"kind": "class", "params": [], "positional": []},
        "Child": {"kind": "class", "params": [], "positional": []},
        "Thing": {"kind": "class", "params": ["a", "b", "**rest"], "positional": []},
        "allreduce": {"kind": "function", "params": ["tensor", "average", "name"], "positional": ["tensor", "average"]},
        "elastic": {"kind": "module", "params": None, "positional": None},
        "size": {"kind": "value", "params": None, "positional": None},
    }
