"""CUDA tensors in every collective of horovod_spark.torch (host staging), on two ranks sharing
one GPU, compared with the same collectives on CPU tensors on the same ranks."""
import pytest
import torch
from support.gpu import requires_cuda
from support.torch_collectives import PEER_DELAY_S, TRAINED_FROM

from horovod_spark.launcher import run_local

pytestmark = [requires_cuda, pytest.mark.timeout(300)]
RANK_TIMEOUT = 240
BIG = 16 * 1024 * 1024  # floats: 64 MiB, so the copy back takes long enough to be seen if not waited for


def _cpu_and_cuda():
    from support.torch_collectives import all_collectives, backward_and_step_seconds

    import horovod_spark.torch as hvd

    hvd.init()
    try:
        torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
        device = torch.device("cuda", torch.cuda.current_device())
        on_cpu = all_collectives(hvd, torch.device("cpu"))
        on_cuda = all_collectives(hvd, device)
        devices = [t.device.type for t in on_cuda]
        # synchronize returns once the result is on the device: another stream reads it at once.
        big = torch.full((BIG,), float(hvd.rank() + 1), device=device)
        hvd.synchronize(hvd.allreduce_async_(big, op=hvd.Sum, name="big"))
        reader = torch.cuda.Stream()
        with torch.cuda.stream(reader):
            low, high = big.min(), big.max()
        reader.synchronize()
        timing = backward_and_step_seconds(hvd, device)
        return on_cpu, [t.cpu() for t in on_cuda], devices, (float(low), float(high)), timing
    finally:
        hvd.shutdown()


@pytest.fixture(scope="module")
def results():
    return run_local(_cpu_and_cuda, num_proc=2, timeout=RANK_TIMEOUT)


def test_every_collective_on_cuda_equals_the_cpu_path(results):
    for rank, (on_cpu, on_cuda, _, _, _) in enumerate(results):
        assert len(on_cpu) == len(on_cuda)
        for i, (a, b) in enumerate(zip(on_cpu[:TRAINED_FROM], on_cuda[:TRAINED_FROM])):
            assert a.dtype == b.dtype and a.shape == b.shape, "rank %d result %d" % (rank, i)
            assert torch.equal(a, b), "rank %d result %d: %s on CPU, %s on CUDA" % (rank, i, a, b)
        for a, b in zip(on_cpu[TRAINED_FROM:], on_cuda[TRAINED_FROM:]):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_results_of_cuda_collectives_are_on_the_gpu(results):
    for _, _, devices, _, _ in results:
        # Only alltoall's received splits stay on the CPU, as in Horovod.
        assert devices.count("cpu") == 1, devices


def test_synchronize_returns_with_the_result_on_the_device(results):
    for _, _, _, (low, high), _ in results:
        assert low == high == 3.0


def test_gradient_hooks_do_not_block_the_backward_pass_on_cuda(results):
    backward_s, step_s = results[0][4]
    assert backward_s < PEER_DELAY_S / 2 < step_s, results[0][4]


def _single_rank():
    import horovod_spark.torch as hvd
    hvd.init()
    try:
        t = torch.arange(8.0, device="cuda")
        from horovod_spark.common import nccl
        return (hvd.allreduce(t, op=hvd.Sum).cpu(), hvd.cuda_built(), hvd.gpu_available(),
                hvd.nccl_built() == nccl.libraries_loaded())
    finally:
        hvd.shutdown()


def test_one_rank_and_the_build_flags():
    reduced, cuda_built, gpu_available, nccl_flag_true = run_local(_single_rank, num_proc=1, timeout=RANK_TIMEOUT)[0]
    assert torch.equal(reduced, torch.arange(8.0))
    assert (cuda_built, gpu_available, nccl_flag_true) == (True, True, True)
