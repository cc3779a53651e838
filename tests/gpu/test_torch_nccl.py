"""The NCCL data plane on CUDA tensors (horovod_spark.torch._nccl, native/gpu/nccl_plane.h).

Written for a machine with ONE GPU: NCCL refuses two ranks on one GPU, so NCCL's own collectives
run on one rank here (every op, reductions with scale factors, stream ordering), and two ranks
sharing the GPU check what must happen then: auto mode stages through host memory, and
HOROVOD_GPU_OPERATIONS=nccl fails with an error naming the shared GPU. Uneven allgather and
reducescatter splits (NCCL broadcasts/reduces per rank) need two GPUs and are not run here.
"""
import pytest
import torch
from support.gpu import requires_cuda

from horovod_spark.exceptions import RankFailedError
from horovod_spark.launcher import run_local

pytestmark = [requires_cuda, pytest.mark.timeout(300)]
RANK_TIMEOUT = 240
NCCL_ONLY = {"HOROVOD_GPU_OPERATIONS": "nccl"}
BIG = 32 * 1024 * 1024  # floats: long enough a kernel queue that NCCL reading early would be seen


def _nccl_one_rank():
    import horovod_spark.torch as hvd
    from horovod_spark.common import _core

    hvd.init()
    try:
        torch.cuda.set_device(0)
        dev = torch.device("cuda", 0)
        x = torch.arange(12, dtype=torch.float32, device=dev).reshape(4, 3)
        out = {}
        for op in ("Sum", "Average", "Min", "Max", "Product"):
            out[op] = hvd.allreduce(x, op=getattr(hvd, op), name="ar." + op).cpu()
        out["scaled"] = hvd.allreduce(x, op=hvd.Average, prescale_factor=2.0, postscale_factor=3.0).cpu()
        out["half"] = hvd.allreduce(x.half(), op=hvd.Sum, prescale_factor=0.5).cpu()
        out["int"] = hvd.allreduce(x.int(), op=hvd.Max).cpu()
        out["allgather"] = hvd.allgather(x).cpu()
        out["broadcast"] = hvd.broadcast(x, root_rank=0).cpu()
        out["reducescatter"] = hvd.reducescatter(x, op=hvd.Sum).cpu()
        received, splits = hvd.alltoall(x, splits=torch.tensor([4], dtype=torch.int32))
        out["alltoall"], out["alltoall_splits"] = received.cpu(), splits
        inplace = x.clone()
        hvd.allreduce_(inplace, op=hvd.Sum, prescale_factor=2.0)
        out["inplace"] = inplace.cpu()
        # Stream order: the collective must read what kernels queued before it write, and later
        # kernels (and any stream after synchronize) must see its result.
        big = torch.zeros(BIG, device=dev)
        for _ in range(20):
            big.add_(1.0)
        hvd.synchronize(hvd.allreduce_async_(big, op=hvd.Sum, prescale_factor=2.0, name="big"))
        reader = torch.cuda.Stream()
        with torch.cuda.stream(reader):
            low, high = big.min(), big.max()
        reader.synchronize()
        out["big"] = (float(low), float(high))
        return out, x.cpu(), _core.stats()["nccl_collectives"]
    finally:
        hvd.shutdown()


@pytest.fixture(scope="module")
def one_rank():
    return run_local(_nccl_one_rank, num_proc=1, env=NCCL_ONLY, timeout=RANK_TIMEOUT)[0]


def test_every_collective_runs_on_nccl_with_one_rank(one_rank):
    out, x, ran = one_rank
    assert ran >= 13, "only %d collectives ran on NCCL" % ran
    for op in ("Sum", "Average", "Min", "Max", "Product"):
        assert torch.equal(out[op], x), op
    torch.testing.assert_close(out["scaled"], x * 6.0)
    torch.testing.assert_close(out["half"], (x * 0.5).half())
    assert torch.equal(out["int"], x.int())
    for name in ("allgather", "broadcast", "reducescatter", "alltoall"):
        assert torch.equal(out[name], x), name
    assert out["alltoall_splits"].tolist() == [4] and out["alltoall_splits"].dtype == torch.int32
    torch.testing.assert_close(out["inplace"], x * 2.0)


def test_nccl_waits_for_the_callers_stream_and_the_result_is_ready_at_synchronize(one_rank):
    assert one_rank[0]["big"] == (40.0, 40.0)


def _two_ranks_one_gpu():
    import horovod_spark.torch as hvd
    from horovod_spark.common import _core

    hvd.init()
    try:
        torch.cuda.set_device(0)
        x = torch.full((1000,), float(hvd.rank() + 1), device="cuda")
        total = hvd.allreduce(x, op=hvd.Sum).cpu()
        return float(total.min()), float(total.max()), _core.stats()["nccl_collectives"]
    finally:
        hvd.shutdown()


def test_two_ranks_sharing_the_gpu_are_staged_in_auto_mode():
    for low, high, ran in run_local(_two_ranks_one_gpu, num_proc=2, env={"HOROVOD_GPU_OPERATIONS": "auto"},
                                    timeout=RANK_TIMEOUT):
        assert (low, high, ran) == (3.0, 3.0, 0)


def test_nccl_forced_on_two_ranks_sharing_the_gpu_names_the_problem():
    with pytest.raises(RankFailedError, match="use the same GPU .*which NCCL refuses.*HOROVOD_GPU_OPERATIONS=HOST"):
        run_local(_two_ranks_one_gpu, num_proc=2, env=NCCL_ONLY, timeout=RANK_TIMEOUT)
