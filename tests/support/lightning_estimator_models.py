"""LightningModules, data and callbacks for the Lightning estimator tests (tests/estimator/test_lightning_*.py)."""
import lightning.pytorch as pl
import numpy as np
import torch

FEATURES = 6


def rows(n, seed):
    """(features, labels): 6 features, label 1 where x0 + 0.5 x1 - x2 > 0."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, FEATURES))
    return x, (x[:, 0] + 0.5 * x[:, 1] - x[:, 2] > 0).astype(int)


def data_frame(spark, n, seed, partitions=2):
    from pyspark.ml.linalg import Vectors
    x, labels = rows(n, seed)
    return spark.createDataFrame([(i, Vectors.dense(r.tolist()), int(label))
                                  for i, (r, label) in enumerate(zip(x, labels))],
                                 ["id", "features", "label"]).repartition(partitions)


class Classifier(pl.LightningModule):
    """A linear classifier of the ``features`` column; logs train_loss, val_loss and val_acc per
    epoch; with ``halve_lr`` its LR scheduler halves the learning rate every epoch."""

    def __init__(self, lr=0.05, halve_lr=False):
        super().__init__()
        self.net = torch.nn.Linear(FEATURES, 2)
        self.lr, self.halve_lr = lr, halve_lr

    def forward(self, features):
        return self.net(features)

    def training_step(self, batch, batch_idx):
        loss = torch.nn.functional.cross_entropy(self(batch["features"]), batch["label"])
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        logits = self(batch["features"])
        self.log("val_loss", torch.nn.functional.cross_entropy(logits, batch["label"]), sync_dist=True)
        self.log("val_acc", (logits.argmax(dim=1) == batch["label"]).float().mean(), sync_dist=True)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.lr)
        if not self.halve_lr:
            return optimizer
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)}


class TensorDataModule(pl.LightningDataModule):
    """Its own rows (not the DataFrame's), as map-style datasets: Lightning shards them per rank.
    Built as an instance, or by the estimator from keywords (it records the ones it took)."""

    def __init__(self, train_batch_size=16, cur_shard=None, shard_count=None):
        super().__init__()
        self.batch_size, self.shard = train_batch_size, (cur_shard, shard_count)

    def _dataset(self, n, seed):
        x, labels = rows(n, seed)
        features = torch.tensor(x, dtype=torch.float32)
        return torch.utils.data.StackDataset(features=features, label=torch.tensor(labels))

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self._dataset(320, 10), batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self):
        return torch.utils.data.DataLoader(self._dataset(160, 11), batch_size=self.batch_size)


def held_out_accuracy(module, n=1000, seed=1):
    x, labels = rows(n, seed)
    with torch.no_grad():
        predicted = module(torch.tensor(x, dtype=torch.float32)).argmax(dim=1).numpy()
    return float(np.mean(predicted == labels))


class KillExecutorAtBatch(pl.Callback):
    """``support.executor_kill.KillExecutorAtStep`` as a Lightning callback."""

    def __init__(self, marker, rank, epoch, step):
        from support.executor_kill import KillExecutorAtStep
        self.killer = KillExecutorAtStep(marker, rank, epoch, step)

    def on_train_start(self, trainer, pl_module):
        self.killer.on_train_begin(trainer.global_rank, trainer.world_size)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.killer.on_batch_end(trainer.current_epoch, batch_idx, {})


class AwaitReplacementAtEpochEnd(pl.Callback):
    """``support.executor_kill.AwaitReplacement`` as a Lightning callback."""

    def __init__(self, marker, size):
        from support.executor_kill import AwaitReplacement
        self.waiter = AwaitReplacement(marker, size)

    def on_train_epoch_end(self, trainer, pl_module):
        self.waiter.on_epoch_end(trainer.current_epoch)
