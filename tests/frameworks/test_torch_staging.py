"""The host-staging path of horovod_spark.torch (horovod_spark/torch/_staging.py) on CPU tensors.

CUDA tensors reach the core through a ``Stage`` and the staging thread; here CPU tensors take that
same path (``cpu_through_staging_thread``), on real ranks, and must give exactly what the direct
path gives. tests/gpu/ runs the same collectives on CUDA tensors.
"""
import pytest
import torch
from support.torch_collectives import PEER_DELAY_S, TRAINED_FROM

from horovod_spark.launcher import run_local
from horovod_spark.torch import _buffers, _handles, _staging

RANK_TIMEOUT = 150


# --- the Stage itself, without ranks ----------------------------------------------------------------

def test_cpu_stage_is_the_identity_on_contiguous_tensors():
    stage = _staging.begin(torch.device("cpu"))
    t = torch.arange(6.0)
    assert stage.host(t) is t
    assert stage.to_device(t) is t
    assert stage.submit(lambda: 41) == 41  # enqueued at once: the core handle itself


def test_cpu_stage_copies_a_non_contiguous_tensor_and_writes_results_back():
    stage = _staging.begin(torch.device("cpu"))
    t = torch.arange(12.0).reshape(3, 4).t()
    host = stage.host(t)
    assert host.is_contiguous() and torch.equal(host, t)
    stage.copy_into(t, host * 2)
    assert torch.equal(t, torch.arange(12.0).reshape(3, 4).t() * 2)
    empty = stage.host_empty(host)
    assert empty.shape == host.shape and empty.dtype == host.dtype


def test_deferred_submit_resolves_to_the_core_handles_in_order():
    stage = _staging.Stage(deferred=True)
    order = []
    first = stage.submit(lambda: order.append(1) or 11)
    second = stage.submit(lambda: order.append(2) or [12, 13])
    assert isinstance(first, _staging.Deferred)
    assert second.core_handles() == [12, 13] and first.core_handles() == [11]
    assert order == [1, 2] and first.ready()


def test_deferred_submit_raises_the_enqueue_error_when_waited_for():
    def enqueue():
        raise ValueError("name already in use")

    deferred = _staging.Stage(deferred=True).submit(enqueue)
    with pytest.raises(ValueError, match="name already in use"):
        deferred.core_handles()


def test_synchronize_raises_a_deferred_enqueue_error_and_forgets_the_handle():
    def enqueue():
        raise ValueError("name already in use")

    handle = _handles.register(_staging.Stage(deferred=True).submit(enqueue), None, lambda results: results)
    with pytest.raises(ValueError, match="name already in use"):
        _handles.synchronize(handle)
    assert _handles.synchronize(handle) is None


def test_tensors_on_an_unreachable_device_are_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"CPU and CUDA tensors; got a tensor on meta.*tensor\.cpu\(\)"):
        _buffers.check_tensor(torch.empty(3, device="meta"))


def test_a_grouped_op_refuses_tensors_on_two_devices():
    with pytest.raises(ValueError, match="one device; got tensors on cpu, meta"):
        _buffers.check_same_device([torch.zeros(2), torch.empty(2, device="meta")])


# --- every collective through the staging thread, on two real ranks ---------------------------------

def _direct_and_staged():
    import threading

    from support.torch_collectives import all_collectives, backward_and_step_seconds

    import horovod_spark.torch as hvd
    from horovod_spark.torch import _staging as staging

    hvd.init()
    try:
        direct = all_collectives(hvd, torch.device("cpu"))
        with staging.cpu_through_staging_thread():
            staged = all_collectives(hvd, torch.device("cpu"))
        assert any(t.name.startswith("hs-staging") for t in threading.enumerate()), "no staging thread ran"
        after = hvd.allreduce(torch.ones(2), op=hvd.Sum, name="s.after")
        with staging.cpu_through_staging_thread():
            timing = backward_and_step_seconds(hvd, torch.device("cpu"))
        return direct, staged, after, timing
    finally:
        hvd.shutdown()


@pytest.fixture(scope="module")
def two_rank_results():
    return run_local(_direct_and_staged, num_proc=2, timeout=RANK_TIMEOUT)


def test_staged_collectives_equal_the_direct_ones(two_rank_results):
    for rank, (direct, staged, _, _) in enumerate(two_rank_results):
        assert len(direct) == len(staged)
        for i, (a, b) in enumerate(zip(direct, staged)):
            assert a.dtype == b.dtype and a.shape == b.shape, "rank %d result %d" % (rank, i)
            assert torch.equal(a, b), "rank %d result %d differs: %s vs %s" % (rank, i, a, b)


def test_staged_collectives_compute_the_right_values(two_rank_results):
    direct0, direct1 = two_rank_results[0][1], two_rank_results[1][1]
    x = [torch.randn(4, 3, generator=torch.Generator().manual_seed(7 + r)) for r in range(2)]
    torch.testing.assert_close(direct0[0], (x[0] + x[1]) / 2)
    torch.testing.assert_close(direct1[1], x[0] + x[1])
    torch.testing.assert_close(direct0[4], (x[0] + x[1]).t())
    assert torch.equal(direct0[7], torch.tensor([1, 3, 5]))  # arange(3) + r, summed
    # The trained parameters agree across ranks after the broadcast and three averaged steps.
    for a, b in zip(direct0[TRAINED_FROM:], direct1[TRAINED_FROM:]):
        torch.testing.assert_close(a, b)


def test_direct_collectives_work_after_staged_ones(two_rank_results):
    for _, _, after, _ in two_rank_results:
        assert torch.equal(after, torch.full((2,), 2.0))


def test_gradient_hooks_do_not_block_the_backward_pass(two_rank_results):
    backward_s, step_s = two_rank_results[0][3]
    # Rank 1 started PEER_DELAY_S late: rank 0 waits for it in step(), not in backward.
    assert backward_s < PEER_DELAY_S / 2 < step_s, two_rank_results[0][3]
