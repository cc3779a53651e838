"""Train a small MLP on scikit-learn's bundled digits data set with horovod_spark.torch.

    horovod-spark-run -np 2 python examples/torch_digits.py

Each rank trains on its own shard; DistributedOptimizer averages gradients so every rank holds
the same model. Rank 0 prints test accuracy (>= 0.9 expected).
"""
import argparse

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import horovod_spark.torch as hvd


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    hvd.init()
    torch.manual_seed(1234)
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    # Each rank takes every size()-th row: disjoint shards that together cover the training set.
    x_shard = torch.from_numpy(x_train[hvd.rank()::hvd.size()])
    y_shard = torch.from_numpy(y_train[hvd.rank()::hvd.size()])

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    # Scale the learning rate by the number of ranks, as Horovod recommends.
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)

    steps = int(np.ceil(len(x_shard) / args.batch_size))
    for epoch in range(args.epochs):
        perm = torch.randperm(len(x_shard))
        total = 0.0
        for i in range(steps):
            idx = perm[i * args.batch_size:(i + 1) * args.batch_size]
            opt.zero_grad()
            loss = F.cross_entropy(model(x_shard[idx]), y_shard[idx].long())
            loss.backward()
            opt.step()
            total += loss.item()
        avg = hvd.allreduce(torch.tensor(total / steps), name="epoch_loss").item()
        if hvd.rank() == 0 and (epoch % 5 == 4 or epoch == args.epochs - 1):
            print("epoch %d: train loss %.4f" % (epoch + 1, avg), flush=True)

    with torch.no_grad():
        pred = model(torch.from_numpy(x_test)).argmax(dim=1).numpy()
    accuracy = float((pred == y_test).mean())
    if hvd.rank() == 0:
        print("test accuracy: %.4f (%d ranks)" % (accuracy, hvd.size()), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
