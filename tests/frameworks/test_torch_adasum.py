"""allreduce(op=hvd.Adasum) and DistributedOptimizer(op=hvd.Adasum) on real ranks, against Adasum
written out in numpy (support/adasum_reference.py): 2 and 4 ranks (Horovod's trees) and 3 (the
extension to other counts that docs/getting_started.md describes)."""
import numpy as np
import pytest
import torch
from support.adasum_reference import adasum_pair, adasum_ranks

from horovod_spark.launcher import run_local

RANK_TIMEOUT = 180
SHAPES = [(7,), (3, 5), (1000,)]


def _data(rank, shape, dtype, kind):
    gen = np.random.default_rng(100 * rank + len(shape))
    base = np.random.default_rng(7).normal(size=shape)
    if kind == "random":
        values = gen.normal(size=shape) * (rank + 1)
    elif kind == "similar":  # nearly parallel updates: Adasum is close to their average
        values = base + 0.01 * gen.normal(size=shape)
    else:  # "zero" on rank 1: a rank without an update leaves the others' as they are
        values = np.zeros(shape) if rank == 1 else gen.normal(size=shape)
    return values.astype(dtype)


def _allreduce_results():
    import horovod_spark.torch as hvd

    hvd.init()
    r, n = hvd.rank(), hvd.size()
    out = {}
    for dtype in ("float32", "float64"):
        for kind in ("random", "similar", "zero"):
            for shape in SHAPES:
                x = torch.from_numpy(_data(r, shape, dtype, kind))
                out[(dtype, kind, shape)] = hvd.allreduce(x, op=hvd.Adasum).numpy()
        # a group: each member is its own vector, not a slice of one concatenated vector
        xs = [torch.from_numpy(_data(r, shape, dtype, "random")) for shape in SHAPES]
        out[(dtype, "group")] = [t.numpy() for t in hvd.grouped_allreduce(xs, op=hvd.Adasum)]
        x = torch.from_numpy(_data(r, (9,), dtype, "random"))
        out[(dtype, "scaled")] = hvd.allreduce(x, op=hvd.Adasum, prescale_factor=2.0, postscale_factor=0.25).numpy()
        inplace = x.clone()
        hvd.synchronize(hvd.allreduce_async_(inplace, op=hvd.Adasum, name="adasum.inplace"))
        out[(dtype, "inplace")] = inplace.numpy()
    # orthogonal updates add up; equal ones are not multiplied
    out["orthogonal"] = hvd.allreduce(torch.eye(n, dtype=torch.float64)[r], op=hvd.Adasum).numpy()
    out["equal"] = hvd.allreduce(torch.full((5,), 3.0), op=hvd.Adasum).numpy()
    out["half"] = hvd.allreduce(torch.from_numpy(_data(r, (64,), "float16", "random")), op=hvd.Adasum).numpy()
    try:
        hvd.allreduce(torch.ones(3, dtype=torch.int32), op=hvd.Adasum)
        out["int"] = "no error"
    except ValueError as exc:
        out["int"] = str(exc)
    hvd.shutdown()
    return out


def _as_list(value):
    return value if isinstance(value, list) else [value]


def _tolerance(dtype):
    return {"float32": 2e-6, "float64": 1e-12, "float16": 2e-3}[dtype]


@pytest.mark.parametrize("num_proc", [2, 3, 4])
def test_allreduce_adasum_matches_numpy(num_proc):
    results = run_local(_allreduce_results, num_proc=num_proc, timeout=RANK_TIMEOUT)
    for key, got in results[0].items():  # every rank holds the same bits
        for r in range(1, num_proc):
            for mine, theirs in zip(_as_list(got), _as_list(results[r][key])):
                np.testing.assert_array_equal(np.asarray(theirs), np.asarray(mine), err_msg=str(key))
    got = results[0]
    for dtype in ("float32", "float64"):
        tol = _tolerance(dtype)
        for kind in ("random", "similar", "zero"):
            for shape in SHAPES:
                expected = adasum_ranks([_data(r, shape, dtype, kind) for r in range(num_proc)])
                assert got[(dtype, kind, shape)].dtype == np.dtype(dtype)
                np.testing.assert_allclose(got[(dtype, kind, shape)], expected, rtol=tol, atol=tol,
                                           err_msg=str((dtype, kind, shape)))
        for member, shape in zip(got[(dtype, "group")], SHAPES):
            expected = adasum_ranks([_data(r, shape, dtype, "random") for r in range(num_proc)])
            np.testing.assert_allclose(member, expected, rtol=tol, atol=tol, err_msg=str(shape))
        x = [_data(r, (9,), dtype, "random") for r in range(num_proc)]
        np.testing.assert_allclose(got[(dtype, "scaled")], adasum_ranks([2 * v for v in x]) * 0.25, rtol=tol, atol=tol)
        np.testing.assert_allclose(got[(dtype, "inplace")], adasum_ranks(x), rtol=tol, atol=tol)
    np.testing.assert_allclose(got["orthogonal"], np.ones(num_proc), rtol=1e-15)
    np.testing.assert_allclose(got["equal"], np.full(5, 3.0), rtol=1e-6)
    np.testing.assert_allclose(got["half"].astype(np.float64),
                               adasum_ranks([_data(r, (64,), "float16", "random") for r in range(num_proc)]),
                               rtol=_tolerance("float16"), atol=_tolerance("float16"))
    assert "floating-point" in got["int"] and "int32" in got["int"], got["int"]


def test_three_ranks_combine_as_a_left_aligned_tree():
    """The extension to a number of ranks that is not a power of two, spelled out for 3 ranks."""
    g = [np.array([1.0, 0.0, 2.0]), np.array([0.5, 1.0, -1.0]), np.array([3.0, -2.0, 0.0])]
    np.testing.assert_allclose(adasum_ranks(g), adasum_pair(adasum_pair(g[0], g[1]), g[2]))


def _optimizer_run(steps, lr, momentum):
    import horovod_spark.torch as hvd

    hvd.init()
    r = hvd.rank()
    torch.manual_seed(0)  # the same initial model everywhere
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    unused = torch.nn.Parameter(torch.ones(2))  # no gradient on any rank: its update is zero
    opt = torch.optim.SGD(list(model.parameters()) + [unused], lr=lr, momentum=momentum)
    named = list(model.named_parameters()) + [("unused", unused)]
    opt = hvd.DistributedOptimizer(opt, named_parameters=named, op=hvd.Adasum)
    params = [p for _, p in named]
    gen = torch.Generator().manual_seed(1 + r)
    record = []
    for _ in range(steps):
        before = [p.detach().clone().numpy() for p in params]
        x = torch.randn(8, 4, generator=gen)
        y = torch.randn(8, 2, generator=gen)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        grads = [None if p.grad is None else p.grad.clone().numpy() for p in params]
        opt.step()
        record.append((before, grads, [p.detach().clone().numpy() for p in params]))
    hvd.shutdown()
    return record


@pytest.mark.parametrize("num_proc", [2, 3])
def test_distributed_optimizer_adasum_combines_each_ranks_update(num_proc):
    """Every rank steps the wrapped optimizer (SGD with momentum) on its own gradient; the change
    in each parameter is combined with Adasum and applied on every rank, as Horovod's delta
    optimizer does."""
    lr, momentum, steps = 0.1, 0.9, 3
    records = run_local(_optimizer_run, args=(steps, lr, momentum), num_proc=num_proc, timeout=RANK_TIMEOUT)
    nparams = len(records[0][0][0])
    buffers = [[None] * nparams for _ in range(num_proc)]  # each rank's momentum buffer, per parameter
    for step in range(steps):
        before = records[0][step][0]
        for r in range(1, num_proc):  # every rank starts each step from the same parameters
            for a, b in zip(records[r][step][0], before):
                np.testing.assert_array_equal(a, b)
        for i in range(nparams):
            deltas = []
            for r in range(num_proc):
                grad = records[r][step][1][i]
                if grad is None:
                    deltas.append(np.zeros_like(before[i]))
                    continue
                buf = grad if buffers[r][i] is None else momentum * buffers[r][i] + grad
                buffers[r][i] = buf
                deltas.append((-lr * buf).astype(np.float32))
            expected = before[i] + adasum_ranks(deltas)
            for r in range(num_proc):
                np.testing.assert_allclose(records[r][step][2][i], expected, rtol=1e-5, atol=1e-6,
                                           err_msg="step %d parameter %d rank %d" % (step, i, r))
        assert records[0][step][1][-1] is None  # the unused parameter never had a gradient
        np.testing.assert_array_equal(records[0][step][2][-1], np.ones(2, np.float32))
