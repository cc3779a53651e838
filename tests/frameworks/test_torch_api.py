"""horovod_spark.torch collectives on real local ranks (run_local).

Launching ranks costs seconds, so one run_local executes every two-rank check in sequence; each
check is reported as its own parametrized test. A check runs on every rank and raises (assert)
on a wrong result.
"""
import sys
import traceback
import warnings

import numpy as np
import pytest
import torch

from horovod_spark.launcher import run_local

RANK_TIMEOUT = 150


def _run_checks(names):
    """Rank side: init, run each named check of this module, report tracebacks by name."""
    import horovod_spark.torch as hvd

    hvd.init()
    module = sys.modules[__name__]
    results = {}
    for name in names:
        try:
            getattr(module, name)(hvd)
            results[name] = None
        except (Exception, pytest.fail.Exception):  # pytest.fail/raises failures are BaseExceptions
            results[name] = traceback.format_exc()
            # Visible in the captured output even if a later check hangs.
            sys.stderr.write("rank %d: %s failed\n%s" % (hvd.rank(), name, results[name]))
    hvd.shutdown()
    return results


def _close(actual, expected, **kw):
    torch.testing.assert_close(actual, expected, **kw)


def _rank_data(rank, shape, dtype=torch.float32, offset=0.0):
    gen = torch.Generator().manual_seed(1000 + rank)
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * 3 + offset).to(dtype)


# --- checks (run on every rank) -------------------------------------------------------------------

def check_allreduce_ops(hvd):
    r, n = hvd.rank(), hvd.size()
    xs = [_rank_data(i, (3, 4)) for i in range(n)]
    stacked = torch.stack(xs)
    _close(hvd.allreduce(xs[r]), stacked.mean(0))
    _close(hvd.allreduce(xs[r], op=hvd.Average, name="named.avg"), stacked.mean(0))
    _close(hvd.allreduce(xs[r], op=hvd.Sum), stacked.sum(0))
    _close(hvd.allreduce(xs[r], op=hvd.Min), stacked.min(0).values)
    _close(hvd.allreduce(xs[r], op=hvd.Max), stacked.max(0).values)
    _close(hvd.allreduce(xs[r], op=hvd.Product), stacked.prod(0))
    _close(hvd.allreduce(xs[r], op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0),
           stacked.sum(0) * 1.5)
    original = xs[r].clone()
    hvd.allreduce(xs[r])
    assert torch.equal(xs[r], original), "allreduce modified its input"


def check_allreduce_dtypes(hvd):
    r, n = hvd.rank(), hvd.size()
    for dtype in (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64):
        x = torch.arange(6, dtype=dtype).reshape(2, 3) + r
        expected = sum(torch.arange(6, dtype=torch.int64).reshape(2, 3) + i for i in range(n)).to(dtype)
        out = hvd.allreduce(x, op=hvd.Sum)
        assert out.dtype == dtype and torch.equal(out, expected), (dtype, out, expected)
    for dtype, tol in ((torch.float16, 1e-2), (torch.bfloat16, 5e-2), (torch.float64, 1e-12)):
        xs = [_rank_data(i, (5,), dtype) for i in range(n)]
        out = hvd.allreduce(xs[r], op=hvd.Sum)
        assert out.dtype == dtype
        _close(out.double(), sum(x.double() for x in xs), rtol=tol, atol=tol)
    flags = torch.tensor([True, r == 0, False])
    assert torch.equal(hvd.allreduce(flags, op=hvd.Max), torch.tensor([True, True, False]))
    assert torch.equal(hvd.allreduce(flags, op=hvd.Min), torch.tensor([True, n == 1, False]))
    scalar = torch.tensor(float(r + 1))
    _close(hvd.allreduce(scalar, op=hvd.Sum), torch.tensor(float(n * (n + 1) // 2)))
    # int16 buffers (Horovod supports them): broadcast_parameters of a state dict holding one.
    state = {"w": torch.full((3,), float(r)), "counts": torch.full((4,), 100 * r + 7, dtype=torch.int16)}
    hvd.broadcast_parameters(state, root_rank=n - 1)
    assert torch.equal(state["counts"], torch.full((4,), 100 * (n - 1) + 7, dtype=torch.int16))


def check_allreduce_deprecated_average(hvd):
    r, n = hvd.rank(), hvd.size()
    x = torch.full((2,), float(r + 1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summed = hvd.allreduce(x, average=False)
        averaged = hvd.allreduce(x, average=True)
    assert any(issubclass(w.category, DeprecationWarning) for w in caught)
    _close(summed, torch.full((2,), float(n * (n + 1) // 2)))
    _close(averaged, torch.full((2,), (n + 1) / 2))
    with pytest.raises(ValueError):
        hvd.allreduce(x, average=True, op=hvd.Sum)


def check_allreduce_inplace(hvd):
    r, n = hvd.rank(), hvd.size()
    xs = [_rank_data(i, (4, 3)) for i in range(n)]
    x = xs[r].clone()
    out = hvd.allreduce_(x, op=hvd.Sum)
    assert out is x
    _close(x, sum(xs))
    # A non-contiguous view is reduced through a contiguous buffer and written back.
    base = xs[r].clone()
    view = base.t()
    out = hvd.allreduce_(view)
    assert out is view
    _close(base, sum(xs) / n)
    handle = hvd.allreduce_async_(x, op=hvd.Sum)
    assert hvd.synchronize(handle) is x
    _close(x, sum(xs) * n)


def check_grouped_allreduce(hvd):
    r, n = hvd.rank(), hvd.size()
    a = [_rank_data(i, (3,)) for i in range(n)]
    b = [_rank_data(i + 10, (2, 2), torch.float64) for i in range(n)]
    c = [torch.full((4,), i + 1, dtype=torch.int32) for i in range(n)]
    outs = hvd.grouped_allreduce([a[r], b[r], c[r]], op=hvd.Sum)
    assert isinstance(outs, list) and len(outs) == 3
    _close(outs[0], sum(a))
    _close(outs[1], sum(b))
    assert torch.equal(outs[2], sum(c))
    avg = hvd.grouped_allreduce([a[r], b[r]], name="grouped.avg")
    _close(avg[0], sum(a) / n)
    _close(avg[1], sum(b) / n)
    mine = [a[r].clone(), b[r].clone()]
    res = hvd.grouped_allreduce_(mine, op=hvd.Sum)
    assert res[0] is mine[0] and res[1] is mine[1]
    _close(mine[0], sum(a))
    _close(mine[1], sum(b))
    handle = hvd.grouped_allreduce_async([a[r], c[r]], op=hvd.Max)
    outs = hvd.synchronize(handle)
    _close(outs[0], torch.stack(a).max(0).values)
    handle = hvd.grouped_allreduce_async_(mine, op=hvd.Sum)
    assert hvd.synchronize(handle)[0] is mine[0]


def check_async_poll_synchronize(hvd):
    r, n = hvd.rank(), hvd.size()
    xs = [_rank_data(i, (64,)) for i in range(n)]
    handles = [hvd.allreduce_async(xs[r] * k, op=hvd.Sum, name="async.%d" % k) for k in range(1, 5)]
    gather = hvd.allgather_async(xs[r].reshape(8, 8))
    # Wait in reverse order of submission: completion order must not matter.
    for k in reversed(range(1, 5)):
        h = handles[k - 1]
        while not hvd.poll(h):
            pass
        assert hvd.poll(h) is True
        _close(hvd.synchronize(h), sum(xs) * k)
    assert hvd.synchronize(handles[0]) is None  # already collected: None, as in Horovod
    _close(hvd.synchronize(gather), torch.cat([x.reshape(8, 8) for x in xs]))


def check_allgather(hvd):
    r, n = hvd.rank(), hvd.size()
    xs = [_rank_data(i, (i + 1, 3)) for i in range(n)]
    out = hvd.allgather(xs[r])
    _close(out, torch.cat(xs))
    ints = [torch.arange(2 * (i + 1), dtype=torch.int64).reshape(i + 1, 2) * (i + 1) for i in range(n)]
    assert torch.equal(hvd.allgather(ints[r], name="ints"), torch.cat(ints))
    empty = torch.zeros((0, 3)) if r == 0 else xs[r]
    _close(hvd.allgather(empty), torch.cat([torch.zeros((0, 3))] + xs[1:]))
    outs = hvd.grouped_allgather([xs[r], ints[r]])
    _close(outs[0], torch.cat(xs))
    assert torch.equal(outs[1], torch.cat(ints))
    outs = hvd.synchronize(hvd.grouped_allgather_async([ints[r]]))
    assert torch.equal(outs[0], torch.cat(ints))


def check_broadcast(hvd):
    r, n = hvd.rank(), hvd.size()
    xs = [_rank_data(i, (2, 3)) for i in range(n)]
    for root in range(n):
        original = xs[r].clone()
        _close(hvd.broadcast(xs[r], root), xs[root])
        assert torch.equal(xs[r], original), "broadcast modified its input"
        mine = xs[r].clone()
        assert hvd.broadcast_(mine, root, name="bcast.%d" % root) is mine
        _close(mine, xs[root])
    mine = xs[r].clone()
    _close(hvd.synchronize(hvd.broadcast_async(mine, 1)), xs[1])
    hvd.synchronize(hvd.broadcast_async_(mine, 0))
    _close(mine, xs[0])
    flags = torch.tensor([r == 0, True])
    assert torch.equal(hvd.broadcast(flags, 0), torch.tensor([True, True]))


def check_alltoall(hvd):
    r, n = hvd.rank(), hvd.size()
    # Equal split: rank r sends rows [2p, 2p+2) to rank p.
    xs = [torch.arange(2 * n * 3, dtype=torch.float32).reshape(2 * n, 3) + 100 * i for i in range(n)]
    out = hvd.alltoall(xs[r])
    assert isinstance(out, torch.Tensor)
    _close(out, torch.cat([xs[i][2 * r:2 * r + 2] for i in range(n)]))
    # Explicit splits: rank i sends (p + i + 1) rows to rank p.
    splits = [[p + i + 1 for p in range(n)] for i in range(n)]
    data = [torch.arange(sum(splits[i]) * 2, dtype=torch.int64).reshape(-1, 2) + 1000 * i for i in range(n)]
    out, received = hvd.alltoall(data[r], splits=torch.tensor(splits[r], dtype=torch.int32))
    expected_parts = [torch.split(data[i], splits[i])[r] for i in range(n)]
    assert torch.equal(out, torch.cat(expected_parts))
    assert received.dtype == torch.int32
    assert received.tolist() == [splits[i][r] for i in range(n)]
    out, received = hvd.synchronize(hvd.alltoall_async(data[r], splits=splits[r]))
    assert torch.equal(out, torch.cat(expected_parts))


def check_reducescatter(hvd):
    r, n = hvd.rank(), hvd.size()
    xs = [_rank_data(i, (4 * n, 2)) for i in range(n)]
    total = sum(xs)
    _close(hvd.reducescatter(xs[r]), (total / n)[4 * r:4 * r + 4])
    _close(hvd.reducescatter(xs[r], op=hvd.Sum), total[4 * r:4 * r + 4])
    # Uneven rows: earlier ranks get the remainder.
    ys = [_rank_data(i, (2 * n + 1, 3)) for i in range(n)]
    blocks = torch.split(sum(ys), [3] + [2] * (n - 1))
    _close(hvd.reducescatter(ys[r], op=hvd.Sum, name="uneven"), blocks[r])
    outs = hvd.grouped_reducescatter([xs[r], ys[r]], op=hvd.Sum)
    _close(outs[0], total[4 * r:4 * r + 4])
    _close(outs[1], blocks[r])
    _close(hvd.synchronize(hvd.reducescatter_async(xs[r], op=hvd.Sum, postscale_factor=0.5)),
           total[4 * r:4 * r + 4] * 0.5)


def _finite_difference_grad(loss_fn, xs, which, eps=1e-6):
    """d loss / d xs[which], by central differences in float64 (no collectives involved)."""
    base = [x.detach().double().clone() for x in xs]
    grad = torch.zeros_like(base[which])
    flat = base[which].view(-1)
    for i in range(flat.numel()):
        keep = flat[i].item()
        flat[i] = keep + eps
        up = loss_fn(base).item()
        flat[i] = keep - eps
        down = loss_fn(base).item()
        flat[i] = keep
        grad.view(-1)[i] = (up - down) / (2 * eps)
    return grad


def _local_loss(y, rank):
    # A different non-linear loss on every rank; the objective is their sum.
    w = _rank_data(50 + rank, y.shape, torch.float64)
    return (w * y).sum() + 0.5 * (y ** 2 * (rank + 1)).sum()


def check_allreduce_gradient(hvd):
    r, n = hvd.rank(), hvd.size()
    xs = [_rank_data(i, (2, 3), torch.float64) for i in range(n)]
    for op, combine in ((hvd.Average, lambda t: torch.stack(t).mean(0)), (hvd.Sum, lambda t: sum(t))):
        x = xs[r].clone().requires_grad_(True)
        _local_loss(hvd.allreduce(x, op=op), r).backward()
        expected = _finite_difference_grad(
            lambda t: sum(_local_loss(combine(t), i) for i in range(n)), xs, r)
        _close(x.grad, expected, rtol=1e-6, atol=1e-6)


def check_allreduce_records_only_what_autograd_sees(hvd):
    # allreduce and grouped_allreduce skip their autograd Function when nothing records the call;
    # the result must not tell the difference.
    r, n = hvd.rank(), hvd.size()
    xs = [_rank_data(i, (5,), torch.float64) for i in range(n)]
    plain = hvd.allreduce(xs[r], op=hvd.Sum)
    assert plain.grad_fn is None and not plain.requires_grad and plain is not xs[r]
    _close(plain, sum(xs))
    (grouped,) = hvd.grouped_allreduce([xs[r]], op=hvd.Sum)
    assert grouped.grad_fn is None and grouped is not xs[r]
    x = xs[r].clone().requires_grad_(True)
    assert type(hvd.allreduce(x).grad_fn).__name__ == "HorovodAllreduceBackward"
    assert type(hvd.grouped_allreduce([x])[0].grad_fn).__name__ == "HorovodGroupedAllreduceBackward"
    with torch.no_grad():
        assert hvd.allreduce(x).grad_fn is None
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():  # forward mode still reaches the Function, which refuses it
        with pytest.raises(NotImplementedError, match="jvp"):
            hvd.allreduce(fwAD.make_dual(xs[r], torch.ones(5, dtype=torch.float64)))


def check_data_collectives_record_only_what_autograd_sees(hvd):
    # allgather, broadcast, alltoall and reducescatter (single and grouped) skip their autograd
    # Function too when nothing records the call: same values, a new tensor, no graph; a tensor
    # that requires grad still gets its Function's backward.
    r, n = hvd.rank(), hvd.size()
    xs = [_rank_data(i, (2 * n, 3), torch.float64) for i in range(n)]
    plain = {
        "allgather": (hvd.allgather(xs[r]), torch.cat(xs)),
        "grouped_allgather": (hvd.grouped_allgather([xs[r]])[0], torch.cat(xs)),
        "broadcast": (hvd.broadcast(xs[r], root_rank=0), xs[0]),
        "alltoall": (hvd.alltoall(xs[r]), torch.cat([x[2 * r:2 * r + 2] for x in xs])),
        "reducescatter": (hvd.reducescatter(xs[r], op=hvd.Sum), sum(xs)[2 * r:2 * r + 2]),
        "grouped_reducescatter": (hvd.grouped_reducescatter([xs[r]], op=hvd.Sum)[0], sum(xs)[2 * r:2 * r + 2]),
    }
    for name, (got, want) in plain.items():
        assert got.grad_fn is None and not got.requires_grad and got is not xs[r], name
        _close(got, want)
    out, splits = hvd.alltoall(xs[r], splits=torch.tensor([2] * n, dtype=torch.int64))
    _close(out, plain["alltoall"][1])
    assert splits.dtype == torch.int64 and splits.tolist() == [2] * n
    x = xs[r].clone().requires_grad_(True)
    assert type(hvd.allgather(x).grad_fn).__name__ == "HorovodAllgatherBackward"
    assert type(hvd.broadcast(x, root_rank=0).grad_fn).__name__ == "HorovodBroadcastBackward"
    assert type(hvd.alltoall(x).grad_fn).__name__ == "HorovodAlltoallBackward"
    assert type(hvd.reducescatter(x).grad_fn).__name__ == "HorovodReducescatterBackward"
    with torch.no_grad():
        assert hvd.allgather(x).grad_fn is None and hvd.reducescatter(x).grad_fn is None


def check_blocking_data_collectives_report_mismatched_shapes(hvd):
    # The blocking paths raise the core's error naming the mismatch, and the next call works.
    from horovod_spark.exceptions import HorovodCollectiveError

    r, n = hvd.rank(), hvd.size()
    for name, call in (("allgather", lambda t: hvd.allgather(t, name="mm.ag")),
                       ("alltoall", lambda t: hvd.alltoall(t, name="mm.a2a")),
                       ("reducescatter", lambda t: hvd.reducescatter(t, op=hvd.Sum, name="mm.rs"))):
        with pytest.raises(HorovodCollectiveError, match="shape") as info:
            call(torch.ones(2 * n, 2 + r))
        assert name in str(info.value), str(info.value)
    assert hvd.allgather(torch.full((r + 1, 2), float(r)), name="mm.ag").shape == (n * (n + 1) // 2, 2)


def check_blocking_data_collectives_with_and_without_an_offered_output(hvd):
    # Blocking calls offer the core an output sized for the usual case (equal blocks): results of
    # that size land in it, any other size in memory of the core's; both must be exact, and every
    # call returns a tensor of its own.
    r, n = hvd.rank(), hvd.size()
    vec = torch.arange(6, dtype=torch.float32) + 10 * r
    first = hvd.allgather(vec, name="offer.ag")
    second = hvd.allgather(vec, name="offer.ag")
    assert torch.equal(first, torch.cat([torch.arange(6, dtype=torch.float32) + 10 * i for i in range(n)]))
    assert torch.equal(first, second) and first.data_ptr() != second.data_ptr()
    # Alltoall whose rank receives more or fewer rows than it sends: no offered output fits.
    splits = [[1 + i + 2 * p for p in range(n)] for i in range(n)]  # rank i sends 1 + i + 2p rows to p
    data = [torch.arange(sum(splits[i]), dtype=torch.int64) + 100 * i for i in range(n)]
    out, received = hvd.alltoall(data[r], splits=splits[r], name="offer.a2a")
    assert torch.equal(out, torch.cat([torch.split(data[i], splits[i])[r] for i in range(n)]))
    assert received.tolist() == [splits[i][r] for i in range(n)]
    # 1-D with uneven rows: rank 0 gets the remainder.
    total = sum(torch.arange(2.0 * n + 1) + i for i in range(n))
    _close(hvd.reducescatter(torch.arange(2.0 * n + 1) + r, op=hvd.Sum, name="offer.rs1d"),
           torch.split(total, [3] + [2] * (n - 1))[r])
    # Bad input through the blocking paths: the checked paths' errors.
    with pytest.raises(ValueError, match="out of range"):
        hvd.broadcast_(torch.ones(2), root_rank=n)
    with pytest.raises(ValueError, match="non-negative"):
        hvd.alltoall(torch.ones(2), splits=[3, -1])
    strided = torch.arange(8.0).reshape(4, 2)[:, 0] + r  # not contiguous: the staged path
    assert torch.equal(hvd.broadcast_(strided, root_rank=1, name="offer.strided"), torch.arange(0.0, 8.0, 2.0) + 1)


def check_allgather_gradient(hvd):
    r, n = hvd.rank(), hvd.size()
    xs = [_rank_data(i, (i + 1, 2), torch.float64) for i in range(n)]
    x = xs[r].clone().requires_grad_(True)
    _local_loss(hvd.allgather(x), r).backward()
    # Horovod's convention (HorovodAllgather.backward): the gradient of the mean of the ranks'
    # losses, i.e. the upstream gradients averaged, not summed.
    expected = _finite_difference_grad(lambda t: sum(_local_loss(torch.cat(t), i) for i in range(n)), xs, r) / n
    _close(x.grad, expected, rtol=1e-6, atol=1e-6)
    # grouped_allgather differentiates the same way, tensor by tensor.
    x = xs[r].clone().requires_grad_(True)
    z = (xs[r] * 2).clone().requires_grad_(True)
    gx, gz = hvd.grouped_allgather([x, z])
    (_local_loss(gx, r) + _local_loss(gz, r)).backward()
    _close(x.grad, expected, rtol=1e-6, atol=1e-6)


def check_other_gradients(hvd):
    r, n = hvd.rank(), hvd.size()
    # reducescatter: every rank's block gradient, concatenated, times the size for Sum and times 1
    # for Average (Horovod's HorovodReducescatter.backward), times the scale factors.
    upstream = [_rank_data(70 + i, (2, 2), torch.float64) for i in range(n)]
    for op, pre, post, factor in ((hvd.Sum, 1.0, 1.0, n), (hvd.Average, 1.0, 1.0, 1), (hvd.Sum, 0.5, 3.0, 1.5 * n)):
        x = _rank_data(r, (2 * n, 2), torch.float64).requires_grad_(True)
        out = hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post)
        (out * upstream[r]).sum().backward()
        _close(x.grad, torch.cat(upstream) * factor)
    # alltoall: gradients travel back to the rows' senders.
    x = _rank_data(r, (2 * n, 3), torch.float64).requires_grad_(True)
    out = hvd.alltoall(x)
    upstream = [_rank_data(80 + i, (2 * n, 3), torch.float64) for i in range(n)]
    (out * upstream[r]).sum().backward()
    _close(x.grad, torch.cat([upstream[p][2 * r:2 * r + 2] for p in range(n)]))
    # broadcast: Horovod's convention, the average on the root and zero elsewhere.
    x = _rank_data(r, (3,), torch.float64).requires_grad_(True)
    out = hvd.broadcast(x, 0)
    upstream = [_rank_data(90 + i, (3,), torch.float64) for i in range(n)]
    (out * upstream[r]).sum().backward()
    _close(x.grad, sum(upstream) / n if r == 0 else torch.zeros(3, dtype=torch.float64))


def check_compression_fp16(hvd):
    r, n = hvd.rank(), hvd.size()
    xs = [_rank_data(i, (16,)) for i in range(n)]
    out = hvd.allreduce(xs[r], op=hvd.Sum, compression=hvd.Compression.fp16)
    assert out.dtype == torch.float32
    _close(out, sum(xs), rtol=2e-3, atol=2e-2)
    compressed, ctx = hvd.Compression.fp16.compress(xs[r])
    assert compressed.dtype == torch.float16
    assert hvd.Compression.fp16.decompress(compressed, ctx).dtype == torch.float32
    ints = torch.arange(4)
    same, ctx = hvd.Compression.fp16.compress(ints)
    assert same is ints and hvd.Compression.fp16.decompress(same, ctx) is ints
    assert hvd.Compression.none.compress(xs[r])[0] is xs[r]
    outs = hvd.grouped_allreduce([xs[r], xs[r].double()], op=hvd.Sum, compression=hvd.Compression.fp16)
    assert [o.dtype for o in outs] == [torch.float32, torch.float64]
    _close(outs[1], sum(xs).double(), rtol=2e-3, atol=2e-2)


def check_objects(hvd):
    r, n = hvd.rank(), hvd.size()
    payload = {"rank": r, "nested": [1, (2, 3)], "fn": (lambda v: v * 10 + r)}
    got = hvd.broadcast_object(payload if r == 0 else None, root_rank=0)
    assert got["rank"] == 0 and got["nested"] == [1, (2, 3)] and got["fn"](2) == 20
    got = hvd.broadcast_object("from-%d" % r, root_rank=n - 1, name="named")
    assert got == "from-%d" % (n - 1)
    gathered = hvd.allgather_object({"rank": r, "blob": "x" * (r * 1000)})
    assert [g["rank"] for g in gathered] == list(range(n))
    assert [len(g["blob"]) for g in gathered] == [i * 1000 for i in range(n)]
    assert hvd.allgather_object(None) == [None] * n


HOROVOD_DTYPES = (torch.uint8, torch.int8, torch.uint16, torch.int16, torch.int32, torch.int64, torch.float16,
                  torch.bfloat16, torch.float32, torch.float64, torch.bool)


def _small_values(rank, dtype):
    """Two rows of small values, exact in every dtype (sums and products of 2 ranks too)."""
    values = (np.arange(4).reshape(2, 2) + rank) % 5 + 1
    return (values % 2).astype(bool) if dtype == torch.bool else values.astype(np.float64)


def _as_numpy(tensor):
    return tensor.numpy() if tensor.dtype == torch.bool else tensor.to(torch.float64).numpy()


def check_every_horovod_dtype_in_every_collective(hvd):
    r, n = hvd.rank(), hvd.size()
    ops = {"Sum": hvd.Sum, "Min": hvd.Min, "Max": hvd.Max, "Product": hvd.Product, "Average": hvd.Average}
    for dtype in HOROVOD_DTYPES:
        xs = [_small_values(i, dtype) for i in range(n)]
        x = torch.from_numpy(xs[r]).to(dtype)
        for op_name, op in ops.items():
            if dtype == torch.bool and op_name == "Average":
                continue  # undefined for bool, as in Horovod
            if dtype == torch.bool:
                want = np.logical_or.reduce(xs) if op_name in ("Sum", "Max") else np.logical_and.reduce(xs)
            else:
                want = {"Sum": sum(xs), "Min": np.minimum.reduce(xs), "Max": np.maximum.reduce(xs),
                        "Product": np.prod(xs, axis=0), "Average": sum(xs) / n}[op_name]
                if op_name == "Average" and not dtype.is_floating_point:
                    want = np.trunc(want)  # integer Average truncates toward zero, as Horovod's
            out = hvd.allreduce(x, op=op)
            assert out.dtype == dtype and np.array_equal(_as_numpy(out), want), (dtype, op_name, out, want)
            grouped = hvd.grouped_allreduce([x, x], op=op)
            assert all(np.array_equal(_as_numpy(g), want) for g in grouped), (dtype, op_name, grouped)
            scattered = hvd.reducescatter(x, op=op)
            assert scattered.dtype == dtype and np.array_equal(_as_numpy(scattered), want[r:r + 1]), (dtype, op_name)
        gathered = hvd.allgather(x)
        assert gathered.dtype == dtype and np.array_equal(_as_numpy(gathered), np.concatenate(xs)), dtype
        assert all(np.array_equal(_as_numpy(g), np.concatenate(xs)) for g in hvd.grouped_allgather([x, x])), dtype
        root = n - 1
        assert np.array_equal(_as_numpy(hvd.broadcast(x, root_rank=root)), xs[root]), dtype
        inplace = x.clone()
        hvd.broadcast_(inplace, root_rank=root)
        assert np.array_equal(_as_numpy(inplace), xs[root]), dtype
        received = hvd.alltoall(x)
        assert received.dtype == dtype and np.array_equal(_as_numpy(received), np.stack([v[r] for v in xs])), dtype


def check_unsupported_dtypes(hvd):
    for dtype in (torch.uint32, torch.complex64):
        with pytest.raises(TypeError) as info:
            hvd.allreduce(torch.zeros(2, dtype=dtype))
        message = str(info.value)
        assert str(dtype) in message and "torch.float32" in message and "torch.bfloat16" in message
    with pytest.raises(TypeError):
        hvd.allgather_async(torch.zeros(2, dtype=torch.complex64))
    with pytest.raises(ValueError):
        hvd.allreduce(torch.zeros(3).to_sparse())


def check_collective_error_reaches_every_rank(hvd):
    r = hvd.rank()
    # Mismatched shapes across ranks: an error naming the tensor on every rank, not a hang.
    with pytest.raises(ValueError) as info:
        hvd.allreduce(torch.zeros(2 + r), name="mismatch")
    assert "mismatch" in str(info.value)
    # Later collectives still work.
    _close(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(hvd.size())))


def check_barrier_join_and_queries(hvd):
    r, n = hvd.rank(), hvd.size()
    assert hvd.is_initialized() and n == 2 and hvd.local_size() == n and hvd.local_rank() == r
    assert hvd.cross_size() == 1 and hvd.cross_rank() == 0
    assert hvd.cuda_built() is False and hvd.nccl_built() is False
    assert hvd.global_process_set.size() == n
    hvd.barrier()
    last = hvd.join()
    assert isinstance(last, int) and 0 <= last < n


TWO_RANK_CHECKS = [name for name in list(globals()) if name.startswith("check_")]


@pytest.fixture(scope="module")
def two_rank_results():
    return run_local(_run_checks, args=(TWO_RANK_CHECKS,), num_proc=2, timeout=RANK_TIMEOUT)


@pytest.mark.parametrize("check", TWO_RANK_CHECKS)
def test_two_ranks(two_rank_results, check):
    for rank, results in enumerate(two_rank_results):
        assert results[check] is None, "rank %d:\n%s" % (rank, results[check])


# --- process sets (3 ranks) -------------------------------------------------------------------------

def _process_set_ranks():
    import horovod_spark.torch as hvd

    evens = hvd.ProcessSet([0, 2])
    hvd.init(process_sets=[evens])
    r = hvd.rank()
    odd_pair = hvd.add_process_set({1, 2})  # any iterable of ranks, as in Horovod
    x = torch.full((3,), float(r + 1))
    result = {}
    if evens.included():
        result["evens_sum"] = hvd.allreduce(x, op=hvd.Sum, process_set=evens).tolist()
        result["evens_gather"] = hvd.allgather(x[:1] * 10, process_set=evens).tolist()
        # root_rank is a global rank, as in Horovod: 2 is the set's second member.
        result["evens_bcast"] = hvd.broadcast(x, 2, process_set=evens).tolist()
        try:
            hvd.broadcast(x, 1, process_set=evens)
            result["evens_bad_root"] = "no error"
        except ValueError as exc:
            result["evens_bad_root"] = str(exc)
        result["evens_objects"] = hvd.allgather_object(r, process_set=evens)
        result["evens_object"] = hvd.broadcast_object("root-%d" % r, root_rank=0, process_set=evens)
        result["evens_rs"] = hvd.reducescatter(torch.arange(4.0) + r, op=hvd.Sum, process_set=evens).tolist()
        hvd.barrier(process_set=evens)
    if odd_pair.included():
        result["pair_avg"] = hvd.allreduce(x, process_set=odd_pair).tolist()
        grad_in = x.clone().requires_grad_(True)
        hvd.allreduce(grad_in, op=hvd.Sum, process_set=odd_pair).sum().backward()
        result["pair_grad"] = grad_in.grad.tolist()
        result["pair_object"] = hvd.broadcast_object("root-%d" % r, root_rank=2, process_set=odd_pair)
        # broadcast's gradient reaches the root only (its global rank).
        grad_in = x.clone().requires_grad_(True)
        hvd.broadcast(grad_in, 2, process_set=odd_pair).sum().backward()
        result["pair_bcast_grad"] = grad_in.grad.tolist()
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1 * r, momentum=0.9)
        hvd.broadcast_optimizer_state(opt, root_rank=2, process_set=odd_pair)
        result["pair_lr"] = opt.param_groups[0]["lr"]
    result["global_sum"] = hvd.allreduce(x, op=hvd.Sum).tolist()
    result["remove_global"] = hvd.remove_process_set(hvd.global_process_set)
    hvd.remove_process_set(odd_pair)
    result["remove_again"] = hvd.remove_process_set(odd_pair)
    unregistered = hvd.ProcessSet([0, 1])
    try:
        hvd.allreduce(x, process_set=unregistered)
        result["unregistered"] = "no error"
    except ValueError as exc:
        result["unregistered"] = "ValueError" if "not registered" in str(exc) else str(exc)
    hvd.shutdown()
    return result


def test_process_sets_three_ranks():
    results = run_local(_process_set_ranks, num_proc=3, timeout=RANK_TIMEOUT)
    for r in (0, 2):
        assert results[r]["evens_sum"] == [4.0] * 3
        assert results[r]["evens_gather"] == [10.0, 30.0]
        assert results[r]["evens_bcast"] == [3.0] * 3
        assert results[r]["evens_objects"] == [0, 2]
        assert results[r]["evens_object"] == "root-0"
        assert "not a member of the process set [0, 2]" in results[r]["evens_bad_root"]
    assert results[0]["evens_rs"] == [2.0, 4.0]
    assert results[2]["evens_rs"] == [6.0, 8.0]
    assert "evens_sum" not in results[1]
    for r in (1, 2):
        assert results[r]["pair_avg"] == [2.5] * 3
        assert results[r]["pair_grad"] == [2.0] * 3
        assert results[r]["pair_object"] == "root-2"
        assert results[r]["pair_bcast_grad"] == ([1.0] * 3 if r == 2 else [0.0] * 3)
        assert results[r]["pair_lr"] == 0.2
    assert "pair_avg" not in results[0]
    for r in range(3):
        assert results[r]["global_sum"] == [6.0] * 3
        assert results[r]["unregistered"] == "ValueError"
        assert results[r]["remove_global"] is False and results[r]["remove_again"] is False
