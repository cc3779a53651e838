"""``horovod-spark-run --check-build``: what this installation can do, in Horovod's layout.

Every line is a probe of this installation, not a constant: a framework is listed as available
when it imports; the transports the core has (TCP between hosts, shared memory within one, MPI when
mpi4py is installed, TLS for the job's control connections when Python has ssl); "CUDA tensors" when
a framework was built with CUDA (collectives then accept its device tensors); NCCL when PyTorch is a
CUDA build and the core's NCCL data plane opened libcudart and libnccl, with the reason when it did
not (meanings in horovod_spark/common/gpu_support.py).
"""
import importlib.util
import os
import sys

import horovod_spark
from horovod_spark.common import basics, gpu_support


def _box(flag) -> str:
    return "[X]" if flag else "[ ]"


def _import_tensorflow_quietly() -> None:
    """Import TensorFlow (when installed) with its start-up notices, which TF_CPP_MIN_LOG_LEVEL does
    not silence, kept off stderr: they are the probe's noise, not the answer."""
    import importlib.util
    if importlib.util.find_spec("tensorflow") is None:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            try:
                import tensorflow  # noqa: F401
            except Exception:
                pass  # reported as not installed by the probe itself
            gpu_support.device_count("tensorflow")  # TF logs again when it first lists devices
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _nccl_lines() -> list:
    """The NCCL data plane, and why it is off when it is."""
    if not gpu_support.installed("torch"):
        return ["    [ ] NCCL data plane for PyTorch's CUDA tensors", "        (PyTorch is not installed)"]
    if not gpu_support.cuda_built("torch"):
        import torch
        return ["    [ ] NCCL data plane for PyTorch's CUDA tensors",
                "        (torch %s is a CPU build; a CUDA build of torch brings the NCCL library)" % torch.__version__]
    from horovod_spark.common import nccl
    reason = nccl.unavailable_reason()
    return (["    %s NCCL data plane for PyTorch's CUDA tensors" % _box(not reason)]
            + ["        " + line for line in reason.splitlines()[1:]])


def report() -> str:
    """The --check-build text."""
    _import_tensorflow_quietly()
    lines = ["horovod_spark %s (%s):" % (horovod_spark.__version__, os.path.dirname(horovod_spark.__file__)), "",
             "Available Frameworks:"]
    for label, name in (("TensorFlow", "tensorflow"), ("PyTorch", "torch")):
        installed = gpu_support.installed(name)
        lines.append("    %s %s" % (_box(installed), label))
    lines += ["", "Available Controllers:", "    %s MPI" % _box(basics.mpi_built()),
              "    %s Gloo (horovod_spark's own TCP/shared-memory core)" % _box(basics.gloo_built()),
              "", "Available Transports:",
              "    [X] TCP between hosts",
              "    [X] shared memory between the ranks of one host",
              "    %s MPI (libmpi through mpi4py)" % _box(basics.mpi_built()),
              "    %s TLS for the job's control connections" % _box(importlib.util.find_spec("ssl") is not None),
              "", "Available Tensor Operations:", "    %s NCCL" % _box(gpu_support.nccl_built()),
              "    [ ] DDL", "    [ ] CCL", "    %s MPI" % _box(basics.mpi_built()),
              "    %s Gloo" % _box(basics.gloo_built()), "", "GPU support:"]
    for label, name in (("TensorFlow", "tensorflow"), ("PyTorch", "torch")):
        built = gpu_support.cuda_built(name)
        devices = gpu_support.device_count(name) if built else 0
        lines.append("    %s CUDA tensors in %s (host staging)%s"
                     % (_box(built), label, ", %d device(s) visible" % devices if built else ""))
    lines += _nccl_lines()
    return "\n".join(lines) + "\n"
