"""TensorFlow's answers to the build queries (meanings in horovod_spark/common/gpu_support.py)."""
from horovod_spark.common import gpu_support as _gpu_support


def cuda_built() -> bool:
    """True when TensorFlow was built with CUDA: collectives then take GPU tensors, which TF copies
    into and out of the host op that calls the CPU core."""
    return _gpu_support.cuda_built("tensorflow")


def nccl_built() -> bool:
    """False: GPU tensors go through host memory, there is no NCCL data plane."""
    return _gpu_support.nccl_built("tensorflow")


def gpu_available() -> bool:
    """True when TensorFlow was built with CUDA and this process sees a GPU."""
    return _gpu_support.gpu_available("tensorflow")
