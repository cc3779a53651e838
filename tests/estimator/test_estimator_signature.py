"""The estimators' and models' keywords come from their Params' declarations: every estimator takes
the shared ones with the same defaults, refuses unknown keywords, shows its keywords to
inspect.signature, and a new framework's estimator gets all of it by declaring its own Params."""
import inspect

import pytest

pytest.importorskip("pyspark")

from horovod_spark.estimator import KerasEstimator, KerasModel, TorchEstimator, TorchModel  # noqa: E402
from horovod_spark.estimator.common.declared_params import KeywordParams, declare_param  # noqa: E402
from horovod_spark.estimator.common.estimator import HorovodEstimator  # noqa: E402
from horovod_spark.estimator.common.params import EstimatorParams, ModelParams  # noqa: E402

SHARED = list(EstimatorParams.declared_params)


class ThirdEstimator(HorovodEstimator):
    """An estimator of another framework: two Params of its own, nothing else."""
    framework = "third"
    trainer_args = declare_param("trainer_args", "arguments of the framework's trainer", default={})
    precision = declare_param("precision", "bits per float", lambda v: int(v), default=32)


def _keywords(fn):
    params = list(inspect.signature(fn).parameters.values())
    assert all(p.kind is p.KEYWORD_ONLY for p in params if p.name != "self"), fn
    return {p.name: p.default for p in params if p.name != "self"}


def test_shared_params_are_a_horovod_estimators_keywords():
    assert len(SHARED) > 40 and {"num_proc", "feature_cols", "store", "elastic", "backend"} <= set(SHARED)
    assert set(ModelParams.declared_params) & set(SHARED) >= {"feature_cols", "label_cols", "input_shapes", "run_id"}


@pytest.mark.parametrize("cls", [TorchEstimator, KerasEstimator, ThirdEstimator])
def test_every_shared_keyword_is_taken_with_the_same_default(cls):
    keywords = _keywords(cls)
    assert list(keywords)[:len(SHARED)] == SHARED
    est = cls()
    for name in SHARED:
        assert keywords[name] == EstimatorParams.declared_params[name].default, name
        assert est.getOrDefault(name) == keywords[name], name
        assert _keywords(cls.setParams)[name] is None, name  # None leaves a Param as it is
    # and each keyword sets its Param, through the Param's converter
    est = cls(num_proc=3, batch_size=7, feature_cols="x", metrics=("mse",), elastic=True)
    assert (est.getNumProc(), est.getBatchSize(), est.getFeatureCols(), est.getMetrics(), est.getElastic()) == \
        (3, 7, ["x"], ["mse"], True)


def test_both_estimators_share_the_defaults_and_add_only_their_own():
    torch_kw, keras_kw = _keywords(TorchEstimator), _keywords(KerasEstimator)
    assert {k: torch_kw[k] for k in SHARED} == {k: keras_kw[k] for k in SHARED}
    assert set(torch_kw) - set(SHARED) == {"train_minibatch_fn", "loss_constructors"}
    assert set(keras_kw) - set(SHARED) == {"custom_objects", "checkpoint_callback", "backend_env"}
    assert (keras_kw["custom_objects"], keras_kw["backend_env"]) == ({}, {})


def test_unknown_keywords_are_refused_as_before():
    for cls in (TorchEstimator, KerasEstimator, ThirdEstimator):
        with pytest.raises(ValueError, match=r"^%s does not take feature_columns=: it is feature_cols here; "
                                             r"nonsense=: not a parameter of %s$" % (cls.__name__, cls.__name__)):
            cls(nonsense=1, feature_columns=["x"])
        with pytest.raises(ValueError, match="does not take nonsense="):
            cls().setParams(nonsense=1)
        with pytest.raises(TypeError, match="forces keyword arguments"):
            cls(2)
    # The models take Horovod's column names and refuse others as Python does.
    with pytest.raises(TypeError, match=r"^TorchModel.__init__\(\) got an unexpected keyword argument 'nonsense'$"):
        TorchModel(nonsense=1)
    with pytest.raises(TypeError, match=r"^KerasModel.setParams\(\) got an unexpected keyword argument 'x'$"):
        KerasModel().setParams(x=1, y=2)


def test_models_keywords_are_their_params_and_horovods_column_names():
    for cls, own in ((TorchModel, set()), (KerasModel, {"custom_objects"})):
        keywords = _keywords(cls)
        assert set(keywords) == set(ModelParams.declared_params) | own | {"feature_columns", "label_columns"}
        assert keywords["history"] == {} and cls().getHistory() == {}
    model = TorchModel(feature_columns=["x"], label_cols="y", history=None)
    assert (model.getFeatureCols(), model.getLabelCols(), model.getHistory()) == (["x"], ["y"], {})


def test_input_kwargs_hold_the_keywords_of_the_last_call():
    est = TorchEstimator(num_proc=2, epochs=None)
    assert est._input_kwargs == {"num_proc": 2, "epochs": None} and est.getEpochs() == 1
    assert est.setParams(epochs=4) is est and est._input_kwargs == {"epochs": 4} and est.getEpochs() == 4


def test_container_defaults_are_not_shared_between_stages():
    a, b = TorchEstimator(), TorchEstimator()
    a.getMetrics().append("mse")
    a.getCallbacks().append(object())
    assert b.getMetrics() == [] and b.getCallbacks() == []
    assert KerasModel().getCustomObjects() is not KerasModel().getCustomObjects()


def test_a_third_estimator_gets_the_shared_signature_accessors_and_ml_stage_behaviour():
    keywords = _keywords(ThirdEstimator)
    assert list(keywords) == SHARED + ["trainer_args", "precision"]
    assert (keywords["trainer_args"], keywords["precision"]) == ({}, 32)
    est = ThirdEstimator(num_proc=2, precision="16", trainer_args={"a": 1})
    assert (est.getPrecision(), est.getTrainerArgs(), est.getNumProc()) == (16, {"a": 1}, 2)
    assert est.setPrecision(8) is est and est.getOrDefault("precision") == 8
    copied = est.copy({est.epochs: 5})
    assert (copied.getEpochs(), est.getEpochs(), copied.getPrecision(), copied.uid) == (5, 1, 8, est.uid)
    assert "precision: bits per float (default: 32, current: 8)" in est.explainParams()
    assert est.extractParamMap()[est.trainer_args] == {"a": 1}
    assert len(est.params) == len(SHARED) + 2
    assert "``precision`` (default 32): bits per float" in ThirdEstimator.__init__.__doc__
    # The shared estimators are untouched by it.
    assert not hasattr(TorchEstimator, "precision") and "precision" not in _keywords(TorchEstimator)


def test_help_shows_the_keywords():
    text = inspect.getdoc(TorchEstimator.__init__) + str(inspect.signature(TorchEstimator))
    assert "batch_size=32" in text and "train_minibatch_fn=None" in text
    assert "``loss_constructors`` (default None): instead of loss" in text
    assert TorchEstimator.__init__.__qualname__ == "TorchEstimator.__init__"


def test_a_param_must_be_declared_under_its_own_name():
    with pytest.raises(TypeError, match=r"Broken.wrong declares the Param 'right'"):
        class Broken(KeywordParams):
            wrong = declare_param("right", "a misspelt declaration")
