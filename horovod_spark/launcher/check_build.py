"""``horovod-spark-run --check-build``: what this installation can do, in Horovod's layout.

Every line is a probe of this installation, not a constant: a framework is listed as available
when it imports, "CUDA tensors" when it was built with CUDA (collectives then stage its device
tensors through host memory), and NCCL never, as the core has no NCCL data plane (meanings in
horovod_spark/common/gpu_support.py).
"""
import os
import sys

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


def report() -> str:
    """The --check-build text."""
    _import_tensorflow_quietly()
    from importlib.metadata import PackageNotFoundError, version
    try:
        ours = version("horovod_spark")
    except PackageNotFoundError:
        ours = "(not installed as a package: run from a source tree)"
    lines = ["horovod_spark %s:" % ours, "", "Available Frameworks:"]
    for label, name in (("TensorFlow", "tensorflow"), ("PyTorch", "torch")):
        installed = gpu_support.installed(name)
        lines.append("    %s %s" % (_box(installed), label))
    lines += ["", "Available Controllers:", "    %s MPI" % _box(basics.mpi_built()),
              "    %s Gloo (horovod_spark's own TCP/shared-memory core)" % _box(basics.gloo_built()),
              "", "Available Tensor Operations:", "    %s NCCL" % _box(gpu_support.nccl_built()),
              "    [ ] DDL", "    [ ] CCL", "    %s MPI" % _box(basics.mpi_built()),
              "    %s Gloo" % _box(basics.gloo_built()), "", "GPU support:"]
    for label, name in (("TensorFlow", "tensorflow"), ("PyTorch", "torch")):
        built = gpu_support.cuda_built(name)
        devices = gpu_support.device_count(name) if built else 0
        lines.append("    %s CUDA tensors in %s (host staging)%s"
                     % (_box(built), label, ", %d device(s) visible" % devices if built else ""))
    if gpu_support.cuda_built("torch"):
        from horovod_spark.common import nccl
        reason = nccl.unavailable_reason()
        lines.append("    %s NCCL data plane for PyTorch's CUDA tensors" % _box(not reason))
        lines += ["        " + line for line in reason.splitlines()[1:]]
    return "\n".join(lines) + "\n"
