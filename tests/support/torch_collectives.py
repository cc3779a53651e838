"""Every collective family of horovod_spark.torch once, on tensors of a chosen device.

Shared by tests/frameworks/test_torch_staging.py (CPU tensors through the staging thread) and
tests/gpu/ (CUDA tensors): each compares these results with the direct CPU path's on the same ranks.
"""
import torch

# Results from index TRAINED_FROM on are the parameters of a small model trained for three steps.
TRAINED_FROM = -4


def all_collectives(hvd, device):
    """Run every collective on ``device`` tensors; returns the results (on the device they came
    back on, detached), in a fixed order."""
    r = hvd.rank()
    gen = torch.Generator().manual_seed(7 + r)
    x = torch.randn(4, 3, generator=gen).to(device)
    out = [hvd.allreduce(x, name="s.ar"), hvd.allreduce(x, op=hvd.Sum), hvd.allreduce(x.t(), op=hvd.Max)]
    y = x.clone()
    hvd.allreduce_(y, op=hvd.Sum, name="s.ar_")
    out.append(y)
    nc = x.clone().t()  # in place on a non-contiguous tensor: the result is copied back into it
    hvd.synchronize(hvd.allreduce_async_(nc, op=hvd.Sum))
    out.append(nc)
    out += hvd.grouped_allreduce([x, x.to(torch.float64), torch.arange(3, device=device) + r], op=hvd.Sum)
    g = [x.clone(), x.clone() * 2]
    hvd.grouped_allreduce_(g, op=hvd.Average)
    out += g
    out.append(hvd.allreduce(x.to(torch.float16), op=hvd.Sum, name="s.half"))
    out.append(hvd.allgather(torch.full((r + 1, 2), float(r), device=device)))
    out += hvd.grouped_allgather([x, torch.arange(r + 2, device=device)])
    out.append(hvd.broadcast(x, root_rank=1))
    b = x.clone()
    hvd.broadcast_(b, root_rank=0)
    out.append(b)
    gathered, splits = hvd.alltoall(torch.arange(6.0, device=device) + 10 * r, splits=torch.tensor([2, 4]))
    out += [gathered, splits]
    out.append(hvd.reducescatter(x, op=hvd.Sum))
    out += hvd.grouped_reducescatter([x, x * 3], op=hvd.Average)
    handle = hvd.allreduce_async(x, op=hvd.Sum, name="s.polled")
    while not hvd.poll(handle):
        pass
    out.append(hvd.synchronize(handle))
    # Autograd through a collective: the gradient of allreduce(Sum) is allreduce(Sum) of the gradient.
    leaf = x.clone().requires_grad_()
    hvd.allreduce(leaf, op=hvd.Sum, name="s.grad").sum().backward()
    out.append(leaf.grad)
    out += _training_steps(hvd, device)
    return [t.detach() for t in out]


def _training_steps(hvd, device):
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    gen = torch.Generator().manual_seed(100 + hvd.rank())
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(5, 3, generator=gen).to(device)).pow(2).mean().backward()
        opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    return [p.detach() for p in model.parameters()]


PEER_DELAY_S = 2.0


def backward_and_step_seconds(hvd, device):
    """Rank 1 starts its backward pass PEER_DELAY_S late. Returns (seconds in backward, seconds in
    step) on this rank: gradient hooks that do not block leave rank 0's backward short and its
    wait for rank 1 in step()."""
    import time
    torch.manual_seed(5)
    model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)]).to(device)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    loss = model(torch.randn(64, 256).to(device)).pow(2).mean()
    hvd.barrier()
    if hvd.rank() == 1:
        time.sleep(PEER_DELAY_S)
    started = time.perf_counter()
    loss.backward()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    backward_s = time.perf_counter() - started
    started = time.perf_counter()
    opt.step()
    return backward_s, time.perf_counter() - started
