"""TorchModel.transform's worker side: one Arrow batch runs through the model in passes of
rows_per_pass() rows, and the result is the model's on the whole batch; then the same through
Spark, on a batch that spans several passes."""
import sys
import warnings

import cloudpickle
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from horovod_spark.estimator import TorchModel, torch_inference  # noqa: E402

cloudpickle.register_pickle_by_value(sys.modules[__name__])


class TwoHeads(torch.nn.Module):
    """Two inputs, two outputs; its first layer writes to its input in place."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.ReLU(inplace=True)
        self.fc = torch.nn.Linear(6, 3)

    def forward(self, x, y):
        hidden = self.fc(torch.cat([self.first(x), y.to(x.dtype)], dim=1))
        return hidden, hidden.sum(dim=1)


class WholeBatchMean(torch.nn.Module):
    def forward(self, x):
        return x.mean()


def _read_only(array):
    array.flags.writeable = False  # as Arrow hands its buffers to the UDF
    return array


def test_rows_per_pass_follows_the_row_size():
    assert torch_inference.rows_per_pass([np.empty((5, 64), np.float32)]) == 1024
    assert torch_inference.rows_per_pass([np.empty((5, 3, 224, 224), np.float32)]) == 64
    assert torch_inference.rows_per_pass([np.empty((5, 4096), np.float32)]) == 256
    assert torch_inference.rows_per_pass([np.empty((5, 2048), np.float64), np.empty((5,), np.int64)]) == 255


def test_passes_give_the_whole_batch_result_and_leave_the_inputs_alone():
    model = TwoHeads().eval()
    rows = 2 * torch_inference.rows_per_pass([np.empty((1, 4), np.float64), np.empty((1, 2), np.int64)]) + 17
    rng = np.random.default_rng(0)
    x = _read_only(rng.standard_normal((rows, 4)))  # float64: runs as the model's float32
    y = _read_only(rng.integers(0, 5, size=(rows, 2)))
    x_before = x.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "non-writable tensor" warning reaches the user
        scores, total = torch_inference.predict(model, [x, y])
    with torch.no_grad():
        want_scores, want_total = TwoHeads().eval()(torch.from_numpy(x.copy()).float(), torch.from_numpy(y.copy()))
    np.testing.assert_allclose(scores, want_scores.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(total, want_total.numpy(), rtol=1e-5, atol=1e-5)
    assert scores.shape == (rows, 3) and total.shape == (rows,) and scores.dtype == np.float32
    np.testing.assert_array_equal(x, x_before)


def test_empty_batch_keeps_output_shapes():
    scores, total = torch_inference.predict(TwoHeads().eval(), [np.empty((0, 4), np.float32),
                                                                np.empty((0, 2), np.int64)])
    assert scores.shape == (0, 3) and total.shape == (0,)


def test_output_without_a_row_per_input_row_is_named():
    with pytest.raises(ValueError, match=r"output of shape \(\) for 10 input row\(s\).*batch dimension first"):
        torch_inference.predict(WholeBatchMean(), [np.ones((10, 4), np.float32)])


def test_transform_of_a_batch_spanning_several_passes(spark):
    from pyspark.ml.linalg import Vectors
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval()
    rows = 2 * torch_inference.rows_per_pass([np.empty((1, 3), np.float32)]) + 5
    values = np.random.default_rng(1).standard_normal((rows, 3)).astype(np.float32)
    df = spark.createDataFrame([(i, Vectors.dense(v.tolist()), v.tolist()) for i, v in enumerate(values)],
                               ["id", "vec", "arr"]).coalesce(1)
    with torch.no_grad():
        want = net(torch.from_numpy(values)).numpy()
    for column in ("vec", "arr"):
        model = TorchModel(model=net, feature_cols=[column], output_cols=["out"])
        got = model.transform(df).orderBy("id").select("out").toPandas()["out"]
        np.testing.assert_allclose(np.stack(got.to_numpy()), want, rtol=1e-5, atol=1e-6)
