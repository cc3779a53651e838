"""A small real DistributedDataParallel training, as a function (``train``) and as a script
(``ddp_script.py``, which imports this module from its own folder, as ``python script.py`` allows),
and the single-process training it must equal (``reference_weights``): DDP averages the ranks'
gradients, so with equal batches per rank it takes the steps of one process on all ranks' rows."""
import json
import os

FEATURES = 4


def _rows(rank: int):
    import torch
    generator = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(16, FEATURES, generator=generator)
    y = x @ torch.arange(1.0, FEATURES + 1).unsqueeze(1) + 0.5
    return x, y


def _model():
    import torch
    torch.manual_seed(0)
    return torch.nn.Linear(FEATURES, 1)


def _fit(model, x, y, steps: int, lr: float):
    import torch
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


def train(steps: int = 5, lr: float = 0.05, backend: str = "gloo") -> dict:
    """DDP training under torch.distributed's environment (init_process_group with no address)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group(backend)
    try:
        rank = dist.get_rank()
        model = DistributedDataParallel(_model())
        x, y = _rows(rank)
        _fit(model, x, y, steps, lr)
        dist.barrier()  # rank 0 hosts the store: it leaves only once every rank is done with it
        return {"rank": rank, "world_size": dist.get_world_size(), "local_rank": int(os.environ["LOCAL_RANK"]),
                "local_world_size": int(os.environ["LOCAL_WORLD_SIZE"]),
                "weights": [p.detach().flatten().tolist() for p in model.module.parameters()]}
    finally:
        dist.destroy_process_group()


def reference_weights(world_size: int, steps: int = 5, lr: float = 0.05) -> list:
    import torch
    rows = [_rows(rank) for rank in range(world_size)]
    model = _model()
    _fit(model, torch.cat([x for x, _ in rows]), torch.cat([y for _, y in rows]), steps, lr)
    return [p.detach().flatten().tolist() for p in model.parameters()]


def script_main(argv=None) -> None:
    """``ddp_script.py --steps N --lr LR --out DIR``: train, then each rank writes DIR/rank<R>.json."""
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, required=True)
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    result = train(args.steps, args.lr)
    with open(os.path.join(args.out, "rank%d.json" % result["rank"]), "w") as f:
        json.dump(result, f)
