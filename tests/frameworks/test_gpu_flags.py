"""cuda_built / nccl_built / gpu_available and ``--check-build`` tell what this installation can do.

Each expectation is derived from the installed frameworks themselves, so the tests hold on a CPU
machine and on a GPU one.
"""
import subprocess
import sys

import pytest
import torch

import horovod_spark.torch as hvd
from horovod_spark.common import basics, gpu_support, nccl


def test_torch_flags_follow_the_installed_torch():
    assert hvd.cuda_built() is (torch.version.cuda is not None)
    assert hvd.gpu_available() is (hvd.cuda_built() and torch.cuda.is_available())
    # NCCL needs torch's CUDA build and the libraries opened by the core's loader.
    assert hvd.nccl_built() is (hvd.cuda_built() and nccl.libraries_loaded())
    assert gpu_support.nccl_available("torch") is (hvd.cuda_built() and nccl.available())


def test_tensorflow_flags_follow_the_installed_tensorflow():
    tf = pytest.importorskip("tensorflow")
    import horovod_spark.keras as hvd_keras
    import horovod_spark.tensorflow as hvd_tf

    assert hvd_tf.cuda_built() is bool(tf.test.is_built_with_cuda())
    assert hvd_tf.gpu_available() is (hvd_tf.cuda_built() and bool(tf.config.list_physical_devices("GPU")))
    assert hvd_tf.nccl_built() is False
    assert hvd_keras.cuda_built is hvd_tf.cuda_built


def test_the_common_flags_answer_for_any_installed_framework():
    expected = any(gpu_support.cuda_built(name) for name in gpu_support.FRAMEWORKS)
    assert basics.cuda_built() is expected
    assert basics.gpu_available() is any(gpu_support.device_count(n) > 0 for n in gpu_support.FRAMEWORKS)
    assert basics.nccl_built() is gpu_support.nccl_built("torch")
    assert gpu_support.nccl_built("tensorflow") is False  # TensorFlow's GPU tensors are always staged


def test_an_unknown_framework_is_refused_by_name():
    with pytest.raises(ValueError, match="framework must be one of torch, tensorflow or None, got 'mxnet'"):
        gpu_support.cuda_built("mxnet")


def test_collectives_accept_cuda_tensors_exactly_when_cuda_is_built():
    from horovod_spark.torch import _buffers
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CPU and CUDA tensors; got a tensor on meta"):
            _buffers.check_tensor(torch.empty(2, device="meta"))
    else:
        assert _buffers.check_tensor(torch.empty(2, device="cuda")) == "float32"


def test_check_build_prints_what_the_installation_has():
    done = subprocess.run([sys.executable, "-m", "horovod_spark.launcher", "--check-build"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Available Frameworks:" in out and "Available Tensor Operations:" in out
    assert "    [X] PyTorch" in out
    assert "    %s NCCL\n" % ("[X]" if hvd.nccl_built() else "[ ]") in out
    box = "[X]" if hvd.cuda_built() else "[ ]"
    assert "    %s CUDA tensors in PyTorch (host staging)" % box in out
    if hvd.cuda_built():  # then it also says whether NCCL can run, and if not, why
        assert "    %s NCCL data plane for PyTorch's CUDA tensors" % ("[X]" if nccl.available() else "[ ]") in out
    assert done.stderr == "", "--check-build wrote to stderr: %r" % done.stderr
