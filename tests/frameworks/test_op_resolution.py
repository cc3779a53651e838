"""One op resolution and one compression base for every framework (horovod_spark.common): Horovod's
op= / average= rules, the checked ReduceOp and its errors as each framework words them, and the
float16 compressor on torch and TensorFlow tensors."""
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

from horovod_spark.common import compression, op_resolution
from horovod_spark.common.ops import Adasum, Average, Product, ReduceOp, Sum

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_op_and_the_deprecated_average_flag():
    resolve = op_resolution.handle_average_backwards_compatibility
    assert resolve(None, None) is Average
    assert resolve(Adasum, None) is Adasum and resolve(7, None) == 7  # an op given is returned as given
    with pytest.raises(ValueError, match="^The op parameter supersedes average. Please provide only one of them.$"):
        resolve(Sum, True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert (resolve(None, True), resolve(None, False)) == (Average, Sum)
    assert [w.category for w in caught] == [DeprecationWarning] * 2
    assert "replaced with `op`" in str(caught[0].message)


def test_reduce_op_checks_and_words_the_error_as_each_framework_does():
    assert op_resolution.reduce_op(Product) is ReduceOp.Product and op_resolution.reduce_op(1) is ReduceOp.Sum
    for bad in (7, -1, "sum", None, [1]):
        with pytest.raises(ValueError, match=r"^unknown reduction op .*; use one of Average, Sum, Adasum, Min, Max, "
                                             r"Product$"):
            op_resolution.reduce_op(bad)
    with pytest.raises(ValueError, match=r"use one of hvd.Average, Sum"):
        op_resolution.reduce_op(9, "hvd.")


def test_torch_uses_the_shared_resolution():
    torch = pytest.importorskip("torch")
    import horovod_spark.torch as hvd
    assert hvd.handle_average_backwards_compatibility is op_resolution.handle_average_backwards_compatibility
    assert hvd.handle_average_backwards_compatibility(hvd.Sum, None) is hvd.Sum
    x = torch.tensor([1.5, -2.0], dtype=torch.float64)
    half, ctx = hvd.Compression.fp16.compress(x)
    assert half.dtype == torch.float16 and ctx == torch.float64
    assert torch.equal(hvd.Compression.fp16.decompress(half, ctx), x)
    ints = torch.arange(3)
    assert hvd.Compression.fp16.compress(ints) == (ints, None) and hvd.Compression.fp16.decompress(ints, None) is ints
    assert hvd.Compression.none is compression.NoneCompressor
    assert issubclass(hvd.Compression.fp16, compression.HalfPrecisionCompressor)


def test_tensorflow_and_keras_use_the_shared_resolution():
    tf = pytest.importorskip("tensorflow")
    import horovod_spark.keras as hvd_keras
    import horovod_spark.tensorflow as hvd
    assert hvd.handle_average_backwards_compatibility(None, None) is ReduceOp.Average
    with pytest.raises(ValueError, match=r"^unknown reduction op 'x'; use one of hvd.Average, Sum, Adasum"):
        hvd.handle_average_backwards_compatibility("x", None)
    x = tf.constant([1.5, -2.0], dtype=tf.float32)
    half, ctx = hvd.Compression.fp16.compress(x)
    assert half.dtype == tf.float16 and ctx == tf.float32
    np.testing.assert_array_equal(hvd.Compression.fp16.decompress(half, ctx).numpy(), x.numpy())
    ints = tf.constant([1, 2])
    assert hvd.Compression.fp16.compress(ints)[1] is None
    assert hvd_keras.Compression is hvd.Compression and hvd.Compression.none is compression.NoneCompressor


def test_the_deprecation_warning_names_the_users_line(tmp_path):
    """Through each framework's allreduce (one rank), the warning points at the line that passed
    average=, as before the resolution was shared, and a bad op is refused in each framework's words."""
    pytest.importorskip("torch")
    pytest.importorskip("tensorflow")
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent("""\
        import warnings
        warnings.simplefilter("always")
        import tensorflow as tf
        import torch
        import horovod_spark.tensorflow as hvd_tf
        import horovod_spark.torch as hvd_torch
        hvd_torch.init()
        with warnings.catch_warnings(record=True) as caught:
            hvd_torch.allreduce(torch.ones(2), average=False)
            hvd_torch.allreduce_(torch.ones(2), average=True)
            hvd_tf.allreduce(tf.ones(2), average=False)
            hvd_tf.handle_average_backwards_compatibility(None, True)
        for reduce in (hvd_torch.allreduce, hvd_tf.allreduce):
            try:
                reduce(torch.ones(2) if reduce is hvd_torch.allreduce else tf.ones(2), op=9)
            except ValueError as e:
                print("REFUSED", e)
        hvd_torch.shutdown()
        for w in caught:
            if issubclass(w.category, DeprecationWarning):
                print("WARNED", w.filename, w.lineno)
        """))
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    for name in [k for k in env if k.startswith("HOROVOD_")]:
        del env[name]
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    warned = [line.split()[1:] for line in out.stdout.splitlines() if line.startswith("WARNED")]
    assert warned == [[str(script), str(n)] for n in (9, 10, 11, 12)], out.stdout
    refused = [line for line in out.stdout.splitlines() if line.startswith("REFUSED")]
    assert refused == ["REFUSED unknown reduction op 9; use one of Average, Sum, Adasum, Min, Max, Product",
                       "REFUSED unknown reduction op 9; use one of hvd.Average, Sum, Adasum, Min, Max, Product"]
