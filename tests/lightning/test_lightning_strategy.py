"""HorovodStrategy on 2 local ranks (run_local): the ranks train like one process on the doubled
batch, end with identical weights, sync logged metrics, agree on early stopping, and write
checkpoints and logs once."""
import os

import pytest
import torch

pytest.importorskip("lightning.pytorch", reason="Lightning is not installed (pip install 'horovod_spark[lightning]')")

from support import lightning_training as lt  # noqa: E402

from horovod_spark.launcher import run_local  # noqa: E402

pytestmark = pytest.mark.timeout(240)


@pytest.mark.legacy_stack
@pytest.mark.parametrize("accumulate", [1, 2])
def test_two_ranks_train_like_one_process_on_the_doubled_batch(accumulate):
    results = run_local(lt.train, kwargs={"accumulate": accumulate}, num_proc=2, timeout=180)
    lt.check_trained_like_one_process(results, accumulate)
    for result in results:
        metrics = result["metrics"]
        # rank + 1 on ranks 0 and 1 at each step, reduced over the epoch's steps and the ranks as
        # self.log(reduce_fx=...) asked
        batches_per_epoch = lt.ROWS // (2 * lt.BATCH)
        assert metrics["plus_one_mean"] == pytest.approx(1.5)
        assert metrics["plus_one_sum"] == pytest.approx(3.0 * batches_per_epoch)
        assert metrics["plus_one_max"] == pytest.approx(2.0)
        assert result["gathered"].tolist() == [[0.0], [1.0]]
        # The LR scheduler follows the wrapped optimizer without torch's warnings about its step.
        assert not [w for w in result["warnings"] if "optimizer.step()" in w], result["warnings"]
    assert results[0]["metrics"]["train_loss"] == results[1]["metrics"]["train_loss"]


def test_manual_optimization_averages_at_each_step():
    results = run_local(lt.train, kwargs={"manual_passes": 2, "strategy_kwargs": {"backward_passes_per_step": 2}},
                        num_proc=2, timeout=180)
    lt.check_trained_like_one_process(results, accumulate=2)


def _fit_with_early_stopping():
    import lightning.pytorch as pl

    class Watched(lt.module_class()):
        """Logs ``watched`` unsynced: it keeps falling on rank 0 and stops falling after epoch 1 on
        rank 1, so only rank 1 would stop by itself."""

        def training_step(self, batch, batch_idx):
            epoch = self.current_epoch
            value = 1.0 / (epoch + 1) if lt.rank() == 0 or epoch < 2 else 0.5
            self.log("watched", value, on_step=False, on_epoch=True)
            return super().training_step(batch, batch_idx)

    from horovod_spark.lightning import HorovodStrategy
    stopper = pl.callbacks.EarlyStopping(monitor="watched", patience=1, mode="min", check_on_train_epoch_end=True)
    trainer = lt.trainer(HorovodStrategy(), max_epochs=10, callbacks=[stopper])
    module = Watched(lt.rank())
    trainer.fit(module, lt.loader())
    return trainer.current_epoch, stopper.stopped_epoch, [p.detach().clone() for p in module.parameters()]


def test_early_stopping_stops_every_rank_at_the_same_epoch():
    (epochs0, stopped0, weights0), (epochs1, stopped1, weights1) = run_local(_fit_with_early_stopping, num_proc=2,
                                                                             timeout=180)
    assert stopped0 == stopped1 == 2
    assert epochs0 == epochs1 == 3
    for a, b in zip(weights0, weights1):
        assert torch.equal(a, b)


def _fit_with_checkpoints_and_logger(directory):
    import lightning.pytorch as pl
    from lightning.pytorch.plugins.io import TorchCheckpointIO

    class CountedWrites(TorchCheckpointIO):
        """Writes checkpoints as usual and notes, per rank, each file it was asked to write."""

        def save_checkpoint(self, checkpoint, path, storage_options=None):
            with open(os.path.join(directory, "writes.%d" % lt.rank()), "a") as f:
                f.write(os.path.basename(str(path)) + "\n")
            super().save_checkpoint(checkpoint, path, storage_options)

    from horovod_spark.lightning import HorovodStrategy
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=os.path.join(directory, "ckpt"), filename="{epoch}",
                                               save_top_k=-1, every_n_epochs=1)
    logger = pl.loggers.CSVLogger(os.path.join(directory, "logs"))
    trainer = lt.trainer(HorovodStrategy(checkpoint_io=CountedWrites()), callbacks=[checkpoints], logger=logger,
                         enable_checkpointing=True, log_every_n_steps=1)
    module = lt.make_module(lt.rank())
    trainer.fit(module, lt.loader())
    return [p.detach().clone() for p in module.parameters()]


def test_checkpoints_and_logs_are_written_once_by_rank_zero(tmp_path):
    weights, _ = run_local(_fit_with_checkpoints_and_logger, args=(str(tmp_path),), num_proc=2, timeout=180)
    expected = ["epoch=%d.ckpt" % e for e in range(lt.EPOCHS)]
    assert (tmp_path / "writes.0").read_text().split() == expected
    assert not (tmp_path / "writes.1").exists()
    assert sorted(os.listdir(tmp_path / "ckpt")) == expected
    last = torch.load(tmp_path / "ckpt" / expected[-1], weights_only=False)
    assert torch.equal(last["state_dict"]["layer.weight"], weights[0])
    assert len(last["optimizer_states"]) == 1 and last["optimizer_states"][0]["state"]  # momentum buffers
    versions = os.listdir(tmp_path / "logs" / "lightning_logs")
    assert versions == ["version_0"]
    assert (tmp_path / "logs" / "lightning_logs" / "version_0" / "metrics.csv").exists()


def _collectives():
    from lightning.fabric.utilities.types import ReduceOp
    from lightning.pytorch.utilities.rank_zero import rank_zero_only

    import horovod_spark.torch as hvd
    from horovod_spark.lightning import HorovodStrategy
    strategy = HorovodStrategy()
    trainer = lt.trainer(strategy)  # the Trainer joins the job and sets the ranks
    r = hvd.rank()
    out = {
        "ranks": (strategy.global_rank, strategy.local_rank, strategy.node_rank, strategy.world_size,
                  strategy.is_global_zero, rank_zero_only.rank, trainer.global_rank, trainer.world_size),
        "sampler": strategy.distributed_sampler_kwargs,
        "mean": strategy.reduce(torch.tensor([r + 1.0])).item(),
        "sum": strategy.reduce(torch.tensor([r + 1.0]), reduce_op="sum").item(),
        "op_sum": strategy.reduce(torch.tensor([r + 1.0]), reduce_op=ReduceOp.SUM).item(),
        "min": strategy.reduce(torch.tensor([r + 1.0]), reduce_op="min").item(),
        "int_mean": strategy.reduce(torch.tensor([r + 1])).tolist(),
        "not_a_tensor": strategy.reduce(7),
        "any": strategy.reduce_boolean_decision(r == 1, all=False),
        "all": strategy.reduce_boolean_decision(r == 1, all=True),
        "broadcast": strategy.broadcast({"from": r}, src=1),
        "gathered": strategy.all_gather(torch.tensor([[r, r + 10]])).tolist(),
    }
    with pytest.raises(ValueError, match="process sets"):
        strategy.reduce(torch.ones(1), group="not a group")
    with pytest.raises(ValueError, match="not supported"):
        strategy.reduce(torch.ones(1), reduce_op="median")
    # d(sum of every rank's row)/d(this rank's row) is 1 on each of the 2 ranks: summed, 2.
    p = torch.tensor(1.0, requires_grad=True)
    strategy.all_gather(p * (r + 1), sync_grads=True).sum().backward()
    out["sync_grads"] = p.grad.item()
    strategy.barrier("after collectives")

    # Evaluating without fitting starts every rank from rank 0's weights too.
    module = lt.make_module(seed=r)
    out["validated"] = trainer.validate(module, lt.loader(), verbose=False)[0]["val_loss"]
    out["weights"] = [p.detach().clone() for p in module.parameters()]
    return out


def test_collectives_ranks_and_evaluation():
    results = run_local(_collectives, num_proc=2, timeout=180)
    for r, out in enumerate(results):
        assert out["ranks"] == (r, r, 0, 2, r == 0, r, r, 2)
        assert out["sampler"] == {"num_replicas": 2, "rank": r}
        assert (out["mean"], out["sum"], out["op_sum"], out["min"]) == (1.5, 3.0, 3.0, 1.0)
        assert out["int_mean"] == [1.5]
        assert out["not_a_tensor"] == 7
        assert (out["any"], out["all"]) == (True, False)
        assert out["broadcast"] == {"from": 1}
        assert out["gathered"] == [[[0, 10]], [[1, 11]]]
        assert out["sync_grads"] == 2.0 * (r + 1)
    layer = lt.initial_layer(0)
    reference = [p.detach() for p in layer.parameters()]
    # Each rank validates half of the rows (equal halves): the synced mean is the mean over all rows.
    full_loss = torch.nn.functional.mse_loss(layer(lt.data()[0]), lt.data()[1]).item()
    for out in results:
        for got, want in zip(out["weights"], reference):
            assert torch.equal(got, want)
        assert out["validated"] == pytest.approx(full_loss, rel=1e-6)


def _fit_twice_after_a_refused_fit():
    from horovod_spark.lightning import HorovodStrategy
    module = lt.make_module(lt.rank())
    refused = lt.trainer(HorovodStrategy(backward_passes_per_step=2))
    with pytest.raises(ValueError, match="accumulate_grad_batches=2"):
        refused.fit(module, lt.loader())
    # A second fit of the same module: the first fit's wrapped optimizer (and its gradient hooks) must
    # be gone, or they would count the second fit's backward passes too.
    for epochs in (1, 2):
        lt.trainer(HorovodStrategy(), max_epochs=epochs).fit(module, lt.loader())
    return [p.detach().clone() for p in module.parameters()]


def test_a_module_fits_again_and_misplaced_backward_passes_are_refused():
    weights0, weights1 = run_local(_fit_twice_after_a_refused_fit, num_proc=2, timeout=180)
    for a, b in zip(weights0, weights1):
        assert torch.equal(a, b)
    # (Each fit restarts the LR schedule: the weights need only have moved from rank 0's start.)
    assert not torch.equal(weights0[0], lt.initial_layer(0).weight.detach())
    with pytest.raises(ValueError, match="backward_passes_per_step"):
        from horovod_spark.lightning import HorovodStrategy
        HorovodStrategy(backward_passes_per_step=0)
