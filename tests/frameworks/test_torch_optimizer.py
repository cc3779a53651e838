"""DistributedOptimizer, broadcast_parameters / broadcast_optimizer_state and SyncBatchNorm on real
local ranks.

The reference for distributed training is one process training on the concatenated batches; each
rank computes that reference itself (same seeds, no collectives) and compares. One run_local runs
every check; each is reported as its own parametrized test. Every check runs with the gradients'
allreduces started from their hooks during backward and, again, all at step()
(horovod_spark/torch/optimizer_launch.py chooses between them by the machine).
"""
import os
import sys
import traceback
import warnings

import pytest
import torch

from horovod_spark.launcher import run_local

RANK_TIMEOUT = 150
STEPS = 4


LAUNCH_MODES = {"from hooks": False, "at step": True}


def _run_checks(names, launch_at_step):
    import horovod_spark.torch as hvd
    from horovod_spark.torch import optimizer

    optimizer.launch_at_step = lambda params: launch_at_step
    hvd.init()
    torch.set_num_threads(1)
    module = sys.modules[__name__]
    results = {}
    for name in names:
        try:
            results[name] = getattr(module, name)(hvd)
        except (Exception, pytest.fail.Exception):  # pytest.fail/raises failures are BaseExceptions
            results[name] = {"error": traceback.format_exc()}
            sys.stderr.write("rank %d: %s failed\n%s" % (hvd.rank(), name, results[name]["error"]))
    hvd.shutdown()
    return results


def _close(actual, expected, **kw):
    torch.testing.assert_close(actual, expected, **kw)


def _mlp(dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).to(dtype)


def _batches(dtype=torch.float64, steps=STEPS, global_batch=8):
    gen = torch.Generator().manual_seed(7)
    return [(torch.randn(global_batch, 4, generator=gen, dtype=dtype),
             torch.randn(global_batch, 2, generator=gen, dtype=dtype)) for _ in range(steps)]


def _shard(tensor, rank, size):
    return tensor.chunk(size)[rank]


def _flat_params(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _train_reference(make_optimizer, dtype=torch.float64, steps=STEPS):
    model = _mlp(dtype)
    opt = make_optimizer(model.parameters())
    for x, y in _batches(dtype, steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return _flat_params(model)


def _train_distributed(hvd, make_optimizer, dtype=torch.float64, steps=STEPS, passes=1, **kwargs):
    r, n = hvd.rank(), hvd.size()
    model = _mlp(dtype)
    opt = hvd.DistributedOptimizer(make_optimizer(model.parameters()),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=passes, **kwargs)
    for x, y in _batches(dtype, steps):
        opt.zero_grad()
        xs, ys = _shard(x, r, n), _shard(y, r, n)
        # Local accumulation: each micro-batch contributes its share of the local mean loss.
        for xm, ym in zip(xs.chunk(passes), ys.chunk(passes)):
            (torch.nn.functional.mse_loss(model(xm), ym) / passes).backward()
        opt.step()
    return opt, _flat_params(model)


def _sgd(params):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01)


def _adam(params):
    return torch.optim.Adam(params, lr=0.01)


def _check_matches_reference(hvd, make_optimizer, dtype=torch.float64, tol=1e-10, **kwargs):
    _, params = _train_distributed(hvd, make_optimizer, dtype, **kwargs)
    reference = _train_reference(make_optimizer, dtype)
    assert not torch.equal(reference, _flat_params(_mlp(dtype))), "training did not move the parameters"
    _close(params, reference, rtol=tol, atol=tol)
    return {"params": params}


# --- checks (run on every rank; the returned params are compared across ranks) ---------------------

def check_sgd_matches_single_process(hvd):
    return _check_matches_reference(hvd, _sgd)


def check_adam_matches_single_process(hvd):
    return _check_matches_reference(hvd, _adam)


def check_sgd_float32(hvd):
    return _check_matches_reference(hvd, _sgd, dtype=torch.float32, tol=1e-5)


def check_backward_passes_per_step(hvd):
    return _check_matches_reference(hvd, _sgd, passes=2)


def check_groups(hvd):
    _check_matches_reference(hvd, _adam, groups=2)
    _check_matches_reference(hvd, _adam, num_groups=3)
    model = _mlp()
    weights = [model[0].weight, model[2].weight]
    # Explicit groups: the biases are left out and reduced one by one.
    opt = hvd.DistributedOptimizer(_sgd(model.parameters()), named_parameters=model.named_parameters(),
                                   groups=[weights])
    for x, y in _batches(steps=2):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(_shard(x, hvd.rank(), hvd.size())),
                                     _shard(y, hvd.rank(), hvd.size())).backward()
        opt.step()
    _close(_flat_params(model), _train_reference(_sgd, steps=2), rtol=1e-10, atol=1e-10)
    return {"params": _flat_params(model)}


def check_predivide_and_compression(hvd):
    _check_matches_reference(hvd, _sgd, gradient_predivide_factor=2.0)
    return _check_matches_reference(hvd, _sgd, dtype=torch.float32, tol=2e-3,
                                    compression=hvd.Compression.fp16)


def _embedding_model():
    torch.manual_seed(5)
    return torch.nn.ModuleDict({"emb": torch.nn.Embedding(10, 3, sparse=True),
                                "out": torch.nn.Linear(3, 1)}).double()


def _train_embedding(model, opt, ids, targets):
    for _ in range(3):
        opt.zero_grad()
        pred = model["out"](model["emb"](ids)).squeeze(-1)
        torch.nn.functional.mse_loss(pred, targets).backward()
        opt.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def check_sparse_gradients(hvd):
    r, n = hvd.rank(), hvd.size()
    gen = torch.Generator().manual_seed(11)
    ids = torch.randint(0, 10, (8,), generator=gen)
    targets = torch.randn(8, generator=gen, dtype=torch.float64)
    reference_model = _embedding_model()
    reference = _train_embedding(reference_model, torch.optim.SGD(reference_model.parameters(), lr=0.5),
                                 ids, targets)
    out = {}
    for as_dense in (False, True):
        model = _embedding_model()
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                       named_parameters=model.named_parameters(), sparse_as_dense=as_dense)
        params = _train_embedding(model, opt, _shard(ids, r, n), _shard(targets, r, n))
        _close(params, reference, rtol=1e-10, atol=1e-10)
        out["as_dense=%s" % as_dense] = params
    return out


def check_unused_parameter_on_one_rank(hvd):
    # Rank 1 never uses the extra layer; its gradient still joins the allreduce (as zeros).
    r = hvd.rank()
    torch.manual_seed(3)
    main, extra = torch.nn.Linear(3, 1).double(), torch.nn.Linear(3, 1).double()
    params = list(main.named_parameters()) + [("extra." + k, v) for k, v in extra.named_parameters()]
    opt = hvd.DistributedOptimizer(torch.optim.SGD([p for _, p in params], lr=1.0), named_parameters=params)
    x = torch.ones(2, 3, dtype=torch.float64)
    loss = main(x).sum() + (extra(x).sum() if r == 0 else 0.0)
    loss.backward()
    expected_extra_grad = torch.full((1, 3), 2.0, dtype=torch.float64) / hvd.size()
    before = extra.weight.detach().clone()
    opt.step()
    _close(before - extra.weight.detach(), expected_extra_grad)
    return {"params": torch.cat([_flat_params(main), _flat_params(extra)])}


def check_optimizer_behaviour(hvd):
    model = _mlp()
    base = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
    assert isinstance(opt, torch.optim.SGD) and type(opt).__name__ == "SGD"
    assert opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[0]["momentum"] == 0.9
    x, y = _batches(steps=1)[0]
    torch.nn.functional.mse_loss(model(x), y).backward()
    with pytest.raises(AssertionError):
        opt.zero_grad()  # allreduces are in flight
    opt.synchronize()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with opt.skip_synchronize():
            opt.step()
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.synchronize()
    with pytest.warns(UserWarning, match="skip_synchronize"):
        opt.step()
    state = opt.state_dict()
    assert len(state["state"]) == 4
    opt.load_state_dict(state)
    # backward_passes_per_step=1: a second backward before step() is an error. (On a throwaway
    # model: the second backward adds into gradients whose allreduce may still be running.)
    other = _mlp()
    other_opt = hvd.DistributedOptimizer(_sgd(other.parameters()), named_parameters=[
        ("other." + k, v) for k, v in other.named_parameters()])
    torch.nn.functional.mse_loss(other(x), y).backward()
    with pytest.raises(AssertionError, match="backward_passes_per_step"):
        torch.nn.functional.mse_loss(other(x), y).backward()
    other_opt.synchronize()
    opt.zero_grad()
    # An LR scheduler drives the wrapped optimizer like any other.
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    scheduler.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)
    return {"params": _flat_params(model)}


def check_named_parameters_validation(hvd):
    model = _mlp()
    named = list(model.named_parameters())
    with pytest.raises(ValueError, match="unique"):
        hvd.DistributedOptimizer(_sgd(model.parameters()), named_parameters=[("w", p) for _, p in named])
    with pytest.raises(ValueError, match="not named"):
        hvd.DistributedOptimizer(_sgd(model.parameters()), named_parameters=named[:2])
    with pytest.raises(ValueError, match="tuples"):
        hvd.DistributedOptimizer(_sgd(model.parameters()), named_parameters=[p for _, p in named])
    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        hvd.DistributedOptimizer(_sgd(model.parameters()), op=hvd.Sum, gradient_predivide_factor=2.0)
    with pytest.raises(ValueError, match="backward_passes_per_step must be > 0"):
        hvd.DistributedOptimizer(_sgd(model.parameters()), named_parameters=named, backward_passes_per_step=0)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        hvd.broadcast_optimizer_state(_sgd(model.parameters()), 0, hvd.global_process_set)
    return {}


def check_sparse_as_dense_keeps_sparse_gradients(hvd):
    r, n = hvd.rank(), hvd.size()
    # As in Horovod: a dense copy is averaged and p.grad gets it back sparse, so SparseAdam steps.
    torch.manual_seed(5)
    emb = torch.nn.Embedding(6, 2, sparse=True)
    opt = hvd.DistributedOptimizer(torch.optim.SparseAdam(emb.parameters(), lr=0.1),
                                   named_parameters=emb.named_parameters(), sparse_as_dense=True)
    hvd.broadcast_parameters(emb.state_dict(), root_rank=0)
    emb(torch.tensor([r, 5])).sum().backward()
    opt.synchronize()
    grad = emb.weight.grad
    assert grad.is_sparse
    expected = torch.zeros(6, 2)
    for i in range(n):
        expected[i] += 1.0 / n
    expected[5] += 1.0
    _close(grad.to_dense(), expected)
    with opt.skip_synchronize():
        opt.step()
    return {"weight": emb.weight.detach().clone()}


def check_broadcast_optimizer_state_in_place(hvd):
    r = hvd.rank()
    # A scheduler built on the optimizer before wrapping holds the same group dicts: after the
    # broadcast it must see the root's lr on every rank (Horovod updates the groups in place).
    model = _mlp()
    base = torch.optim.SGD(model.parameters(), lr=0.1 * (r + 1), momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(base, step_size=1, gamma=0.5)
    opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
    for x, y in _batches(steps=1):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    momentum = opt.state[next(model.parameters())]["momentum_buffer"]
    hvd.broadcast_optimizer_state(opt, root_rank=0, model=model)
    assert opt.state[next(model.parameters())]["momentum_buffer"] is momentum  # updated in place
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the scheduler never saw base.step() itself run)
        scheduler.step()
    assert opt.param_groups[0]["lr"] == base.param_groups[0]["lr"] == 0.05
    # model= names sparse embeddings: a fresh SGD state starts from sparse zero gradients there,
    # so the momentum buffers are sparse, and arrive sparse.
    emb = torch.nn.Sequential(torch.nn.Embedding(4, 2, sparse=True))
    sgd = torch.optim.SGD(emb.parameters(), lr=0.1, momentum=0.9)
    hvd.broadcast_optimizer_state(sgd, 0, emb)
    emb_momentum = sgd.state[emb[0].weight]["momentum_buffer"]
    assert emb_momentum.is_sparse
    return {"momentum": momentum.clone(), "emb_momentum": emb_momentum.to_dense()}


def check_broadcast_parameters_and_optimizer_state(hvd):
    r = hvd.rank()
    # Different models and optimizer states per rank; rank 0 has trained, rank 1 is fresh.
    model = _mlp(seed=10 + r)
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (r + 1), betas=(0.8, 0.9 + 0.05 * r))
    if r == 0:
        for x, y in _batches(steps=2):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    state = opt.state_dict()
    assert state["param_groups"][0]["lr"] == 0.01 and state["param_groups"][0]["betas"] == (0.8, 0.9)
    assert len(state["state"]) == 4 and float(state["state"][0]["step"]) == 2.0
    # One more identical local step keeps the ranks identical (compared across ranks by the test).
    x, y = _batches(steps=3)[2]
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    named = _mlp(seed=20 + r)
    hvd.broadcast_parameters(named.named_parameters(), root_rank=1)
    return {"params": _flat_params(model),
            "exp_avg": torch.cat([s["exp_avg"].reshape(-1) for s in opt.state_dict()["state"].values()]),
            "named": _flat_params(named)}


def check_broadcast_fresh_optimizer_state(hvd):
    r = hvd.rank()
    # Both ranks fresh: the root initializes its state with a zero-gradient step (as Horovod does)
    # without moving the parameters, and the DistributedOptimizer's allreduces are not triggered.
    model = _mlp()
    before = _flat_params(model).clone()
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1 * (r + 1), momentum=0.9, weight_decay=0.1),
        named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert torch.equal(_flat_params(model), before)
    assert opt.param_groups[0]["lr"] == 0.1
    assert len(opt.state_dict()["state"]) == 4
    stateless = torch.optim.SGD(model.parameters(), lr=0.5 + r)
    hvd.broadcast_optimizer_state(stateless, root_rank=1)
    assert stateless.param_groups[0]["lr"] == 1.5
    return {}


def _bn_inputs(rank, rows):
    gen = torch.Generator().manual_seed(300 + rank)
    return (torch.randn(rows, 3, 2, 2, generator=gen, dtype=torch.float64) * (rank + 1) + rank,
            torch.randn(rows, 3, 2, 2, generator=gen, dtype=torch.float64))


def check_sync_batch_norm(hvd):
    r, n = hvd.rank(), hvd.size()
    rows = [3, 5]  # uneven per-rank batches
    inputs = [_bn_inputs(i, rows[i]) for i in range(n)]
    sync = hvd.SyncBatchNorm(3, momentum=0.3).double()
    reference = torch.nn.BatchNorm2d(3, momentum=0.3).double()
    with torch.no_grad():
        for bn in (sync, reference):
            bn.weight.copy_(torch.tensor([1.0, 2.0, -0.5]))
            bn.bias.copy_(torch.tensor([0.1, 0.0, 0.3]))
    for _ in range(2):
        x = inputs[r][0].clone().requires_grad_(True)
        y = sync(x)
        (y * inputs[r][1]).sum().backward()

        x_all = torch.cat([inp[0] for inp in inputs]).requires_grad_(True)
        y_all = reference(x_all)
        (y_all * torch.cat([inp[1] for inp in inputs])).sum().backward()

        start = sum(rows[:r])
        _close(y, y_all[start:start + rows[r]].detach())
        _close(x.grad, x_all.grad[start:start + rows[r]])
    _close(sync.running_mean, reference.running_mean)
    _close(sync.running_var, reference.running_var)
    assert int(sync.num_batches_tracked) == 2
    # Parameter gradients are local; their sum over ranks is the single-process gradient.
    _close(hvd.allreduce(sync.weight.grad, op=hvd.Sum), reference.weight.grad)
    _close(hvd.allreduce(sync.bias.grad, op=hvd.Sum), reference.bias.grad)
    sync.eval()
    reference.eval()
    _close(sync(inputs[r][0]), reference(inputs[r][0]))
    # Without running statistics, eval mode normalizes with every rank's batch (as Horovod).
    stateless = hvd.SyncBatchNorm(3, track_running_stats=False).double().eval()
    reference = torch.nn.BatchNorm2d(3, track_running_stats=False).double().eval()
    start = sum(rows[:r])
    _close(stateless(inputs[r][0]), reference(torch.cat([inp[0] for inp in inputs]))[start:start + rows[r]])
    return {"running_mean": sync.running_mean.clone()}


def check_launch_mode(hvd):
    from horovod_spark.torch import optimizer

    expected = optimizer.launch_at_step(None)
    model = _mlp()
    opt = hvd.DistributedOptimizer(_sgd(model.parameters()), named_parameters=model.named_parameters())
    assert opt._launch_at_step is expected
    x, y = _batches(steps=1)[0]
    torch.nn.functional.mse_loss(model(_shard(x, hvd.rank(), hvd.size())), _shard(y, hvd.rank(), hvd.size())).backward()
    started = [handle is not None for handle, _ in opt._handles.values()]
    assert len(started) == 4 and all(started) is not expected and any(started) is not expected, started
    opt.step()
    _close(_flat_params(model), _train_reference(_sgd, steps=1), rtol=1e-10, atol=1e-10)
    return {"params": _flat_params(model)}


def check_ranks_that_launch_at_different_times_still_match(hvd):
    from horovod_spark.torch import optimizer

    chosen = optimizer.launch_at_step
    optimizer.launch_at_step = lambda params: hvd.rank() == 0
    try:
        result = _check_matches_reference(hvd, _sgd)
    finally:
        optimizer.launch_at_step = chosen
    return result


def check_launch_policy(hvd):
    """The real policy: every rank here is on one host with CPU parameters, so it launches at
    step() exactly when the host's cores are all taken by the ranks' compute threads."""

    from horovod_spark.torch import optimizer_launch

    params = list(_mlp().parameters())
    threads = torch.get_num_threads()
    try:
        # The CPUs of all local ranks together, not this rank's own (run_local binds it to a share).
        assert optimizer_launch.local_cpus() >= len(os.sched_getaffinity(0))
        torch.set_num_threads(optimizer_launch.local_cpus())
        assert optimizer_launch.launch_at_step(params)
        if optimizer_launch.local_cpus() > hvd.local_size():
            torch.set_num_threads(1)  # CPUs without a compute thread carry the communication meanwhile
            assert not optimizer_launch.launch_at_step(params)
        assert not optimizer_launch.launch_at_step([torch.empty(3, device="meta")])
        assert not optimizer_launch.launch_at_step([])
    finally:
        torch.set_num_threads(threads)
    return {}


CHECKS = [name for name in list(globals()) if name.startswith("check_")]


@pytest.fixture(scope="module", params=list(LAUNCH_MODES))
def rank_results(request):
    return run_local(_run_checks, args=(CHECKS, LAUNCH_MODES[request.param]), num_proc=2, timeout=RANK_TIMEOUT)


@pytest.mark.parametrize("check", CHECKS)
def test_two_ranks(rank_results, check):
    per_rank = [results[check] for results in rank_results]
    for rank, result in enumerate(per_rank):
        assert "error" not in result, "rank %d:\n%s" % (rank, result["error"])
    # Whatever a check returns must be bit-identical on every rank.
    for key, value in per_rank[0].items():
        for rank, result in enumerate(per_rank[1:], start=1):
            assert torch.equal(result[key], value), "%s differs between rank 0 and rank %d" % (key, rank)
