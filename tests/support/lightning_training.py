"""A small regression trained by Lightning on the ranks of a job, and the same training done by one
plain torch process, for the HorovodStrategy tests (tests/lightning/).

Data: ROWS rows, BATCH rows per rank and batch. Lightning shards a training DataLoader with a
shuffling DistributedSampler (seed 0 without seed_everything, reshuffled each epoch); batch k of
every rank together make one batch of N * BATCH rows, and averaging the ranks' gradients must give
that batch's gradient, which the reference computes in one process. Rank r starts from seed r's
weights; the strategy's broadcast must make every rank start from rank 0's, as the reference does.
"""
import os

import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

ROWS = 32
FEATURES = 4
BATCH = 4
EPOCHS = 3
LR = 0.05
MOMENTUM = 0.9


def data():
    generator = torch.Generator().manual_seed(1234)
    x = torch.randn(ROWS, FEATURES, generator=generator)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(ROWS, 1, generator=generator)
    return x, y


def loader(batch_size=BATCH):
    return DataLoader(TensorDataset(*data()), batch_size=batch_size, shuffle=False)


def initial_layer(seed):
    torch.manual_seed(seed)
    return torch.nn.Linear(FEATURES, 1)


def make_optimizer(parameters):
    """SGD with momentum (state that the wrapped optimizer must keep) and an LR halved every 2 epochs
    (a scheduler that must follow the wrapped optimizer)."""
    optimizer = torch.optim.SGD(parameters, lr=LR, momentum=MOMENTUM)
    return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)


def doubled_batches(num_ranks, epoch):
    """The rows of each batch of every rank together, in step order, as DistributedSampler shards them."""
    shards = []
    for r in range(num_ranks):
        sampler = DistributedSampler(TensorDataset(*data()), num_replicas=num_ranks, rank=r, shuffle=True, seed=0)
        sampler.set_epoch(epoch)
        shards.append(list(sampler))
    return [torch.tensor([i for shard in shards for i in shard[start:start + BATCH]])
            for start in range(0, len(shards[0]), BATCH)]


def reference_weights(num_ranks, accumulate=1, epochs=EPOCHS):
    """One process, batches of ``num_ranks * BATCH`` rows, gradients of ``accumulate`` batches
    summed (each loss divided by ``accumulate``, as Lightning does) per step."""
    layer = initial_layer(0)
    optimizer, scheduler = make_optimizer(layer.parameters())
    features, targets = data()
    for epoch in range(epochs):
        batches = [(features[rows], targets[rows]) for rows in doubled_batches(num_ranks, epoch)]
        for start in range(0, len(batches), accumulate):
            optimizer.zero_grad()
            for x, y in batches[start:start + accumulate]:
                (torch.nn.functional.mse_loss(layer(x), y) / accumulate).backward()
            optimizer.step()
        scheduler.step()
    return [p.detach().clone() for p in layer.parameters()]


def check_trained_like_one_process(results, accumulate=1):
    """Asserts that two ranks (``results``: what ``train`` returned on each) ended with identical
    weights, those of ``reference_weights``, after as many optimizer steps as one process takes."""
    reference = reference_weights(num_ranks=2, accumulate=accumulate)
    rank0, rank1 = (result["weights"] for result in results)
    for a, b in zip(rank0, rank1):
        assert torch.equal(a, b), "the ranks ended with different weights"
    for got, want in zip(rank0, reference):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    steps_per_epoch = ROWS // (2 * BATCH) // accumulate
    assert [result["global_step"] for result in results] == [EPOCHS * steps_per_epoch] * 2


def rank():
    return int(os.environ["HOROVOD_RANK"])


def module_class():
    import lightning.pytorch as pl

    class Regression(pl.LightningModule):
        """Logs, per epoch, ``plus_one`` = rank + 1 synchronised as a mean, a sum and a max, and the
        loss; ``manual_passes`` > 0 trains by manual optimization, stepping after that many
        ``manual_backward`` calls (each of loss / manual_passes)."""

        def __init__(self, seed, manual_passes=0):
            super().__init__()
            self.layer = initial_layer(seed)
            self.manual_passes = manual_passes
            self.automatic_optimization = manual_passes == 0
            self.gathered = None

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.layer(x), y)
            plus_one = torch.tensor(float(rank() + 1))
            self.log("plus_one_mean", plus_one, sync_dist=True, on_step=False, on_epoch=True)
            self.log("plus_one_sum", plus_one, sync_dist=True, on_step=False, on_epoch=True, reduce_fx="sum")
            self.log("plus_one_max", plus_one, sync_dist=True, on_step=False, on_epoch=True, reduce_fx="max")
            self.log("train_loss", loss, sync_dist=True, on_step=False, on_epoch=True)
            if self.automatic_optimization:
                return loss
            optimizer = self.optimizers()
            self.manual_backward(loss / self.manual_passes)
            if (batch_idx + 1) % self.manual_passes == 0:
                optimizer.step()
                optimizer.zero_grad()
            return None

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y), sync_dist=True)

        def on_train_epoch_end(self):
            if not self.automatic_optimization:
                self.lr_schedulers().step()

        def on_train_end(self):
            self.gathered = self.all_gather(torch.tensor([float(rank())]))

        def configure_optimizers(self):
            optimizer, scheduler = make_optimizer(self.parameters())
            return [optimizer], [scheduler]

    return Regression


def make_module(seed, manual_passes=0):
    return module_class()(seed, manual_passes)


def trainer(strategy, **kwargs):
    import lightning.pytorch as pl
    options = dict(max_epochs=EPOCHS, accelerator="cpu", logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False)
    options.update(kwargs)
    return pl.Trainer(strategy=strategy, **options)


def train(accumulate=1, manual_passes=0, strategy_kwargs=None, **trainer_kwargs):
    """Fit a Regression from seed ``rank()`` under HorovodStrategy on this rank; returns its final
    weights, the synced metrics, what ``all_gather`` gave, and the warnings raised during fit."""
    import warnings

    from horovod_spark.lightning import HorovodStrategy
    module = make_module(rank(), manual_passes)
    fit_trainer = trainer(HorovodStrategy(**(strategy_kwargs or {})), accumulate_grad_batches=accumulate,
                          **trainer_kwargs)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit_trainer.fit(module, loader())
    return {
        "weights": [p.detach().clone() for p in module.parameters()],
        "metrics": {k: float(v) for k, v in fit_trainer.callback_metrics.items()},
        "gathered": module.gathered,
        "warnings": [str(w.message) for w in caught],
        "global_step": fit_trainer.global_step,
    }
