"""The errors horovod.torch raises, raised the same way by horovod_spark.torch on two real ranks.

Each check follows what Horovod documents and its own test-suite expects: the exception type a
ported script or test catches, raised from the call (ValueError) or from the collective
(RuntimeError). One run_local executes every check in sequence; each is reported as its own test.
"""
import sys
import traceback

import pytest
import torch

from horovod_spark.launcher import run_local

RANK_TIMEOUT = 150


def _run_checks(names):
    import horovod_spark.torch as hvd

    hvd.init()
    module = sys.modules[__name__]
    results = {}
    for name in names:
        try:
            getattr(module, name)(hvd)
            results[name] = None
        except (Exception, pytest.fail.Exception):
            results[name] = traceback.format_exc()
            sys.stderr.write("rank %d: %s failed\n%s" % (hvd.rank(), name, results[name]))
    hvd.shutdown()
    return results


def _refused_while_in_flight(hvd, start, label):
    """``start(name)`` submits a collective named ``name`` and returns its handle (or None for a
    blocking call). Each rank in turn submits it while the other waits in a barrier, so the first
    request is certainly still in flight when the same rank submits it again: that second call must
    raise ValueError at once, as Horovod's does, and the first must still complete."""
    for tester in range(hvd.size()):
        name = "dup.%s.%d" % (label, tester)
        handle = None
        if hvd.rank() == tester:
            handle = start(name)
            with pytest.raises(ValueError, match="already in flight"):
                start(name)
        hvd.barrier()
        if hvd.rank() != tester:
            handle = start(name)
        hvd.synchronize(handle)


def check_duplicate_names_are_refused(hvd):
    n = hvd.size()
    x = torch.ones(17, 3)
    rows = torch.ones(2 * n, 3)
    _refused_while_in_flight(hvd, lambda nm: hvd.allreduce_async(x, name=nm), "allreduce")
    _refused_while_in_flight(hvd, lambda nm: hvd.allreduce_async_(x.clone(), name=nm), "allreduce_")
    _refused_while_in_flight(hvd, lambda nm: hvd.grouped_allreduce_async([x, rows], name=nm), "grouped")
    _refused_while_in_flight(hvd, lambda nm: hvd.grouped_allreduce_async_([x.clone(), rows.clone()], name=nm),
                             "grouped_")
    # members of several dtypes travel as several requests: refused before any is queued
    mixed = [x, rows.double()]
    _refused_while_in_flight(hvd, lambda nm: hvd.grouped_allreduce_async(mixed, name=nm), "grouped_mixed")
    _refused_while_in_flight(hvd, lambda nm: hvd.allgather_async(x, name=nm), "allgather")
    _refused_while_in_flight(hvd, lambda nm: hvd.grouped_allgather_async([x, rows], name=nm), "grouped_allgather")
    _refused_while_in_flight(hvd, lambda nm: hvd.broadcast_async(x, 0, name=nm), "broadcast")
    _refused_while_in_flight(hvd, lambda nm: hvd.broadcast_async_(x.clone(), 0, name=nm), "broadcast_")
    _refused_while_in_flight(hvd, lambda nm: hvd.reducescatter_async(rows, name=nm), "reducescatter")
    _refused_while_in_flight(hvd, lambda nm: hvd.grouped_reducescatter_async([rows, rows * 2], name=nm),
                             "grouped_reducescatter")


def check_blocking_call_under_a_name_in_flight(hvd):
    # The synchronous latency path refuses it too, and the engine carries on normally.
    r = hvd.rank()
    x = torch.ones(4)
    handle = None
    if r == 0:
        handle = hvd.allreduce_async(x, name="dup.blocking", op=hvd.Sum)
        with pytest.raises(ValueError, match="already in flight"):
            hvd.allreduce_(torch.ones(4), name="dup.blocking", op=hvd.Sum)
    hvd.barrier()
    if r != 0:
        handle = hvd.allreduce_async(x, name="dup.blocking", op=hvd.Sum)
    assert hvd.synchronize(handle).tolist() == [float(hvd.size())] * 4
    assert hvd.allreduce(torch.ones(4), op=hvd.Sum).tolist() == [float(hvd.size())] * 4


def check_names_reach_the_core_alike_on_every_path(hvd):
    # The blocking latency path builds the core name its own way: a str name and any other name
    # (an int here, formatted with str()) must give the same core name as the async path, so the
    # second submission of the same name is refused while the first is in flight.
    r = hvd.rank()
    handle = None
    if r == 0:
        handle = hvd.allreduce_async(torch.ones(4), name=7, op=hvd.Sum)
        with pytest.raises(ValueError, match="already in flight"):
            hvd.allreduce_(torch.ones(4), name="7", op=hvd.Sum)
        with pytest.raises(ValueError, match="already in flight"):
            hvd.allreduce(torch.ones(4), name=7, op=hvd.Sum)
    hvd.barrier()
    if r != 0:
        handle = hvd.allreduce_async(torch.ones(4), name="7", op=hvd.Sum)
    assert hvd.synchronize(handle).tolist() == [float(hvd.size())] * 4


def check_reducescatter_of_a_scalar_is_refused(hvd):
    with pytest.raises(ValueError, match="scalar"):
        hvd.reducescatter(torch.tensor(float(hvd.rank())), op=hvd.Average)
    with pytest.raises(ValueError, match="scalar"):
        hvd.reducescatter_async(torch.tensor(1.0), op=hvd.Sum)
    # grouped: the scalar member is found before any member is queued, so the same call without
    # it, under the same name, goes through at once
    rows = torch.ones(2 * hvd.size(), 1)
    with pytest.raises(ValueError, match="scalar"):
        hvd.grouped_reducescatter([rows, torch.tensor(1.0)], name="rs.scalar", op=hvd.Sum)
    out = hvd.grouped_reducescatter([rows, rows * 3], name="rs.scalar", op=hvd.Sum)
    assert [o.tolist() for o in out] == [[[2.0]] * 2, [[6.0]] * 2]


def check_alltoall_splits_must_have_an_integer_dtype(hvd):
    n = hvd.size()
    tensor = torch.arange(2.0 * n)
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bool):
        whole = torch.full((n,), 2, dtype=dtype) if dtype != torch.bool else torch.ones(n, dtype=torch.bool)
        with pytest.raises(ValueError, match="integers"):
            hvd.alltoall(tensor, whole)  # refused by dtype, though every value is a whole number
    for dtype in (torch.int32, torch.int64):
        out, received = hvd.alltoall(tensor, torch.full((n,), 2, dtype=dtype))
        assert out.shape == (2 * n,) and received.dtype == dtype and received.tolist() == [2] * n
    out, received = hvd.alltoall(tensor, [2] * n)
    assert out.shape == (2 * n,) and received.tolist() == [2] * n


def check_reducescatter_with_adasum_raises_runtime_error(hvd):
    n = hvd.size()
    for dtype in (torch.int32, torch.int64, torch.float16, torch.float32, torch.float64):
        for dims in (1, 2, 3):
            tensor = torch.zeros(*([n * 4] * dims)).to(dtype)
            with pytest.raises(RuntimeError, match="Adasum") as info:
                hvd.reducescatter(tensor, op=hvd.Adasum)
            assert not isinstance(info.value, ValueError), type(info.value).__mro__
    with pytest.raises(RuntimeError, match="Adasum"):
        hvd.grouped_reducescatter([torch.ones(n), torch.ones(n)], op=hvd.Adasum)


def check_allgather_and_broadcast_while_a_rank_has_joined(hvd):
    r, n = hvd.rank(), hvd.size()
    for first_join_rank in range(n):
        # (named: unnamed ops would advance only these ranks' counters of generated names)
        if r == first_join_rank:
            last = hvd.join()
        else:
            with pytest.raises(RuntimeError, match="join"):
                hvd.allgather(torch.ones(3, 2), name="join.allgather")
            with pytest.raises(RuntimeError, match="join"):
                hvd.broadcast(torch.ones(3), r, name="join.broadcast")
            # reductions go on, the joined rank contributing zeros
            assert hvd.allreduce(torch.ones(3), op=hvd.Sum, name="join.sum").tolist() == [float(n - 1)] * 3
            assert hvd.reducescatter(torch.ones(2 * n), op=hvd.Sum, name="join.rs").tolist() == [float(n - 1)] * 2
            last = hvd.join()
        assert last != first_join_rank
        assert hvd.allgather_object(last) == [last] * n


def check_collectives_outside_a_process_set_raise_value_error(hvd):
    """Horovod refuses a collective on a set this rank is not in with ValueError from the call, for
    a set of one rank too, and so does it a process_set_id that names no registered set."""
    r = hvd.rank()
    first, second = hvd.add_process_set([0]), hvd.add_process_set([1])
    mine, other = (first, second) if r == 0 else (second, first)
    x = torch.ones(2)
    assert hvd.allreduce(x, op=hvd.Sum, process_set=mine).tolist() == [1.0, 1.0]
    calls = {
        "allreduce": lambda: hvd.allreduce(x, process_set=other),
        "allreduce_async_": lambda: hvd.allreduce_async_(x.clone(), name="outside.inplace", process_set=other),
        "grouped_allreduce": lambda: hvd.grouped_allreduce([x, x], process_set=other),
        "allgather": lambda: hvd.allgather(x, process_set=other),
        "broadcast": lambda: hvd.broadcast(x, root_rank=other.ranks[0], process_set=other),
        "alltoall": lambda: hvd.alltoall(x, process_set=other),
        "reducescatter": lambda: hvd.reducescatter(x, process_set=other),
        "barrier": lambda: hvd.barrier(process_set=other),
    }
    for label, call in calls.items():
        with pytest.raises(ValueError, match="not a member"):
            call()
            pytest.fail("%s on a process set without this rank did not raise" % label)
    forged = hvd.ProcessSet([0, 1])
    forged.process_set_id = 77
    with pytest.raises(ValueError, match="77"):
        hvd.allreduce(x, process_set=forged)
    hvd.barrier()
    for ps in (first, second):  # (in the same order on every rank: removing is a collective)
        hvd.remove_process_set(ps)


CHECKS = [name for name in list(globals()) if name.startswith("check_")]


@pytest.fixture(scope="module")
def two_rank_results():
    return run_local(_run_checks, args=(CHECKS,), num_proc=2, timeout=RANK_TIMEOUT)


@pytest.mark.parametrize("check", CHECKS)
def test_two_ranks(two_rank_results, check):
    for rank, results in enumerate(two_rank_results):
        assert results[check] is None, "rank %d:\n%s" % (rank, results[check])
