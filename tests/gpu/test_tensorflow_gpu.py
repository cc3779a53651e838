"""TensorFlow GPU tensors in horovod_spark.tensorflow's collectives (TF copies them to and from the
host op), eagerly and in tf.function, on two ranks sharing one GPU."""
import numpy as np
import pytest
from support.gpu import tensorflow_gpu_reason

from horovod_spark.launcher import run_local

REASON = tensorflow_gpu_reason()
pytestmark = [pytest.mark.skipif(REASON is not None, reason=REASON or ""), pytest.mark.timeout(300)]


def _gpu_and_cpu():
    import tensorflow as tf

    import horovod_spark.tensorflow as hvd

    hvd.init()
    try:
        r = hvd.rank()
        x = np.arange(12, dtype=np.float32).reshape(3, 4) * (r + 1)

        def collectives(device):
            with tf.device(device):
                t = tf.constant(x)
                outs = [hvd.allreduce(t, op=hvd.Sum), hvd.allgather(t), hvd.broadcast(t, root_rank=1)]
                outs += hvd.grouped_allreduce([t, t * 2], op=hvd.Average)
                summed = tf.function(lambda v: hvd.allreduce(v, op=hvd.Sum, name="in_graph"))(t)
                outs.append(summed)
                with tf.GradientTape() as tape:
                    w = tf.Variable(tf.ones((4, 1)))
                    tape.watch(w)
                    loss = tf.reduce_sum(tf.matmul(t, w))
                grad = hvd.DistributedGradientTape(tape).gradient(loss, [w])[0]
                outs.append(grad)
            return [o.device for o in outs[:1]], [o.numpy() for o in outs]

        gpu_devices, on_gpu = collectives("/GPU:0")
        _, on_cpu = collectives("/CPU:0")
        return gpu_devices, on_gpu, on_cpu, hvd.cuda_built(), hvd.gpu_available()
    finally:
        hvd.shutdown()


def test_tensorflow_gpu_tensors_through_every_collective():
    for gpu_devices, on_gpu, on_cpu, cuda_built, gpu_available in run_local(_gpu_and_cpu, num_proc=2, timeout=240):
        assert cuda_built and gpu_available
        assert all(":GPU:" in d for d in gpu_devices), gpu_devices  # eager results return to the GPU
        assert len(on_gpu) == len(on_cpu)
        for a, b in zip(on_gpu, on_cpu):
            np.testing.assert_allclose(a, b, rtol=1e-6)
