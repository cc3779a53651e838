"""What the tests in tests/gpu/ need from the machine, and the reason they give when it lacks it."""
import pytest


def _cuda_reason():
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if torch.version.cuda is None:
        return "no CUDA device: torch %s is a CPU build; run on a GPU machine (scripts/run_gpu_checks.sh)" % (
            torch.__version__)
    if not torch.cuda.is_available():
        return "no CUDA device: torch %s (CUDA %s) sees none; run on a GPU machine (scripts/run_gpu_checks.sh)" % (
            torch.__version__, torch.version.cuda)
    return None


CUDA_REASON = _cuda_reason()
requires_cuda = pytest.mark.skipif(CUDA_REASON is not None, reason=CUDA_REASON or "")


def tensorflow_gpu_reason():
    """None when TensorFlow sees a GPU, else why not (imports TensorFlow only when torch saw CUDA)."""
    if CUDA_REASON is not None:
        return CUDA_REASON
    try:
        import tensorflow as tf
    except ImportError:
        return "TensorFlow is not installed"
    if not tf.test.is_built_with_cuda():
        return "TensorFlow %s is a CPU build (tensorflow-cpu); install tensorflow[and-cuda] to test GPU tensors" % (
            tf.__version__)
    if not tf.config.list_physical_devices("GPU"):
        return "TensorFlow %s sees no GPU" % tf.__version__
    return None
